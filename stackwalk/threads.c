/* Walks of other threads and thread dumps. crawl_walk_thread stops the
 * target with a signal; its handler walks the target's own stack from the
 * interrupted context (a signal-safe walk, into a fixed buffer of frame
 * copies), tells the requester and waits; the requester hands each frame
 * to the callback in normal context, then lets the target go. The target
 * is stopped for the whole callback run, so Frames and VM activations the
 * copies point to stay valid. One request at a time (a mutex). */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "stackwalk/internal.h"

#define MAX_FRAMES 256

typedef struct copy {
    crawl_cf cf;
    crawl_regs regs;
    crawl_vm_frame vm;
} copy;

/* The request being served. state holds the target's tid and a phase:
 * SENT (tid<<3|1), TAKEN (|2: the target's handler walks), WALKED (|3: the
 * target waits); 0 otherwise. A handler takes a request by compare-and-swap
 * SENT(its own tid) -> TAKEN, and the requester withdraws one by SENT -> 0,
 * so exactly one of them wins: a withdrawn request is never walked, a
 * taken one is always waited for (a target must never wait in its handler
 * for a requester that has gone), and a late signal never takes another
 * thread's request (the tid is in the same word; pid_max is at most 2^22).
 * A target waits for `released` to reach its own request's number, not for
 * state to leave WALKED: state comes back to WALKED with the next request
 * for the same thread (or the next thread's, were it a phase alone) before
 * a slow target may have looked (seen under load: the target waited again,
 * for good). */
#define SENT(tid) ((int)(tid) << 3 | 1)
#define TAKEN(tid) ((int)(tid) << 3 | 2)
#define WALKED(tid) ((int)(tid) << 3 | 3)
static struct {
    unsigned flags;
    atomic_int state;
    atomic_uint released;               /* number of the last request whose target may go on */
    unsigned seq;                       /* number of the request being served */
    crawl_walk_status status;
    unsigned n;
    copy *frames;                       /* MAX_FRAMES, mapped on first use (data stays small) */
    uintptr_t gprs[SW_GPRS];            /* the target's registers (sw_walk_thread_gprs) */
    atomic_int caller;                  /* the requester's tid while it runs the callback */
} req;
static pthread_mutex_t req_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t dump_lock = PTHREAD_MUTEX_INITIALIZER;   /* outside req_lock */
static pthread_mutex_t workers_lock = PTHREAD_MUTEX_INITIALIZER;

/* fork(): a child must not inherit these held by a thread that dumped,
 * walked or installed a worker at the fork (its first dump would wait for
 * ever). Only the child resets them: taking them before the fork would
 * order them against the symbolizer's lock, which a dump holds dump_lock
 * around. What they guard is restarted by its next user (a dump, a
 * request); a request under way belonged to threads the child has not. */
static void forget_workers(void);
static void fork_child(void)
{
    pthread_mutex_init(&req_lock, NULL);
    pthread_mutex_init(&dump_lock, NULL);
    pthread_mutex_init(&workers_lock, NULL);
    atomic_store(&req.state, 0);
    atomic_store(&req.released, req.seq);
    forget_workers();
}
__attribute__((constructor)) static void register_fork_handlers(void)
{
    pthread_atfork(NULL, NULL, fork_child);
}
static int walk_signal;                 /* 0 until first use */

static long futex(atomic_int *addr, int op, int val, const struct timespec *timeout)
{
    return syscall(SYS_futex, addr, op, val, timeout, NULL, 0);
}

static crawl_action keep(const crawl_cf *cf, void *ctx)
{
    (void)ctx;
    if (req.n == MAX_FRAMES)
        return CRAWL_ABORT;              /* (the walk's ABORTED: more than MAX_FRAMES frames) */
    copy *c = &req.frames[req.n++];
    c->cf = *cf;
    if (cf->regs) {
        c->regs = *cf->regs;
        c->cf.regs = &c->regs;
    }
    if (cf->vm) {
        c->vm = *cf->vm;
        c->cf.vm = &c->vm;
    }
    return CRAWL_CONTINUE;
}

static void on_walk_signal(int sig, siginfo_t *si, void *ucv)
{
    (void)sig, (void)si;
    int saved = errno;
    pid_t self = (pid_t)syscall(SYS_gettid);
    int sent = SENT(self);
    if (!atomic_compare_exchange_strong(&req.state, &sent, TAKEN(self))) {
        errno = saved;                   /* late, withdrawn or stray: nothing asked of this thread */
        return;
    }
    unsigned mine = req.seq;
    req.n = 0;
    const greg_t *g = ((const ucontext_t *)ucv)->uc_mcontext.gregs;
    static const int which[SW_GPRS] = {REG_RAX, REG_RBX, REG_RCX, REG_RDX, REG_RSI, REG_RDI,
                                       REG_RBP, REG_RSP, REG_R8,  REG_R9,  REG_R10, REG_R11,
                                       REG_R12, REG_R13, REG_R14, REG_R15, REG_RIP};
    for (int i = 0; i < SW_GPRS; i++)
        req.gprs[i] = (uintptr_t)g[which[i]];
    req.status = crawl_walk_context((const ucontext_t *)ucv, keep, NULL,
                                    req.flags | CRAWL_WALK_SIGNAL_SAFE);
    atomic_store(&req.state, WALKED(self));
    futex(&req.state, FUTEX_WAKE_PRIVATE, INT_MAX, NULL);
    for (;;) {                           /* stopped while the callback runs */
        unsigned r = atomic_load(&req.released);
        if ((int)(r - mine) >= 0)
            break;
        futex((atomic_int *)&req.released, FUTEX_WAIT_PRIVATE, (int)r, NULL);
    }
    errno = saved;
}

int sw_walk_thread_gprs(uintptr_t out[SW_GPRS])
{
    /* (a caller that finds its own tid there holds req_lock) */
    if (atomic_load_explicit(&req.caller, memory_order_relaxed) != (int)syscall(SYS_gettid))
        return -1;
    memcpy(out, req.gprs, sizeof req.gprs);
    return 0;
}

int sw_walk_signal_now(void)
{
    int sig = __atomic_load_n(&walk_signal, __ATOMIC_RELAXED);
    return sig ? sig : SIGRTMIN + 3;
}

static int held_by_helper(int sig);

int crawl_set_walk_signal(int sig)
{
    if (sig <= 0 || sig >= NSIG || sig == SIGKILL || sig == SIGSTOP || sig == SIGPROF)
        return -EINVAL;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_walk_signal;
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
    sigemptyset(&sa.sa_mask);
    /* (workers_lock first, as sw_on_signal_run holds it while it looks at
     * the walk signal: a helper's signal and the walk signal never meet) */
    pthread_mutex_lock(&workers_lock);
    int rc = -EBUSY;
    if (!held_by_helper(sig)) {
        pthread_mutex_lock(&req_lock);
        rc = sigaction(sig, &sa, NULL) == 0 ? 0 : -errno;
        if (!rc)
            walk_signal = sig;
        pthread_mutex_unlock(&req_lock);
    }
    pthread_mutex_unlock(&workers_lock);
    return rc;
}

typedef struct find_thread {
    pid_t tid;
    int found;
    unsigned seq;
} find_thread;

static void match_tid(crawl__thread *th, void *ctx)
{
    find_thread *f = ctx;
    if (th->tid == f->tid)
        f->found = 1, f->seq = th->seq;
}

int crawl_walk_thread(pid_t tid, crawl_walk_fn fn, void *ctx, unsigned flags)
{
    return crawl_walk_thread_timeout(tid, fn, ctx, flags, 1000);
}

int crawl_walk_thread_timeout(pid_t tid, crawl_walk_fn fn, void *ctx, unsigned flags,
                              int timeout_ms)
{
    if (!fn || tid <= 0 || tid > (INT_MAX >> 3) || timeout_ms < 0)
        return -EINVAL;                  /* (a tid fits: pid_max is at most 2^22) */
    if (tid == (pid_t)syscall(SYS_gettid))
        return crawl_walk(fn, ctx, flags);
    find_thread f = {.tid = tid};
    crawl__threads_foreach_locked(match_tid, &f);
    if (!f.found)
        return -ESRCH;                   /* not an attached thread of this process */
    if (!walk_signal) {
        int rc = crawl_set_walk_signal(sw_walk_signal_now());   /* the default */
        if (rc)
            return rc;
    }
    static int warmed;                   /* signal-safe walks use rules compiled ahead */
    if (!(flags & CRAWL_WALK_FAST) && !__atomic_exchange_n(&warmed, 1, __ATOMIC_ACQ_REL))
        crawl_cfi_cache_warm();
    pthread_mutex_lock(&req_lock);
    if (!req.frames) {
        void *m = crawl__mmap(MAX_FRAMES * sizeof(copy), PROT_READ | PROT_WRITE, 0);
        if (m == MAP_FAILED) {
            pthread_mutex_unlock(&req_lock);
            return -ENOMEM;
        }
        req.frames = m;
    }
    req.seq++;
    req.flags = flags & ~CRAWL_WALK_SIGNAL_SAFE;
    atomic_store(&req.state, SENT(tid));
    if (syscall(SYS_tgkill, getpid(), tid, walk_signal) != 0) {
        int err = errno;
        atomic_store(&req.state, 0);
        pthread_mutex_unlock(&req_lock);
        return err == ESRCH ? -ESRCH : -err;
    }
    struct timespec deadline, now;
    clock_gettime(CLOCK_MONOTONIC, &deadline);
    deadline.tv_sec += timeout_ms / 1000;
    deadline.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
    if (deadline.tv_nsec >= 1000000000L)
        deadline.tv_sec++, deadline.tv_nsec -= 1000000000L;
    int rc = 0;
    for (;;) {
        int st = atomic_load(&req.state);
        if (st == WALKED(tid))
            break;
        if (st == TAKEN(tid)) {          /* the walk is under way: wait for it */
            futex(&req.state, FUTEX_WAIT_PRIVATE, st, NULL);
            continue;
        }
        clock_gettime(CLOCK_MONOTONIC, &now);
        struct timespec left = {deadline.tv_sec - now.tv_sec, deadline.tv_nsec - now.tv_nsec};
        if (left.tv_nsec < 0)
            left.tv_sec--, left.tv_nsec += 1000000000L;
        if (left.tv_sec < 0) {
            /* withdraw, unless the handler took the request meanwhile */
            int expected = SENT(tid);
            if (atomic_compare_exchange_strong(&req.state, &expected, 0)) {
                rc = syscall(SYS_tgkill, getpid(), tid, 0) != 0 ? -ESRCH : -ETIMEDOUT;
                break;
            }
            continue;
        }
        futex(&req.state, FUTEX_WAIT_PRIVATE, SENT(tid), &left);
    }
    if (!rc) {
        rc = req.status;                 /* DONE, FAILED, or ABORTED: the buffer filled up */
        atomic_store_explicit(&req.caller, (int)syscall(SYS_gettid), memory_order_relaxed);
        for (unsigned i = 0; i < req.n; i++) {
            req.frames[i].cf.thread = f.seq;
            if (fn(&req.frames[i].cf, ctx) == CRAWL_ABORT) {
                rc = CRAWL_WALK_ABORTED;
                break;
            }
        }
        atomic_store_explicit(&req.caller, 0, memory_order_relaxed);
        /* the target's registers go: kept in crawl's data (scanned as
         * static data), they would be a leak check's roots after the
         * target has let go of what they held */
        memset(req.frames, 0, req.n * sizeof *req.frames);
        memset(req.gprs, 0, sizeof req.gprs);
        atomic_store(&req.state, 0);
        atomic_store(&req.released, req.seq);
        futex((atomic_int *)&req.released, FUTEX_WAKE_PRIVATE, INT_MAX, NULL);
    }
    pthread_mutex_unlock(&req_lock);
    return rc;
}

/* ---- thread dumps ------------------------------------------------------------------------ */

typedef struct dump_list {
    pid_t tids[1024];
    unsigned seqs[1024];
    unsigned n;
} dump_list;

static void collect(crawl__thread *th, void *ctx)
{
    dump_list *l = ctx;
    if (l->n < 1024) {
        l->tids[l->n] = th->tid;
        l->seqs[l->n++] = th->seq;
    }
}

/* A stopped thread may hold any lock (malloc's, libdw's): while it is
 * stopped only the Frames' own descriptions are taken (VM hooks that write
 * into a buffer); native frames are symbolized after it goes on. */
typedef struct dump_frame {
    crawl_kind kind;
    unsigned exact;
    uintptr_t ip;
    char text[256];
} dump_frame;

typedef struct dump_out {
    dump_frame f[MAX_FRAMES];
    unsigned n;
} dump_out;

static crawl_action keep_line(const crawl_cf *cf, void *ctx)
{
    dump_out *o = ctx;
    if (o->n == MAX_FRAMES)
        return CRAWL_ABORT;
    dump_frame *d = &o->f[o->n++];
    d->kind = cf->kind;
    d->ip = cf->ip;
    d->exact = (cf->flags & CRAWL_CF_EXACT_IP) != 0;
    d->text[0] = '\0';
    if (cf->kind != CRAWL_CF_NATIVE)
        crawl_cf_describe(cf, d->text, sizeof d->text);
    return CRAWL_CONTINUE;
}

static void print_lines(int fd, const dump_out *o)
{
    char line[1024], text[768];
    for (unsigned i = 0; i < o->n; i++) {
        const dump_frame *d = &o->f[i];
        int k;
        if (d->kind == CRAWL_CF_NATIVE) {
            sw_describe_pc(d->ip, (int)d->exact, text, sizeof text);
            k = snprintf(line, sizeof line, "    #%u 0x%lx in %s\n", i, (unsigned long)d->ip, text);
        } else {
            k = snprintf(line, sizeof line, "    #%u in %s\n", i, d->text);
        }
        if (k > 0)
            crawl__write_all(fd, line, (size_t)k < sizeof line ? (size_t)k : sizeof line - 1);
    }
}

int crawl_print_all_threads(int fd, unsigned flags)
{
    if (fd < 0)
        return -EINVAL;
    static dump_list l;                  /* one dump at a time: under the request lock's shadow */
    pthread_mutex_lock(&dump_lock);
    l.n = 0;
    crawl__threads_foreach_locked(collect, &l);
    char head[512];
    int k = snprintf(head, sizeof head, "crawl thread dump (pid %d): %u attached thread(s)\n",
                     (int)getpid(), l.n);
    crawl__write_all(fd, head, (size_t)k);
    int walked = 0;
    for (unsigned i = l.n; i-- > 0;) {   /* oldest first: the registry is newest first */
        char name[64] = "?", path[64];
        snprintf(path, sizeof path, "/proc/self/task/%d/comm", (int)l.tids[i]);
        int cfd = open(path, O_RDONLY | O_CLOEXEC);
        if (cfd >= 0) {
            ssize_t r = read(cfd, name, sizeof name - 1);
            close(cfd);
            name[r > 0 ? r : 0] = '\0';
            name[strcspn(name, "\n")] = '\0';
        }
        k = snprintf(head, sizeof head, "\n\"%s\" T%u tid=%d\n", name, l.seqs[i], (int)l.tids[i]);
        crawl__write_all(fd, head, (size_t)k);
        dump_out *o = malloc(sizeof *o);
        if (!o)
            break;
        o->n = 0;
        /* the calling thread from its caller on, as crawl_walk: none of
         * crawl's own frames (crawl_walk_thread would start here) */
        int rc;
        if (l.tids[i] == (pid_t)syscall(SYS_gettid)) {
            crawl_regs r;
            crawl_capture_regs(&r);
            rc = sw_walk(&r, 0, 1, keep_line, o, flags);
        } else {
            rc = crawl_walk_thread(l.tids[i], keep_line, o, flags);
        }
        print_lines(fd, o);
        free(o);
        if (rc >= CRAWL_WALK_FAILED)     /* a walk status: walked */
            walked++;
        if (rc != CRAWL_WALK_DONE) {
            k = snprintf(head, sizeof head, "    (%s)\n",
                         rc == -ETIMEDOUT          ? "did not stop within 1 s: signal blocked or busy"
                         : rc == -ESRCH            ? "exited meanwhile"
                         : rc == CRAWL_WALK_FAILED ? "walk stopped at an inconsistent frame"
                         : rc == CRAWL_WALK_ABORTED ? "more than 256 frames"
                                                    : "not walked");
            crawl__write_all(fd, head, (size_t)k);
        }
    }
    /* the last line: a reader of a log (or a test) knows the dump is whole */
    k = snprintf(head, sizeof head, "\nend of crawl thread dump: %d of %u thread(s) walked\n",
                 walked, l.n);
    crawl__write_all(fd, head, (size_t)k);
    pthread_mutex_unlock(&dump_lock);
    return walked;
}

/* ---- work on a signal, done by a helper thread -------------------------------------------- */

#define MAX_SIGNAL_WORKERS 8
static struct signal_worker {
    int sig, pipe[2];
    int pending;                         /* bytes in the pipe or being worked on */
    void (*fn)(void *);
    void *arg;
} workers[MAX_SIGNAL_WORKERS];
/* fork child: the helper threads stayed in the parent; a signal meant for
 * one does nothing until sw_on_signal_run is called again, which starts a
 * new helper. */
static void forget_workers(void)
{
    for (int i = 0; i < MAX_SIGNAL_WORKERS; i++)
        if (workers[i].sig) {
            __atomic_store_n(&workers[i].sig, 0, __ATOMIC_RELEASE);
            __atomic_store_n(&workers[i].pending, 0, __ATOMIC_RELEASE);
            close(workers[i].pipe[0]), close(workers[i].pipe[1]);
        }
}

static void on_work_signal(int sig)
{
    int saved = errno;
    for (int i = 0; i < MAX_SIGNAL_WORKERS; i++)
        if (__atomic_load_n(&workers[i].sig, __ATOMIC_ACQUIRE) == sig) {
            char b = 1;
            /* (counted before the byte can be read: the helper's count
             * down never comes first) */
            __atomic_add_fetch(&workers[i].pending, 1, __ATOMIC_ACQ_REL);
            ssize_t k = write(workers[i].pipe[1], &b, 1);   /* non-blocking: one pending is enough */
            if (k != 1)
                __atomic_sub_fetch(&workers[i].pending, 1, __ATOMIC_ACQ_REL);
        }
    errno = saved;
}

static void *worker_thread(void *arg)
{
    struct signal_worker *w = arg;
    for (;;) {
        char b;
        ssize_t k = read(w->pipe[0], &b, 1);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return NULL;
        w->fn(w->arg);
        __atomic_sub_fetch(&w->pending, 1, __ATOMIC_ACQ_REL);
    }
}

int sw_signal_work_pending(void (*fn)(void *))
{
    int n = 0;
    for (int i = 0; i < MAX_SIGNAL_WORKERS; i++)
        if (__atomic_load_n(&workers[i].sig, __ATOMIC_ACQUIRE) && workers[i].fn == fn)
            n += __atomic_load_n(&workers[i].pending, __ATOMIC_ACQUIRE);
    return n;
}

/* 1 if a helper (sw_on_signal_run) takes sig (under workers_lock) */
static int held_by_helper(int sig)
{
    for (int i = 0; i < MAX_SIGNAL_WORKERS; i++)
        if (__atomic_load_n(&workers[i].sig, __ATOMIC_ACQUIRE) == sig)
            return 1;
    return 0;
}

int sw_signal_refused(int sig)
{
    static const int refused[] = {SIGKILL, SIGSTOP, SIGILL, SIGTRAP, SIGABRT, SIGBUS,
                                  SIGFPE,  SIGSEGV, SIGSYS, SIGPROF, 32,     33};
    if (sig <= 0 || sig >= NSIG || sig == sw_walk_signal_now())
        return 1;
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++)
        if (sig == refused[i])
            return 1;
    return 0;
}

int sw_on_signal_run(int sig, void (*fn)(void *), void *arg)
{
    if (!fn)
        return -EINVAL;
    crawl__lock(&workers_lock);          /* (busy: pthread_create's allocations are crawl's own) */
    int rc = 0, slot = -1;
    /* (under the lock crawl_set_walk_signal takes first: the walk signal
     * cannot move onto sig between this look and the handler) */
    if (sw_signal_refused(sig)) {
        rc = -EINVAL;
        goto out;
    }
    for (int i = 0; i < MAX_SIGNAL_WORKERS && slot < 0; i++)
        if (workers[i].sig == sig || workers[i].sig == 0)
            slot = i;
    if (slot < 0) {
        rc = -ENOSPC;
        goto out;
    }
    struct signal_worker *w = &workers[slot];
    if (w->sig == sig) {                 /* the same signal again: new work, same thread */
        w->fn = fn, w->arg = arg;
        goto out;
    }
    if (pipe2(w->pipe, O_CLOEXEC) != 0) {
        rc = -errno;
        goto out;
    }
    /* (a program started with 0-2 closed took its own writes to stderr
     * into this pipe: each byte wrote a profile) */
    w->pipe[0] = crawl__fd_above_std(w->pipe[0]);
    w->pipe[1] = crawl__fd_above_std(w->pipe[1]);
    if (w->pipe[0] < 0 || w->pipe[1] < 0) {
        rc = -EMFILE;
        if (w->pipe[0] >= 0)
            close(w->pipe[0]);
        if (w->pipe[1] >= 0)
            close(w->pipe[1]);
        goto out;
    }
    fcntl(w->pipe[1], F_SETFL, O_NONBLOCK);
    w->fn = fn, w->arg = arg;
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);   /* the helper never takes a signal */
    pthread_t t;
    rc = -pthread_create(&t, NULL, worker_thread, w);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc) {
        close(w->pipe[0]), close(w->pipe[1]);
        goto out;
    }
    pthread_detach(t);
    __atomic_store_n(&w->sig, sig, __ATOMIC_RELEASE);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_work_signal;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    if (sigaction(sig, &sa, NULL) != 0)
        rc = -errno;
out:
    crawl__unlock(&workers_lock);
    return rc;
}

static void dump_to(void *fd)
{
    crawl_print_all_threads((int)(intptr_t)fd, 0);
}

int crawl_install_thread_dump(int sig, int fd)
{
    if (fd < 0)
        return -EINVAL;
    return sw_on_signal_run(sig, dump_to, (void *)(intptr_t)fd);
}
