/* crawl — a sampled guard-page allocator (GWP-ASan's design) with mixed
 * stacks.
 *
 * A few allocations, one in gpa_sample_rate, go to a fixed pool of slots,
 * each a page between PROT_NONE guard pages, placed against the left or the
 * right guard at random. A freed slot is made inaccessible and keeps its
 * metadata (sizes, threads, allocation and free stacks, compressed in the
 * slot's own record: no depot needed) until it is reused. A fault in the
 * pool (use after free, buffer overflow or underflow) and a double or
 * invalid free are reported in GWP-ASan's shape ("*** GWP-ASan detected a
 * memory error ***") with crawl's mixed stacks, script frames included.
 *
 * Options (keys of crawl's option string, help=1 lists them):
 *   gpa_sample_rate=5000            1 in N allocations sampled; 0 disables
 *   gpa_max_allocations=16          slots in the pool (fixed at first use)
 *   gpa_perfectly_right_align=0     1: right-aligned to the byte, not to the alignment
 *   gpa_recoverable=0               1: report each slot once, make it accessible, go on
 *   gpa_install_signal_handlers=1   0: leave SIGSEGV/SIGBUS alone
 * These are the entry points an allocator calls (GWP-ASan's allocator
 * stubs): sample, then allocate from the pool, or fall back to its own.
 * Thread-safe. Not async-signal-safe (the pool takes a lock; stacks are
 * captured with a walk), except crawl_gpa_owns and crawl_gpa_size. */
#ifndef CRAWL_GUARDED_H
#define CRAWL_GUARDED_H

#include <crawl/common.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The countdown and the pool's bounds, for the inline versions below (an
 * allocator's fast path then costs a TLS decrement and a branch, and two
 * compares on free: GWP-ASan's design). Read them only through those. */
CRAWL_API extern __thread uint32_t crawl__gpa_next __attribute__((tls_model("initial-exec")));
CRAWL_API extern struct crawl__gpa_bounds {
    uintptr_t lo, span;                  /* the pool's mapping: [lo, lo + span) */
} crawl__gpa_bounds;
CRAWL_API int crawl__gpa_sample_slow(void);

/* crawl_gpa_should_sample and crawl_gpa_owns, inlined. */
static inline int crawl_gpa_should_sample_inline(void)
{
    if (__builtin_expect(crawl__gpa_next > 1, 1)) {
        crawl__gpa_next--;
        return 0;
    }
    return crawl__gpa_sample_slow();
}

static inline int crawl_gpa_owns_inline(const void *p)
{
    uintptr_t span = __atomic_load_n(&crawl__gpa_bounds.span, __ATOMIC_ACQUIRE);
    return (uintptr_t)p - __atomic_load_n(&crawl__gpa_bounds.lo, __ATOMIC_RELAXED) < span;
}

/* 1 once in gpa_sample_rate calls on average (a per-thread countdown: a
 * decrement and a branch when it says no), every call with rate 1, never
 * with rate 0. A countdown that is not running (a new thread) is started,
 * never taken for "sample now". A change of gpa_sample_rate
 * (crawl_sanitizer_set_options) applies to the calling thread's next call,
 * and to another thread's once the countdown it is in ends (at most twice
 * the old rate's calls, a million when it was 0). Allocates nothing, unless its slow path
 * makes the process's first read of the options (which may allocate;
 * that allocation is not sampled). */
CRAWL_API int crawl_gpa_should_sample(void);

/* A pool allocation of size bytes aligned to alignment (0: 16), or NULL:
 * the pool is full, size or alignment exceed a page, or it is called from
 * inside itself. The caller then allocates the normal way.
 * While the pool's fault handler writes a report on this thread,
 * crawl_gpa_should_sample always says 1 and this serves from a report
 * arena reserved with the pool (NULL once its 32 MiB are used), so an
 * allocator built on these stubs never enters its own malloc from the
 * signal handler; crawl_gpa_owns is 1 for arena blocks, crawl_gpa_size
 * gives their size and crawl_gpa_deallocate ignores them. Thread-safe; not
 * async-signal-safe except in that report mode. */
CRAWL_API CRAWL_ATTR_MALLOC CRAWL_ATTR_ALLOC_SIZE(1) void *crawl_gpa_allocate(size_t size,
                                                                              size_t alignment);

/* The same, the allocation stack starting at the caller of the frame
 * whose registers are *from (an allocator whose slow path is a function of
 * its own). Not API. */
CRAWL_API void *crawl__gpa_allocate_from(size_t size, size_t alignment, const crawl_regs *from);

/* Free a pool allocation (check crawl_gpa_owns first: a pointer outside
 * the pool, or in the report arena, is ignored). A double free or a pool
 * pointer that is not an allocation's start is reported, and stops the
 * process unless gpa_recoverable=1. Allocates: the free stack's capture
 * compiles the CFI of modules it passes (once each; libdw) and attaches a
 * thread not yet attached, and a report symbolizes. */
CRAWL_API void crawl_gpa_deallocate(void *p);
/* The same, the free stack (and a bad free's report) starting at the
 * caller of the frame whose registers are *from. Not API. */
CRAWL_API void crawl__gpa_deallocate_from(void *p, const crawl_regs *from);

/* 1 if p lies in the pool (its slots, guard pages and report arena).
 * Async-signal-safe (two loads, no lock), thread-safe, allocates nothing. */
CRAWL_API int crawl_gpa_owns(const void *p);

/* The requested size of the live pool allocation starting at p, or 0.
 * Async-signal-safe (reads the slot's record, no lock), thread-safe,
 * allocates nothing. */
CRAWL_API size_t crawl_gpa_size(const void *p);
/* The requested size of the live allocation in the slot p lies in,
 * wherever in it that starts, or 0 (a freed slot not yet given again).
 * Not API: for an allocator that must tell a freed block from one whose
 * slot was reused. */
CRAWL_API size_t crawl__gpa_slot_size(const void *p);

#ifdef __cplusplus
}
#endif
#endif
