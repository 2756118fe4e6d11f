/* The sampling profiler: per-thread CPU-time timers fire SIGPROF at their
 * own thread; the handler captures the mixed stack into the depot
 * (signal-safe walk, no lock, no malloc) and adds one to the stack's count
 * in pages indexed by depot id (ids are dense), mapped on first use. */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <crawl/profiler.h>

#include "sanitizer/heap_output.h"

#define PAGE_BITS 14
#define PAGES 4096                      /* ids up to 2^26 */
static _Atomic(atomic_ulong *) pages[PAGES];
static atomic_ulong samples, failed;
static int running;
static unsigned walk_flags;
static long period_ns;
static struct sigaction old_action;
static pthread_mutex_t prof_lock = PTHREAD_MUTEX_INITIALIZER;

typedef struct thread_timer {
    pid_t tid;
    timer_t timer;
} thread_timer;
#define MAX_TIMERS 4096
static thread_timer *timers;            /* MAX_TIMERS, mapped at the first start */
static unsigned ntimers;

static atomic_ulong *page_of(uint32_t id)
{
    if ((id >> PAGE_BITS) >= PAGES)
        return NULL;
    _Atomic(atomic_ulong *) *slot = &pages[id >> PAGE_BITS];
    atomic_ulong *p = atomic_load_explicit(slot, memory_order_acquire);
    if (p)
        return p;
    void *fresh = crawl__mmap((1u << PAGE_BITS) * sizeof(atomic_ulong), PROT_READ | PROT_WRITE, 0);
    if (fresh == MAP_FAILED)
        return NULL;
    atomic_ulong *expected = NULL;
    if (!atomic_compare_exchange_strong(slot, &expected, fresh)) {
        crawl__munmap(fresh, (1u << PAGE_BITS) * sizeof(atomic_ulong));
        return expected;
    }
    return fresh;
}

static void on_sigprof(int sig, siginfo_t *si, void *uc)
{
    (void)sig, (void)si;
    int saved = errno;
    uint32_t id = san_capture_uc(uc, 64, walk_flags | CRAWL_WALK_SIGNAL_SAFE);
    atomic_ulong *page = id ? page_of(id) : NULL;
    if (page) {
        atomic_fetch_add_explicit(&page[id & ((1u << PAGE_BITS) - 1)], 1, memory_order_relaxed);
        atomic_fetch_add_explicit(&samples, 1, memory_order_relaxed);
    } else {
        atomic_fetch_add_explicit(&failed, 1, memory_order_relaxed);
    }
    errno = saved;
}

/* The timers of threads that have exited are deleted (under prof_lock):
 * a thread's own tid, the kernel's answer to tgkill(tid, 0). A tid
 * reused since by a thread that attaches is start_timer_for's. */
static void prune_timers(void)
{
    unsigned k = 0;
    pid_t pid = getpid();
    for (unsigned i = 0; i < ntimers; i++) {
        if (syscall(SYS_tgkill, pid, timers[i].tid, 0) != 0 && errno == ESRCH)
            timer_delete(timers[i].timer);
        else
            timers[k++] = timers[i];
    }
    ntimers = k;
}

/* A timer on the calling thread's CPU clock (under prof_lock). */
static int start_timer_for(pid_t tid)
{
    for (unsigned i = 0; i < ntimers; i++)
        if (timers[i].tid == tid) {      /* an exited thread's tid, reused */
            timer_delete(timers[i].timer);
            timers[i] = timers[--ntimers];
            break;
        }
    if (ntimers == MAX_TIMERS)
        prune_timers();
    if (ntimers == MAX_TIMERS)
        return -ENOSPC;
    struct sigevent ev;
    memset(&ev, 0, sizeof ev);
    ev.sigev_notify = SIGEV_THREAD_ID;
    ev.sigev_signo = SIGPROF;
    ev._sigev_un._tid = tid;
    clockid_t clock = (clockid_t)((~(unsigned)tid << 3) | 6);   /* the thread's CPU clock (SCHED, per thread) */
    timer_t t;
    if (timer_create(clock, &ev, &t) != 0)
        return -errno;
    struct itimerspec its = {{period_ns / 1000000000L, period_ns % 1000000000L},
                             {period_ns / 1000000000L, period_ns % 1000000000L}};
    if (timer_settime(t, 0, &its, NULL) != 0) {
        int err = errno;
        timer_delete(t);
        return -err;
    }
    timers[ntimers++] = (thread_timer){tid, t};
    return 0;
}

static void each_thread(crawl__thread *th, void *ctx)
{
    (void)ctx;
    start_timer_for(th->tid);
}

static void on_attach(void)
{
    pthread_mutex_lock(&prof_lock);
    if (running)
        start_timer_for((pid_t)syscall(SYS_gettid));
    pthread_mutex_unlock(&prof_lock);
}

int crawl_profiler_start(unsigned hz) { return crawl_profiler_start_flags(hz, 0); }

int crawl_profiler_start_flags(unsigned hz, unsigned flags)
{
    if (hz < 1 || hz > 10000 || (flags & ~(unsigned)CRAWL_WALK_FAST))
        return -EINVAL;
    pthread_mutex_lock(&prof_lock);
    if (running) {
        pthread_mutex_unlock(&prof_lock);
        return -EBUSY;
    }
    pthread_mutex_unlock(&prof_lock);
    if (!(flags & CRAWL_WALK_FAST))
        crawl_cfi_cache_warm();          /* signal-safe walks use rules compiled ahead */
    pthread_mutex_lock(&prof_lock);
    if (running) {                       /* another start came in meanwhile */
        pthread_mutex_unlock(&prof_lock);
        return -EBUSY;
    }
    if (!timers) {
        void *m = crawl__mmap(MAX_TIMERS * sizeof *timers, PROT_READ | PROT_WRITE, 0);
        if (m == MAP_FAILED) {
            pthread_mutex_unlock(&prof_lock);
            return -ENOMEM;
        }
        timers = m;
    }
    for (int i = 0; i < PAGES; i++) {    /* a new profile */
        atomic_ulong *p = atomic_load(&pages[i]);
        if (p)
            memset((void *)p, 0, (1u << PAGE_BITS) * sizeof *p);
    }
    atomic_store(&samples, 0);
    atomic_store(&failed, 0);
    walk_flags = flags;
    period_ns = 1000000000L / (long)hz;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_sigprof;
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGPROF, &sa, &old_action) != 0) {
        int err = errno;
        pthread_mutex_unlock(&prof_lock);
        return -err;
    }
    running = 1;
    ntimers = 0;
    crawl__threads_foreach_locked(each_thread, NULL);
    __atomic_store_n(&crawl__attach_hook, on_attach, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&prof_lock);
    return 0;
}

int crawl_profiler_stop(void)
{
    pthread_mutex_lock(&prof_lock);
    if (!running) {
        pthread_mutex_unlock(&prof_lock);
        return -EINVAL;
    }
    __atomic_store_n(&crawl__attach_hook, NULL, __ATOMIC_RELEASE);
    for (unsigned i = 0; i < ntimers; i++)
        timer_delete(timers[i].timer);
    running = 0;
    /* a SIGPROF already pending runs our handler harmlessly, then the old action */
    sigaction(SIGPROF, &old_action, NULL);
    pthread_mutex_unlock(&prof_lock);
    return 0;
}

void crawl_profiler_get_stats(crawl_profiler_stats *out)
{
    pthread_mutex_lock(&prof_lock);
    out->samples = atomic_load(&samples);
    out->failed = atomic_load(&failed);
    out->threads = ntimers;
    pthread_mutex_unlock(&prof_lock);
}

/* The counts as a snapshot the heap outputs read: one entry per stack,
 * its size the sample count. */
static int profile_snapshot(hp_snap *s)
{
    memset(s, 0, sizeof *s);
    s->kind = HP_KIND_CPU;
    s->period_ns = (unsigned long)period_ns;
    for (uint32_t pg = 0; pg < PAGES; pg++) {
        atomic_ulong *p = atomic_load(&pages[pg]);
        for (uint32_t i = 0; p && i < (1u << PAGE_BITS); i++) {
            unsigned long c = atomic_load_explicit(&p[i], memory_order_relaxed);
            if (!c)
                continue;
            if (s->n == s->cap) {
                size_t cap = s->cap ? s->cap * 2 : 1024;
                hp_entry *more = crawl__mmap(cap * sizeof *more, PROT_READ | PROT_WRITE, 0);
                if (more == MAP_FAILED) {
                    hp_snapshot_free(s);
                    return -ENOMEM;
                }
                if (s->e) {
                    memcpy(more, s->e, s->n * sizeof *more);
                    crawl__munmap(s->e, s->cap * sizeof *s->e);
                }
                s->e = more, s->cap = cap;
            }
            uint32_t id = (pg << PAGE_BITS) | i;
            s->e[s->n++] = (hp_entry){.ptr = id, .size = c, .stack = id};
        }
    }
    return 0;
}

int crawl_profiler_write_fd(int fd, crawl_heap_format format)
{
    if (fd < 0 || (unsigned)format > CRAWL_HEAP_PPROF)
        return -EINVAL;
    int was = hp_inside_enter();
    hp_snap s;
    int rc = profile_snapshot(&s);
    if (!rc) {
        rc = ho_write_snap(fd, format == CRAWL_HEAP_JSON ? CRAWL_HEAP_TEXT : format, &s);
        hp_snapshot_free(&s);
    }
    hp_inside_leave(was);
    return rc;
}

int crawl_profiler_write(const char *path)
{
    return ho_write_path(path, crawl_profiler_write_fd);
}
