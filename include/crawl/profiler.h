/* crawl's sampling profiler: every attached thread's CPU time is sampled
 * (a per-thread CPU-time timer, timer_create with SIGEV_THREAD_ID, fires
 * SIGPROF on that thread), the handler walks the mixed stack signal-safely
 * and interns it in the depot, and counts per stack are kept lock-free.
 * The outputs are the heap profile's: collapsed stacks, an SVG flame graph
 * (script frames blue), pprof (samples and CPU nanoseconds), text. */
#ifndef CRAWL_PROFILER_H
#define CRAWL_PROFILER_H

#include <crawl/heap_profile.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Start sampling at hz samples per second of each thread's CPU time (1 to
 * 10000): threads attached now and those attaching later (their timer
 * starts at attach). The kernel checks CPU-time timers at its tick
 * (CONFIG_HZ, often 250): above that rate a thread gets about HZ samples a
 * second of CPU. flags: 0 (precise: DWARF CFI, rules compiled here,
 * before the first sample) or CRAWL_WALK_FAST. Rules are compiled for the
 * modules loaded now; a sample through a module loaded later stops there.
 * 0, -EINVAL, -EBUSY (running), or a negative errno from timer_create or
 * sigaction. Owns SIGPROF while running. Not async-signal-safe.
 * Thread-safe (one lock; of two starts at once, one gets -EBUSY).
 * Allocates: precise mode first compiles
 * every loaded module's CFI (crawl_cfi_cache_warm: libdw allocates); the
 * timer table is mmap'ed once, count pages by the handler as stacks come. */
CRAWL_API int crawl_profiler_start_flags(unsigned hz, unsigned flags);
/* crawl_profiler_start_flags(hz, 0): precise stacks. Same safety and
 * allocation. */
CRAWL_API int crawl_profiler_start(unsigned hz);
/* Stop: every timer deleted, SIGPROF's previous action back. The samples
 * stay for the outputs until the next start. 0 or -EINVAL (not running).
 * Thread-safe (the profiler's lock); not async-signal-safe (that lock);
 * allocates nothing. */
CRAWL_API int crawl_profiler_stop(void);

typedef struct crawl_profiler_stats {
    unsigned long samples;              /* walked and counted */
    unsigned long failed;               /* signals whose walk gave nothing (an unattached thread) */
    unsigned threads;                   /* timers held: one per attached thread, and those of
                                           exited threads until 4096 are held (then deleted) */
} crawl_profiler_stats;
/* The counts now; out must not be NULL. Thread-safe (the profiler's lock);
 * not async-signal-safe (that lock); allocates nothing. */
CRAWL_API void crawl_profiler_get_stats(crawl_profiler_stats *out);

/* The samples so far, as collapsed stacks, an SVG flame graph, pprof
 * (CRAWL_HEAP_PPROF: sample types samples/count and cpu/nanoseconds) or
 * text (CRAWL_HEAP_JSON is text too). 0, -EINVAL, -ENOMEM, -EIO. Not
 * async-signal-safe; may run while sampling. Allocates (the profile and
 * its symbols: malloc, libdw; not recorded in a heap profile). */
CRAWL_API int crawl_profiler_write_fd(int fd, crawl_heap_format format);
/* The same to path, the format from the extension (.svg, .pb.gz,
 * .folded, else text), written as crawl_heap_profile_write writes (whole
 * beside path, then renamed over it; -ECANCELED from another thread once
 * the heap profile's exit hook runs). Thread-safe: for a regular file
 * each call writes its own temporary file (PATH.tmp.PID.TID) and the last
 * rename wins. Allocates as crawl_profiler_write_fd. */
CRAWL_API int crawl_profiler_write(const char *path);

#ifdef __cplusplus
}
#endif

#endif
