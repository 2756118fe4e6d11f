/* Threads: stack bounds, the registry of attached threads, auto-detach. */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/single_threaded.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "frames/internal.h"

__thread crawl__thread crawl__tls __attribute__((tls_model("initial-exec")));

static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;
/* The registry's nodes live outside the threads' TLS: a thread whose exit
 * went unseen (its key's value lost) leaves a node that names TLS a new
 * thread may reuse, and with the links in that TLS the new thread's fresh
 * zeros and its neighbours' unlinks wrote over live links (a cycle, or
 * live threads dropped from the list). Such a node is taken out when the
 * TLS it names attaches again. Nodes come from mmap'ed slabs, never
 * unmapped, and are reused from a free list, so a lock-free reader that
 * holds one never faults; an unlinked node keeps its next, so a reader
 * standing on it goes on along the list. */
typedef struct crawl__reg_node {
    crawl__thread *th;                  /* NULL: free */
    struct crawl__reg_node *prev, *next, *free_next;
} reg_node;
static reg_node *registry_head, *free_nodes, *slab, *slab_end;
static pthread_key_t exit_key;
static atomic_uint next_seq;
__thread int crawl__busy __attribute__((tls_model("initial-exec")));
atomic_ulong crawl__exited_counts[CRAWL__THREAD_COUNTS];    /* and detached */
static pthread_once_t exit_key_once = PTHREAD_ONCE_INIT;

/* The registry is changed under registry_lock, one atomic pointer store at
 * a time, so crawl__threads_foreach can read it without the lock while the
 * world is stopped: a thread suspended inside attach or detach leaves the
 * list consistent, and its node stays valid until it exits. */
#define PUBLISH(lvalue, value) __atomic_store_n(&(lvalue), (value), __ATOMIC_RELEASE)

void (*crawl__attach_hook)(void);
void (*crawl__leave_hook)(crawl__thread *th);

/* crawl__stacks_seen's list, under registry_lock */
static crawl__stack_seen seen[CRAWL__STACKS_SEEN];
static size_t nseen;

static void see_stack(uintptr_t lo, uintptr_t hi, uintptr_t pd)
{
    size_t k = 0;
    for (size_t i = 0; i < nseen; i++)  /* drop what it overlaps: that stack is reused */
        if (!(seen[i].lo < hi && seen[i].hi > lo))
            seen[k++] = seen[i];
    nseen = k;
    if (pd < lo || pd >= hi)
        return;                          /* not glibc's (see crawl__stacks_seen) */
    if (nseen == CRAWL__STACKS_SEEN)
        memmove(seen, seen + 1, --nseen * sizeof *seen);
    seen[nseen++] = (crawl__stack_seen){lo, hi, pd};
}

size_t crawl__stacks_seen(crawl__stack_seen *out, size_t max)
{
    pthread_mutex_lock(&registry_lock);
    size_t n = nseen < max ? nseen : max;
    memcpy(out, seen + nseen - n, n * sizeof *out);
    pthread_mutex_unlock(&registry_lock);
    return n;
}

/* A free node, or NULL (no memory for a slab). Under registry_lock. */
static reg_node *node_new(void)
{
    reg_node *n = free_nodes;
    if (n) {
        free_nodes = n->free_next;
        return n;
    }
    if (slab == slab_end) {
        size_t len = (size_t)1 << 16;
        void *m = crawl__mmap(len, PROT_READ | PROT_WRITE, 0);
        if (m == MAP_FAILED)
            return NULL;
        slab = m, slab_end = (reg_node *)((char *)m + len - len % sizeof(reg_node));
    }
    return slab++;
}

/* Take node n out of the list and free it. Under registry_lock. */
static void node_unlink(reg_node *n)
{
    if (n->prev)
        PUBLISH(n->prev->next, n->next);
    else
        PUBLISH(registry_head, n->next);
    if (n->next)
        n->next->prev = n->prev;
    __atomic_store_n(&n->th, NULL, __ATOMIC_RELEASE);
    n->free_next = free_nodes;
    free_nodes = n;
}

static void registry_unlink(crawl__thread *th)
{
    reg_node *n = th->reg_node;
    th->reg_node = NULL;
    if (n && n->th == th)
        node_unlink(n);
}

void crawl__threads_foreach(void (*fn)(crawl__thread *th, void *ctx), void *ctx)
{
    for (reg_node *n = __atomic_load_n(&registry_head, __ATOMIC_ACQUIRE); n;
         n = __atomic_load_n(&n->next, __ATOMIC_ACQUIRE)) {
        crawl__thread *th = __atomic_load_n(&n->th, __ATOMIC_ACQUIRE);
        if (th && __atomic_load_n(&th->attached, __ATOMIC_RELAXED))   /* others write theirs */
            fn(th, ctx);
    }
}

void crawl__threads_foreach_locked(void (*fn)(crawl__thread *th, void *ctx), void *ctx)
{
    pthread_mutex_lock(&registry_lock);
    crawl__threads_foreach(fn, ctx);
    pthread_mutex_unlock(&registry_lock);
}

/* Runs when an attached thread exits: its TLS block is about to go away,
 * so it must leave the registry. Frames still linked at exit are dropped
 * (the thread's stack is gone too). */
/* Leave the registry (under registry_lock), keeping the thread's counters. */
static void leave_registry(crawl__thread *th)
{
    void (*hook)(crawl__thread *) = __atomic_load_n(&crawl__leave_hook, __ATOMIC_ACQUIRE);
    if (hook)
        hook(th);
    pthread_mutex_lock(&registry_lock);
    registry_unlink(th);
    for (int i = 0; i < CRAWL__THREAD_COUNTS; i++)
        atomic_fetch_add(&crawl__exited_counts[i],
                         __atomic_exchange_n(&th->counts[i], 0, __ATOMIC_RELAXED));
    pthread_mutex_unlock(&registry_lock);
}

static void on_thread_exit(void *unused)
{
    (void)unused;
    crawl__thread *th = crawl__self();
    if (!th->attached)
        return;
    __atomic_store_n(&th->attached, 0, __ATOMIC_RELAXED);
    leave_registry(th);
    th->top = NULL;
    th->nframes = 0;
}

/* In a fork child only the forking thread exists: drop the others. The
 * lock is held across fork so the list is never copied mid-update. */
static void before_fork(void) { pthread_mutex_lock(&registry_lock); }
static void after_fork_parent(void) { pthread_mutex_unlock(&registry_lock); }
static void after_fork_child(void)
{
    crawl__thread *self = crawl__self();
    pthread_mutex_unlock(&registry_lock);
    registry_head = NULL;               /* (the other threads' nodes stay used: a few bytes) */
    if (self->attached && self->reg_node) {
        self->reg_node->prev = self->reg_node->next = NULL;
        registry_head = self->reg_node;
        self->tid = (pid_t)syscall(SYS_gettid);
    }
}

int crawl__loader_lock_suspect;
CRAWL_API __thread int crawl__in_getattr __attribute__((tls_model("initial-exec")));
static int threads_at_fork;

static void loader_fork_prepare(void) { threads_at_fork = !__libc_single_threaded; }
static void loader_fork_child(void)
{
    if (threads_at_fork)
        crawl__loader_lock_suspect = 1;  /* for good: the lock stays as the fork left it */
}

static void make_exit_key(void)
{
    pthread_key_create(&exit_key, on_thread_exit);
    pthread_atfork(before_fork, after_fork_parent, after_fork_child);
}

/* (at load, not at first use: a program may fork before it calls crawl.
 * And the exit key is made then, among the process's first 32 keys, whose
 * values glibc keeps in the thread itself: made at the first attach, it
 * was key 40 in a program with 40 keys, and its pthread_setspecific,
 * inside the program's own (an attach in the hook of the calloc of
 * glibc's block for keys 32 to 63), made that block a second time, which
 * the outer call then replaced: the thread's exit went unseen, its record
 * stayed in the registry, the next thread on that TLS linked it in again,
 * and the leak check at exit looped on the cycle; and the values of the
 * program's keys 32 to 63 were in a block crawl's hook had not recorded,
 * reported as leaks. Found by an outside test.) */
__attribute__((constructor)) static void watch_forks(void)
{
    pthread_atfork(loader_fork_prepare, NULL, loader_fork_child);
    pthread_once(&exit_key_once, make_exit_key);
}

int crawl__own_stack(uintptr_t *lo, uintptr_t *hi, size_t *guard)
{
    pthread_attr_t attr;
    crawl__busy++;
    int rc = pthread_getattr_np(pthread_self(), &attr);
    crawl__busy--;
    if (rc)
        return rc;
    void *addr = NULL;
    size_t size = 0;
    rc = pthread_attr_getstack(&attr, &addr, &size);
    if (!rc && guard)
        rc = pthread_attr_getguardsize(&attr, guard);
    pthread_attr_destroy(&attr);
    if (rc)
        return rc;
    *lo = (uintptr_t)addr, *hi = (uintptr_t)addr + size;
    return 0;
}

int crawl__ensure_attached(crawl__thread *th)
{
    return th->attached ? 0 : crawl_thread_attach();
}

int crawl_thread_attach(void)
{
    crawl__thread *th = crawl__self();
    if (th->attached)
        return 0;

    uintptr_t lo, hi;
    size_t guard = 0;
    int rc = crawl__own_stack(&lo, &hi, &guard);
    if (rc)
        return -rc;

    pthread_once(&exit_key_once, make_exit_key);
    /* Any non-NULL value makes the destructor run at thread exit. */
    rc = pthread_setspecific(exit_key, th);
    if (rc)
        return -rc;

    th->stack_lo = lo;
    th->stack_hi = hi;
    th->tid = (pid_t)syscall(SYS_gettid);
    th->seq = atomic_fetch_add(&next_seq, 1);
    th->top = NULL;
    th->nframes = 0;
    for (int i = 0; i < 4; i++)
        th->types[i] = NULL;

    pthread_mutex_lock(&registry_lock);
    /* a node left by an earlier thread on this TLS whose exit went unseen
     * (its key's value lost: see watch_forks) is taken out first */
    for (reg_node *o = registry_head, *next; o; o = next) {
        next = o->next;
        if (o->th == th)
            node_unlink(o);
    }
    reg_node *n = node_new();
    if (!n) {
        pthread_mutex_unlock(&registry_lock);
        pthread_setspecific(exit_key, NULL);
        return -ENOMEM;
    }
    __atomic_store_n(&th->attached, 1, __ATOMIC_RELAXED);
    see_stack(lo, hi, guard ? (uintptr_t)pthread_self() : 0);
    /* (a reused node: a reader may stand on it) */
    __atomic_store_n(&n->th, th, __ATOMIC_RELEASE);
    n->prev = NULL;
    __atomic_store_n(&n->next, registry_head, __ATOMIC_RELEASE);
    if (registry_head)
        registry_head->prev = n;
    th->reg_node = n;
    PUBLISH(registry_head, n);
    pthread_mutex_unlock(&registry_lock);
    void (*hook)(void) = __atomic_load_n(&crawl__attach_hook, __ATOMIC_ACQUIRE);
    if (hook)
        hook();                          /* an upper layer's (the profiler's timer) */
    return 0;
}

void crawl_thread_detach(void)
{
    crawl__thread *th = crawl__self();
    if (!th->attached)
        return;
    if (th->top)
        crawl__fatal("crawl_thread_detach with %u Frame(s) still pushed (top '%s' at %p)",
                     th->nframes, crawl__type_name(th->top->type), (void *)th->top);
    __atomic_store_n(&th->attached, 0, __ATOMIC_RELAXED);
    atomic_signal_fence(memory_order_release);
    leave_registry(th);
    pthread_setspecific(exit_key, NULL);
}

int crawl_thread_is_attached(void)
{
    return crawl__self()->attached;
}

int crawl_thread_number(void)
{
    const crawl__thread *th = crawl__self();
    return th->attached ? (int)th->seq : -ENOENT;
}

int crawl_thread_stack_bounds(uintptr_t *lo, uintptr_t *hi)
{
    const crawl__thread *th = crawl__self();
    if (!th->attached)
        return -ENOENT;
    if (lo)
        *lo = th->stack_lo;
    if (hi)
        *hi = th->stack_hi;
    return 0;
}

int crawl__current_altstack(uintptr_t *lo, uintptr_t *hi)
{
    stack_t ss;
    if (sigaltstack(NULL, &ss) != 0 || !(ss.ss_flags & SS_ONSTACK))
        return 0;
    *lo = (uintptr_t)ss.ss_sp;
    *hi = (uintptr_t)ss.ss_sp + ss.ss_size;
    return 1;
}

int crawl__on_stack(const crawl__thread *th, uintptr_t addr, size_t size)
{
    if (th->stack_hi - th->stack_lo >= size && addr >= th->stack_lo &&
        addr - th->stack_lo <= th->stack_hi - th->stack_lo - size)
        return 1;
    uintptr_t lo, hi;
    return crawl__current_altstack(&lo, &hi) && addr >= lo && addr + size <= hi;
}

void crawl__thread_bounds(const crawl__thread *th, int self, crawl__bounds *b)
{
    b->lo = th->stack_lo;
    b->hi = th->stack_hi;
    b->alo = b->ahi = 0;
    if (!self) {
        b->alo = th->alt_lo;
        b->ahi = th->alt_hi;
    } else if (!crawl__current_altstack(&b->alo, &b->ahi)) {
        b->alo = b->ahi = 0;
    }
}
