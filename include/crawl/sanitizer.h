/* crawl — the sanitizer layer: a depot of mixed stack traces, a checked heap
 * with shadow memory, and heap-error reports in the AddressSanitizer shape
 * whose allocation and free stacks show VM activations among C frames.
 *
 * Reports use AddressSanitizer's wording and layout ("==PID==ERROR:
 * AddressSanitizer: heap-use-after-free on address ...") so that people and
 * triage tools read them as they read ASan's.
 */
#ifndef CRAWL_SANITIZER_H
#define CRAWL_SANITIZER_H

#include <crawl/stackwalk.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- the stack depot ------------------------------------------------------------
 * Append-only and deduplicating: the same trace always gets the same id,
 * ids are never reused or changed, 0 means "none". A trace is an array of
 * words: native pcs as they are, and tagged entries for what Frames add:
 *   CRAWL_DEPOT_VM | type, method, pc    a VM or function activation (3 words)
 *   CRAWL_DEPOT_JIT | method             a JIT frame, by method only (its pc
 *                                        would make every trace unique)
 * crawl_depot_capture builds such traces; put/get take any words.
 * put and get are lock-free and async-signal-safe (memory comes from
 * mmap'ed arenas); get's pointer stays valid for the life of the process. */
#define CRAWL_DEPOT_VM ((uintptr_t)1 << 63)
#define CRAWL_DEPOT_JIT ((uintptr_t)1 << 62)
#define CRAWL_DEPOT_TAGS (CRAWL_DEPOT_VM | CRAWL_DEPOT_JIT)
#define CRAWL_DEPOT_MAX_FRAMES 256

/* Store frames[0..n) (1 <= n <= CRAWL_DEPOT_MAX_FRAMES words); its id, or
 * 0 when nothing was stored (n out of range, or the byte budget is spent:
 * the drop is counted). */
CRAWL_API uint32_t crawl_depot_put(const uintptr_t *frames, unsigned n);
/* The words of trace id: their count, and *frames set; 0 for an unknown id. */
CRAWL_API unsigned crawl_depot_get(uint32_t id, const uintptr_t **frames);

typedef struct crawl_depot_stats {
    unsigned long ids;                  /* distinct traces stored */
    unsigned long bytes;                /* arena memory used */
    unsigned long drops;                /* puts refused by the budget */
    unsigned long budget;               /* bytes */
} crawl_depot_stats;
/* The depot's counts now; out must not be NULL. One atomic load each (not
 * a snapshot of the four together): async-signal-safe, thread-safe,
 * allocates nothing. */
CRAWL_API void crawl_depot_get_stats(crawl_depot_stats *out);

/* Capture the calling thread's mixed stack (from the caller, at most
 * max_frames frames, and at most CRAWL_DEPOT_MAX_FRAMES words: an activation
 * takes 3) into the depot: native and JIT frames and VM/function
 * activations, in walk order. flags: 0 for precise (CFI; the default for
 * allocation stacks, right in hosts built without frame pointers) or
 * CRAWL_WALK_FAST, and CRAWL_WALK_SIGNAL_SAFE. The id, or 0 (also for
 * max_frames 0: nothing is stored). With
 * CRAWL_WALK_SIGNAL_SAFE it takes no lock and allocates nothing (the depot
 * itself grows by mmap) and is async-signal-safe; without it, a capture
 * that misses a rule of a module reads it (allocates): the rule of that pc
 * alone for the first 256 such pcs of the module, then the module's whole
 * CFI compiled at once. Thread-safe: captures run on any number of threads
 * at once (the depot is lock-free; reading a rule takes crawl's libdw
 * lock). */
CRAWL_API uint32_t crawl_depot_capture(unsigned max_frames, unsigned flags);

/* The same from registers crawl_capture_regs filled in a function F: the
 * trace starts at F's caller. For allocators whose stacks should start at
 * their entry point whatever helper does the capture. 0 for NULL regs
 * or max_frames 0.
 * Same safety, thread safety and allocation as crawl_depot_capture. */
CRAWL_API uint32_t crawl_depot_capture_from(const crawl_regs *regs, unsigned max_frames,
                                            unsigned flags);

/* Print trace id, one "    #N 0xPC in function file:line" (native) or
 * "    #N in function file:line" (activation) line each, to fd. Not
 * signal-safe (symbolizes). Thread-safe (libdw runs under crawl's lock);
 * allocates (libdw does, symbolizing). */
CRAWL_API void crawl_depot_print(uint32_t id, int fd);

/* ---- the checked heap ---------------------------------------------------------------
 * malloc/calloc/realloc/free with redzones, a FIFO quarantine of freed
 * chunks, allocation and free stacks in the depot, and shadow memory in
 * AddressSanitizer's encoding (1 byte per 8: 00 addressable, 01..07 the
 * first k bytes, fa/fb left/right redzone, fd freed, f7 poisoned by user).
 * Errors (double free, freeing an address that was not allocated here) are
 * reported; an explicit check reports use after free and overflows. Thread-
 * safe (allocation and free take the heap's lock; crawl_heap_check and
 * poisoning read and write the shadow without it); not async-signal-safe.
 * Allocation: chunks come from the
 * heap's own reserved region, but its quarantine and free lists grow with
 * malloc, a precise allocation or free stack may read CFI rules, a thread
 * not yet attached is attached, and reports symbolize (all allocate). */
CRAWL_API CRAWL_ATTR_MALLOC CRAWL_ATTR_ALLOC_SIZE(1) void *crawl_heap_malloc(size_t size);
/* Reserve the checked heap's address space now (16 GiB with MAP_NORESERVE,
 * and 2 GiB of shadow; the first allocation does it otherwise): 0, or
 * -ENOMEM where it does not fit (ulimit -v), after which every allocation
 * returns NULL with errno ENOMEM and nothing is the heap's. For a program
 * to refuse a checked mode up front. Idempotent; thread-safe; not
 * async-signal-safe; allocates nothing (two mmaps). */
CRAWL_API int crawl_heap_reserve(void);
CRAWL_API CRAWL_ATTR_MALLOC CRAWL_ATTR_ALLOC_SIZE2(1, 2) void *crawl_heap_calloc(size_t n, size_t size);
CRAWL_API CRAWL_ATTR_ALLOC_SIZE(2) void *crawl_heap_realloc(void *p, size_t size);
CRAWL_API void crawl_heap_free(void *p);

/* Check an access of size bytes at addr (what instrumentation would do for
 * code that cannot be compiled with it: an interpreter checking its own
 * loads and stores). 0 when the access is fine or addr is outside the
 * checked heap; otherwise a report was emitted (and, with halt_on_error=1,
 * the process aborted) and 1 is returned. Allocates nothing unless it
 * reports (a report symbolizes: libdw allocates). */
CRAWL_API int crawl_heap_check(const void *addr, size_t size, int is_write);

/* Mark [addr, addr+size) of a live chunk unaddressable (f7) / addressable
 * again, e.g. for an embedder's own sub-allocations. addr must be 8-byte
 * aligned relative to the chunk's start. As in AddressSanitizer, the shadow
 * tracks 8-byte granules: a range ending inside a granule poisons that
 * granule only if it covers all of its addressable bytes, and unpoisons at
 * least the bytes it covers. 0, or -EINVAL if the range is not inside a live
 * chunk or addr is misaligned. They report nothing and allocate nothing. */
CRAWL_API int crawl_heap_poison(const void *addr, size_t size);
CRAWL_API int crawl_heap_unpoison(const void *addr, size_t size);

/* 1 if p lies in the checked heap's region. Async-signal-safe, thread-safe
 * (two loads, no lock), allocates nothing. */
CRAWL_API int crawl_heap_owns(const void *p);
/* The requested size of the live chunk starting at p, or 0 (not a chunk's
 * start, or freed: in the quarantine, or its memory given to another
 * chunk). Thread-safe (the heap's lock); not async-signal-safe; no
 * allocation. */
CRAWL_API size_t crawl_heap_size(const void *p);

/* ---- options and reports ------------------------------------------------------------
 * Options are "key=value" pairs separated by ':'. Read, in order, from a
 * weak crawl_default_options() the program may define, then from the
 * CRAWL_OPTIONS environment variable (ignored in set-uid/set-gid programs),
 * then from each crawl_sanitizer_set_options call. The first two are read
 * by the first call that needs the options, or when libcrawl loads if
 * either is set ("once the options are read" below).
 *   halt_on_error=1         abort after a report (0: return and go on)
 *   log_path=PATH           write reports to PATH.PID ("stderr", the default,
 *                           and "stdout" name those streams, as do
 *                           /dev/stderr, /dev/fd/2, /proc/self/fd/2 and
 *                           their stdout kin; a device or a FIFO, such as
 *                           /dev/null, is written as named; a stream the
 *                           program closed, or a PATH that cannot be
 *                           opened: the stderr kept from the start)
 *   malloc_context_size=30  frames kept per allocation/free stack (1..256)
 *   quarantine_size_mb=64   freed memory kept unallocatable
 *   redzone=16              minimum redzone bytes (16..2048, a power of 2)
 *   fast_unwind_on_malloc=0 1: frame-pointer walks for allocation and free
 *                           stacks (0: DWARF CFI, right without frame pointers)
 *   depot_budget_mb=256     memory the stack depot may use
 *   help=1                  print these options (the list help=1 prints
 *                           is generated from the one the parser uses)
 * and the options of the other parts, documented in their headers: gc_*
 * (crawl/boehm.h), gpa_* (crawl/guarded.h), heap_* and leak_*
 * (crawl/heap_profile.h).
 * A malformed string or an unknown key or value prints one warning line
 * naming it (for a bad value, also what the option takes: "(takes 0 ..
 * 1000000000)"), changes nothing, and returns a negative errno value. Numbers
 * are plain decimal digits. Thread-safe: the options change as a whole
 * (heap calls on other threads see the old or the new set, never a mix);
 * each successful call keeps about 0.6 KiB for the life of the process.
 * Not async-signal-safe (a lock, malloc, and the listeners it calls). */
CRAWL_API int crawl_sanitizer_set_options(const char *options);

/* The options in effect, as an options string (all keys but help).
 * snprintf-like. Thread-safe, no lock (it reads the set in effect, which
 * is never changed in place); not async-signal-safe (snprintf); allocates
 * nothing once the options are read. */
CRAWL_API int crawl_sanitizer_get_options(char *buf, size_t len);

/* Also pass each report's full text to fn (in addition to writing it).
 * Thread-safe: takes the report lock (waits for a report being written);
 * not async-signal-safe; allocates nothing. fn runs with the report lock
 * held: it must not start a report. */
CRAWL_API void crawl_set_report_callback(void (*fn)(const char *report, void *ctx), void *ctx);

/* Reports emitted so far (with halt_on_error=0). One atomic load:
 * async-signal-safe, thread-safe, allocates nothing. */
CRAWL_API unsigned long crawl_sanitizer_report_count(void);

/* The value of a numeric option (a size in MB as given, not in bytes):
 * 0, or -ENOENT for an unknown key or log_path. Thread-safe, no lock.
 * Once the options are read, async-signal-safe (a load and string
 * compares) and allocates nothing. */
CRAWL_API int crawl_sanitizer_get_option(const char *key, long *value);

/* A number that changes with every successful crawl_sanitizer_set_options
 * (and CRAWL_OPTIONS or crawl_default_options being read): a library that
 * caches option values re-reads them when it differs. Once the options
 * are read, one atomic load: async-signal-safe, allocates nothing (a call
 * before that reads them first, which is not signal-safe). */
CRAWL_API unsigned long crawl_sanitizer_options_serial(void);

/* Call fn after every successful change of the options (on the thread that
 * changed them, outside crawl's locks), so a library can re-read the values
 * it caches instead of checking on its hot path. Idempotent per fn; at
 * most 8 listeners. 0, -EINVAL for NULL, -ENOSPC when full. Thread-safe
 * and lock-free (compare-and-swap): async-signal-safe; allocates nothing. */
CRAWL_API int crawl_sanitizer_on_options_change(void (*fn)(void));

/* ---- reports of your own ------------------------------------------------------------
 * The path every crawl report takes, for other diagnostics (crawl-boehm's
 * GC checks, an embedder's own): a report is built in a fixed 64 KiB
 * buffer (begin prints the "=====" rule), then end writes it to stderr or
 * log_path, passes it to the report callback, counts it, and with
 * halt_on_error=1 adds "==PID==ABORTING" and aborts. begin takes the report
 * lock and end releases it, so reports never interleave; do not start a
 * second report in between. Thread-safe; not async-signal-safe
 * (symbolization allocates). */
typedef struct crawl_report crawl_report;
CRAWL_API crawl_report *crawl_report_begin(void);
CRAWL_API void crawl_report_printf(crawl_report *r, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* A depot trace, one "    #N ..." line per frame; for id 0 the line
 * "    <stack not recorded>" (with how many stacks the depot has refused,
 * for its budget or for memory, when it has), for an id the depot never gave "    <no stack
 * with id N in the depot>". */
CRAWL_API void crawl_report_trace(crawl_report *r, uint32_t depot_id);
/* The calling thread's mixed stack, from the function that calls this,
 * leaving out its first skip native frames (a library's own: skip 1 starts
 * at that function's caller), and the Frames and activations among them. */
CRAWL_API void crawl_report_stack(crawl_report *r, unsigned skip);
CRAWL_API void crawl_report_end(crawl_report *r);

#ifdef __cplusplus
}
#endif
#endif
