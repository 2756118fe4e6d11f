/* Private to the frames layer and the layers above it. */
#ifndef CRAWL_FRAMES_INTERNAL_H
#define CRAWL_FRAMES_INTERNAL_H

#include <crawl/frames.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <unistd.h>

#define CRAWL__THREAD_COUNTS 1

/* Keep the calling function's frame alive until x is used, so the call that
 * computed x is not a sibling call: entry points that walk from their own
 * registers (crawl_walk, crawl_depot_capture...) need their frame to exist
 * while the walk reads it. */
#define CRAWL__NO_TAIL(x) __asm__ volatile("" : "+r"(x))

/* Per-thread state. initial-exec TLS: reading it never allocates or takes
 * the loader lock, so signal handlers can use it. */
typedef struct crawl__thread {
    crawl_frame *top;                   /* newest Frame */
    unsigned nframes;                   /* Frames on the chain: bounds walks over a corrupt chain */
    int attached;
    uintptr_t stack_lo, stack_hi;       /* [lo, hi) from pthread_getattr_np */
    uintptr_t alt_lo, alt_hi;           /* the signal stack a Frame was last pushed on */
    const crawl_frame_type *types[4];   /* recently pushed types: skips the type table */
    unsigned type_victim;
    pid_t tid;
    unsigned seq;                       /* 0, 1, 2... in attach order ("T0" in reports) */
    /* Event counters the layers above own (indices and meaning in their
     * headers: stackwalk's SW_COUNT_*). Only the thread writes its own;
     * frames adds them to crawl__exited_counts when the thread leaves. */
    unsigned long counts[CRAWL__THREAD_COUNTS];
    /* Walks in progress on this thread (handlers may nest): readers of
     * stackwalk's shared tables, which are freed only when every attached
     * thread's count is 0 (see stackwalk/modules.c). */
    atomic_uint walks;
    struct crawl__reg_node *reg_node;   /* its node in the registry (frames/thread.c) */
    void *walk_memo;                    /* stackwalk's, released by crawl__leave_hook */
} crawl__thread;

extern __thread crawl__thread crawl__tls __attribute__((tls_model("initial-exec")));

static inline crawl__thread *crawl__self(void) { return &crawl__tls; }

/* Call fn for every attached thread, without a lock: only while the other
 * attached threads are stopped or cannot attach or detach. */
void crawl__threads_foreach(void (*fn)(crawl__thread *th, void *ctx), void *ctx);
/* The same under the registry's lock (normal context; fn must not attach or
 * detach). */
void crawl__threads_foreach_locked(void (*fn)(crawl__thread *th, void *ctx), void *ctx);

/* The stacks glibc made that attached threads had, newest last: [lo, hi)
 * and the thread's descriptor pd (pthread_self(), at the stack's top).
 * After the thread exits, glibc keeps its stack for its next threads (with
 * the descriptor where it was), and the leak check tells from pd which of
 * these are dead. Not kept: the main thread's (its descriptor is
 * elsewhere) and a stack the program gave (no guard page: glibc reports
 * its guard size as 0, as for a stack it made without one), which the
 * program may hand to a thread of another size, whose descriptor lies
 * elsewhere in it. Copies at most max of them
 * into out (under the registry's lock, normal context) and returns how
 * many. An attach drops what its stack overlaps; the oldest go past
 * CRAWL__STACKS_SEEN. */
typedef struct crawl__stack_seen {
    uintptr_t lo, hi, pd;
} crawl__stack_seen;
#define CRAWL__STACKS_SEEN 256
size_t crawl__stacks_seen(crawl__stack_seen *out, size_t max);

/* The counts of threads that have exited or detached (their records are gone). */
extern atomic_ulong crawl__exited_counts[CRAWL__THREAD_COUNTS];

/* Attach the calling thread if needed; 0 or a negative errno. */
int crawl__ensure_attached(crawl__thread *th);
/* Called on the thread at the end of each attach (normal context), when an
 * upper layer set it: the profiler starts the new thread's timer. */
extern void (*crawl__attach_hook)(void);
/* Called on the thread when it leaves the registry (it exits or detaches),
 * when an upper layer set it: stackwalk releases the thread's walk memo. */
extern void (*crawl__leave_hook)(crawl__thread *th);

/* 1 if [addr, addr+size) lies on th's stack or on the signal stack the
 * thread is running on right now. Async-signal-safe. */
int crawl__on_stack(const crawl__thread *th, uintptr_t addr, size_t size);

/* Write all of [s, s+n) to fd, stopping at the first error: 0, or -1 when
 * a write failed (or wrote nothing). Async-signal-safe. */
int crawl__write_all(int fd, const void *s, size_t n);
/* fd, moved to 3 or above if it took 0, 1 or 2 (a program started with
 * them closed must find them closed, not holding crawl's pipe); -1 if it
 * could not be moved (closed then). For descriptors crawl keeps open. */
int crawl__fd_above_std(int fd);

/* Zero 32 KiB of the dead stack below the caller (frames/scrub.c), before
 * a conservative scan whose frames will lie there. Async-signal-safe; the
 * caller needs that much stack left. */
void crawl__clear_stack_below(void);

/* The alternate signal stack the thread runs on now, as [*lo, *hi); 0 if
 * none. Async-signal-safe (one sigaltstack(2) call). */
int crawl__current_altstack(uintptr_t *lo, uintptr_t *hi);

/* Where a thread's Frames may lie: its stack [lo, hi), and the signal
 * stack [alo, ahi) (empty when alo == ahi). */
typedef struct crawl__bounds {
    uintptr_t lo, hi, alo, ahi;
} crawl__bounds;

/* th's bounds. self: th is the calling thread, and the signal stack is the
 * one it runs on now (one sigaltstack(2) call); otherwise the signal stack
 * its last Frame push there recorded. Async-signal-safe. */
void crawl__thread_bounds(const crawl__thread *th, int self, crawl__bounds *b);


/* Frame types seen by crawl_frame_push, so a walk can refuse a Frame whose
 * type pointer is garbage without dereferencing it. Lock-free. */
void crawl__type_note(const crawl_frame_type *type);
int crawl__type_known(const crawl_frame_type *type);

/* crawl's own anonymous mappings (tables, caches, arenas, the guarded
 * pool), straight to the kernel: never through an mmap that the program or
 * libcrawl-preload.so interposes. With heap_profile_mmap=1 the preload
 * records the program's mappings; crawl's are not the program's, and one
 * recorded from inside a walk (the walk memo's, a depot arena's) captured
 * a stack that walked and mapped again. MAP_FAILED and errno on failure,
 * as mmap(2); private and anonymous, more_flags added (MAP_NORESERVE).
 * Async-signal-safe (one system call). */
#if defined(__SANITIZE_THREAD__)
#define CRAWL_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define CRAWL_TSAN 1                    /* (clang 14 has no __SANITIZE_THREAD__) */
#endif
#endif
/* (Under ThreadSanitizer through libc's mmap, which it intercepts: it must
 * see memory unmapped and mapped again at an address, or it takes one
 * thread's use of a new mapping for a race with another's use of the old.
 * No preload runs in such a build.) */
static inline void *crawl__mmap(size_t len, int prot, int more_flags)
{
#if defined(CRAWL_TSAN)
    return mmap(NULL, len, prot, MAP_PRIVATE | MAP_ANONYMOUS | more_flags, -1, 0);
#else
    return (void *)syscall(SYS_mmap, NULL, len, prot, MAP_PRIVATE | MAP_ANONYMOUS | more_flags, -1,
                           0L);
#endif
}
static inline int crawl__munmap(void *addr, size_t len)
{
#if defined(CRAWL_TSAN)
    return munmap(addr, len);
#else
    return (int)syscall(SYS_munmap, addr, len);
#endif
}

/* Locks crawl takes around work that allocates (module snapshots, the
 * libdwfl session, reports): they count, per thread, how many the thread
 * holds, so an allocator hook (the guarded pool behind LD_PRELOAD) can
 * refuse to re-enter crawl from a malloc crawl itself made. */
extern __thread int crawl__busy __attribute__((tls_model("initial-exec")));

/* 1 in the child of a fork made while other threads ran (and in its own
 * children): glibc's fork leaves the loader's lock, which dl_iterate_phdr
 * takes, as it found it, so if one of those threads was inside, every
 * call in the child waits for ever. Code on the leak check's and the
 * outputs' paths does without dl_iterate_phdr then. Set by an atfork
 * handler registered when libcrawl loads. */
extern int crawl__loader_lock_suspect;
/* Inside pthread_getattr_np (crawl/heap_profile.h says why). */
extern __thread int crawl__in_getattr __attribute__((tls_model("initial-exec")));
static inline void crawl__lock(pthread_mutex_t *m)
{
    pthread_mutex_lock(m);
    crawl__busy++;
}
static inline void crawl__unlock(pthread_mutex_t *m)
{
    crawl__busy--;
    pthread_mutex_unlock(m);
}

/* The calling thread's stack, [*lo, *hi), and its guard size when guard is
 * not NULL (0: a stack the program gave, or none), from
 * pthread_getattr_np: 0 or an errno value. pthread_getattr_np allocates (the main thread's reads
 * /proc/self/maps) while it holds the thread's lock, so the thread counts
 * as busy meanwhile: a hook must not come back into crawl from that malloc
 * (a sampled allocation asks for the thread's id, which attaches, which
 * would take that lock again). */
int crawl__own_stack(uintptr_t *lo, uintptr_t *hi, size_t *guard);

/* Print "crawl: fatal: <message>" on stderr with one write(2) and abort.
 * For API misuse and corruption only. Async-signal-safe in practice
 * (vsnprintf of %s/%p/%u, no malloc). */
_Noreturn void crawl__fatal(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static inline int crawl__inside(uintptr_t a, size_t size, uintptr_t lo, uintptr_t hi)
{
    return hi - lo >= size && a >= lo && a - lo <= hi - lo - size;
}

/* The one check before a Frame pointer read from a chain is followed: it is
 * pointer-aligned, lies whole inside b, and has a type crawl_frame_push has
 * seen. A corrupt chain then ends a walk or an enumeration, never faults.
 * Async-signal-safe; reads only f->type. Inline: walks and root
 * enumeration run it once per Frame. */
static inline int crawl__frame_ok(const crawl_frame *f, const crawl__bounds *b)
{
    uintptr_t a = (uintptr_t)f;
    if (a & (sizeof(void *) - 1))
        return 0;
    if (!crawl__inside(a, sizeof *f, b->lo, b->hi) && !crawl__inside(a, sizeof *f, b->alo, b->ahi))
        return 0;
    return crawl__type_known(f->type);
}

/* A Frame type's name, or a placeholder for NULL / unnamed types. */
const char *crawl__type_name(const crawl_frame_type *type);

#endif
