/* crawl-boehm — Boehm's collector marks the roots crawl's Frames report.
 *   library crawl-boehm;  pkg-config: crawl-boehm;  CMake: crawl::boehm
 *   (crawl::boehm_static for the static library)
 * Include after <gc/gc.h> or alone; it needs only crawl's headers. */
#ifndef CRAWL_BOEHM_H
#define CRAWL_BOEHM_H

#include <crawl/gcroots.h>
#include <crawl/sanitizer.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Make Boehm's collector mark every root that attached threads' Frames
 * report: installs a GC_set_push_other_roots callback that calls the
 * previous one, then crawl_enum_roots_all_threads. Call after GC_INIT, from
 * one thread; idempotent. Memory that only crawl's roots reach (a VM value
 * stack in mmap'ed memory) then stays alive. Threads must be registered
 * with Boehm (GC_pthread_create or GC_register_my_thread) to be stopped.
 * If a Frame chain is corrupt (its older Frames' roots cannot be reported),
 * the collection stops the process with one line rather than free live
 * objects. Not async-signal-safe: crawl-boehm's first call reads crawl's
 * options under a lock (with gc_poison_collected=1 it then compiles every
 * loaded module's CFI: crawl_cfi_cache_warm, which allocates). Allocates
 * nothing else. */
CRAWL_API void crawl_boehm_install(void);

/* Roots pushed by the last collection (for diagnostics and tests). One
 * load, no lock: async-signal-safe, callable from any thread (a collection
 * running meanwhile may be storing it); allocates nothing. */
CRAWL_API unsigned long crawl_boehm_last_root_count(void);

/* ---- GC-root diagnostics ----------------------------------------------------
 * Find the root an embedder forgot. Options are keys of crawl's option
 * string (CRAWL_OPTIONS, crawl_sanitizer_set_options; help=1 lists them):
 *   gc_stress=N            collect before every Nth crawl_gc_malloc (0: off)
 *   gc_stress_transitions=1  and at every transition Frame push (VM -> native
 *                          calls: crawl-ffi's, crawl_transition_push)
 *   gc_verify=1            verify every reported root at every collection
 *   gc_alloc_stacks=1      record a mixed stack per object crawl_gc_malloc returns
 *                          (malloc_context_size frames; precise, or by frame
 *                          pointers with fast_unwind_on_malloc=1)
 *   gc_poison_collected=1  keep collected objects poisoned in a quarantine of
 *                          (turning it on compiles every loaded module's CFI
 *                          once, a few ms, for the collection stacks)
 *   gc_quarantine_mb=16    this size; crawl_gc_check reports use-after-collect
 * Reports take crawl's report path (stderr or log_path, the report
 * callback, halt_on_error) and name their kind with one of the words
 * use-after-collect, bad-root, double-root, unreported-reference.
 * The diagnostics need crawl_boehm_install() and objects allocated with
 * crawl_gc_malloc (allocation stacks, poisoning); roots are checked
 * whatever allocated their objects. Thread-safe; none is async-signal-safe.
 * Problems found inside a collection (gc_verify) are reported after it, at
 * the next crawl_gc_* call on any thread. Boehm sweeps lazily: an
 * unreachable object enters the quarantine when it is swept, which the
 * collections crawl-boehm runs itself (gc_stress, crawl_gc_verify, the
 * census, crawl_gc_why) do for the previous collection's garbage first;
 * after a plain GC_gcollect it waits for an allocation of its size. */

/* GC_MALLOC, plus: a stress collection (gc_stress), the allocation stack
 * (gc_alloc_stacks), and the object's entry in the quarantine's bookkeeping
 * (gc_poison_collected). With every option off it is GC_MALLOC and a few
 * loads. NULL when Boehm is out of memory. Allocates from the GC heap;
 * with an option on, crawl's object table grows by mmap, a precise
 * allocation stack may read CFI rules (libdw allocates), and problems
 * verifying collections found are reported first (malloc; symbolizes). */
CRAWL_API CRAWL_ATTR_MALLOC CRAWL_ATTR_ALLOC_SIZE(1) void *crawl_gc_malloc(size_t size);
/* The same for pointer-free objects (GC_MALLOC_ATOMIC). */
CRAWL_API CRAWL_ATTR_MALLOC CRAWL_ATTR_ALLOC_SIZE(1) void *crawl_gc_malloc_atomic(size_t size);

/* A full collection that first sweeps what the previous one found
 * unreachable (Boehm sweeps lazily, GC_gcollect included), so the
 * quarantine sees it: what a VM's "collect now" should call when the
 * diagnostics are on. Not async-signal-safe. Allocates nothing through
 * malloc: what crawl records during the collection (roots, the quarantine)
 * is mmap'ed. */
CRAWL_API void crawl_gc_collect(void);

/* Check an access of size bytes at p: 0 when it is fine or p is not in
 * the GC heap (NULL included: nothing to check); otherwise a report
 * (use-after-collect for a collected object, heap-buffer-overflow past an
 * object crawl_gc_malloc returned: located by its first bad byte) and 1.
 * The objects checked are those crawl records: crawl_gc_malloc's while
 * gc_alloc_stacks=1 or gc_poison_collected=1 is on (with their requested
 * size); with neither, every access is 0. Allocates nothing for an access
 * that is fine; a report symbolizes (libdw allocates), and problems
 * verifying collections found are reported first (malloc). */
CRAWL_API int crawl_gc_check(const void *p, size_t size, int is_write);

/* Run a collection that verifies every reported root (bad-root,
 * double-root), then look for unreported references in the calling
 * thread's native frames (unreported-reference: a word in a frame's
 * [sp, CFA) that points to a GC object no reported root, static data or
 * registered root reaches — alive only because Boehm scans stacks
 * conservatively). Reports each such object once, listing a word in each
 * frame that holds it (the first 8 frames, newest first: one may be a
 * stale copy in a slot its frame never wrote); returns how many objects.
 * Collections crawl-boehm runs zero 32 KiB of the dead stack below them
 * first, so that crawl's own stale words there keep nothing alive.
 * Allocates (malloc: the frames and the search; reports symbolize). */
CRAWL_API unsigned crawl_gc_verify(void);

/* Values that are not references though they sit in reported slots
 * (tagged integers, say): verification accepts any value fn says is one.
 * NULL removes it. Thread-safe; one atomic store, allocates nothing. */
CRAWL_API void crawl_gc_set_immediate_fn(int (*fn)(uintptr_t value));

/* One root of the census. Strings point into the record. */
typedef struct crawl_gc_root {
    unsigned thread;                    /* T0, T1... */
    unsigned index;                     /* walk order within the thread: newest Frame first */
    const void *frame;                  /* the Frame that reported it */
    char frame_type[48];                /* its type's name */
    char frame_text[160];               /* its describe() text, or "" */
    char native[200];                   /* the native frame it lives in: by a walk on the
                                           calling thread; for other threads by a scan of
                                           their stack below the Frame for a return address
                                           (marked "(stack scan)"), or "" */
    void **slot;
    unsigned flags;                     /* CRAWL_ROOT_* */
    void *value;
    void *object;                       /* the GC object value points into, or NULL */
    size_t object_size;
    uint32_t alloc_stack;               /* depot id (gc_alloc_stacks), or 0 */
} crawl_gc_root;

/* Every root of every attached thread, thread by thread in walk order,
 * taken during a collection (the world stopped: a consistent picture).
 * fn runs after the collection, for each root; returns the count.
 * Allocates (malloc; the roots' native frames are symbolized). */
CRAWL_API unsigned crawl_gc_census_each(void (*fn)(const crawl_gc_root *root, void *ctx),
                                        void *ctx);
/* The same as text on fd, one root a line (and the allocation stack under
 * it when recorded). Allocates (as crawl_gc_census_each, a stdio stream on
 * a dup of fd, and symbolization). */
CRAWL_API void crawl_gc_census(int fd);

/* Why obj is alive: the shortest path from a root to it, each step with
 * the field offset, printed on fd. Roots in order of preference: slots
 * reported by Frames, then static data, then words on the calling thread's
 * stack (named by the native function whose frame holds them) and the
 * callee-saved registers its caller held at the call (rbx, rbp, r12-r15,
 * recovered through libunwind); not other threads' stacks. A path
 * from an earlier kind wins over a shorter one from a later. Heap objects
 * are traced conservatively (every word that points into the heap), or by
 * the trace registered for their kind (crawl_gc_set_trace); pointer-free
 * objects are not traced. Returns the
 * path length (0: obj is itself a root's value), or -1: no root reaches
 * it (garbage, freed with GC_FREE, or held only where the search does not
 * look), it was collected, or it is NULL or outside the GC heap (a line on
 * fd says which). Runs one collection (not for bad input). Allocates (malloc
 * for the search, a stdio stream on a dup of fd; symbolization). */
CRAWL_API int crawl_gc_why(const void *obj, int fd);

/* A precise trace for the objects of one Boehm object kind (0 is Boehm's
 * pointer-free kind, 1 its normal kind, which crawl_gc_malloc's objects
 * count as; GC_new_kind makes others): crawl_gc_why and the reachability
 * crawl_gc_verify computes then follow only the fields trace reports,
 * calling visit once for each field that holds a reference, instead of
 * every word of the object. trace runs with Boehm's allocation lock held:
 * it must not allocate from the collector. NULL removes it. At most 16
 * kinds. 0, -EINVAL for a bad kind, -ENOSPC when full. Thread-safe (a
 * lock); allocates nothing. */
typedef void (*crawl_gc_visit_fn)(void *const *field, void *ctx);
typedef void (*crawl_gc_trace_fn)(const void *obj, size_t size, crawl_gc_visit_fn visit,
                                  void *ctx);
CRAWL_API int crawl_gc_set_trace(int gc_kind, crawl_gc_trace_fn trace);

/* The allocation stack recorded for obj (its start), or 0. Takes the
 * object table's lock; allocates nothing. */
CRAWL_API uint32_t crawl_gc_alloc_stack(const void *obj);

#ifdef __cplusplus
}
#endif
#endif
