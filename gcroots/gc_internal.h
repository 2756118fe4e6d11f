/* Private to crawl-boehm's GC diagnostics (gc_*.c). crawl-boehm sees only
 * crawl's public headers. */
#ifndef CRAWL_GC_INTERNAL_H
#define CRAWL_GC_INTERNAL_H

#include <crawl/boehm.h>
#include <gc/gc.h>
#include <stdatomic.h>
#include <stdint.h>

/* Functions that read memory conservatively (static data with its
 * sanitizer redzones, stack words, whole heap objects), as the collector
 * does: AddressSanitizer must not check those loads. */
#if defined(__SANITIZE_ADDRESS__)
#define GC_SCANS __attribute__((no_sanitize("address")))
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define GC_SCANS __attribute__((no_sanitize("address")))
#endif
#endif
#ifndef GC_SCANS
#define GC_SCANS
#endif

/* Room for one more item in a malloc'ed array *items of *cap (doubling);
 * 0, or -1 when out of memory (the array is unchanged). */
int gc_reserve(void *items, size_t *cap, size_t n, size_t item_size);

/* ---- options (gc_objects.c): cached, re-read when crawl's serial moves ---- */
typedef struct gc_opts {
    unsigned long stress;
    int stress_transitions;
    int verify, poison, stacks;
    size_t quarantine_bytes;
    unsigned context;                   /* malloc_context_size */
    int fast;                           /* fast_unwind_on_malloc: frame-pointer stacks */
} gc_opts;
extern gc_opts gc_opt;
/* Read the options the first time (and register for their changes). */
void gc_opts_refresh(void);
/* Nonzero when crawl_gc_malloc must leave its fast path. */
extern atomic_int gc_active;
void gc_update_active(void);            /* after gc_opt or gc_pending changed */

/* ---- the object table (gc_objects.c) --------------------------------------
 * What crawl knows of objects crawl_gc_malloc returned, by base address,
 * in memory Boehm does not scan. */
enum { GC_OBJ_LIVE = 1, GC_OBJ_COLLECTED = 2, GC_OBJ_EVICTED = 3 };
typedef struct gc_obj {
    uintptr_t base;
    size_t size;                        /* as requested */
    uint32_t alloc_stack, collect_stack;
    unsigned alloc_tid, collect_tid;
    unsigned long collect_gc;           /* the collection that found it unreachable */
    int state;
} gc_obj;
/* A copy of base's entry: 1, or 0 if it has none. Takes the table lock. */
int gc_obj_find(uintptr_t base, gc_obj *out);
/* The same without waiting (inside a collection: the lock's holder may be
 * stopped): 1 found, 0 none, -1 the table was busy. */
int gc_obj_find_nowait(uintptr_t base, gc_obj *out);

/* ---- roots seen by a collection (boehm.c) ---------------------------------- */
typedef struct gc_root_rec {
    void **slot;
    void *value;
    unsigned flags, thread, index;
    const void *frame;
    const char *type_name;              /* static: a Frame type's name */
    char text[160];                     /* the Frame's describe() text */
    int problem;                        /* GC_PROBLEM_*, found with the world stopped */
    uintptr_t home_pc;                  /* another thread's Frame: a return address into
                                           the native frame holding it (stack scan), or 0 */
    uintptr_t object;                   /* GC_base(value) */
    size_t object_size;
} gc_root_rec;
enum { GC_PROBLEM_NONE, GC_PROBLEM_NOT_OBJECT, GC_PROBLEM_INTERIOR, GC_PROBLEM_COLLECTED,
       GC_PROBLEM_DOUBLE };

/* Every root one collection saw, in enumeration order (mmap'ed). */
typedef struct gc_roots {
    gc_root_rec *r;
    size_t n, cap;
} gc_roots;
/* Run a collection that records every reported root (verify: and queues
 * the problems it finds for gc_flush_pending, as gc_verify=1 does). */
void gc_roots_capture(gc_roots *out, int verify);
void gc_roots_release(gc_roots *t);
/* Report the problems recorded by verifying collections since the last
 * flush; returns how many were reported. */
unsigned gc_flush_pending(void);
extern volatile int gc_pending;         /* nonzero: a flush has work */

/* ---- reports (gc_report.c) ------------------------------------------------- */
/* "  the object was allocated by thread T0 here:" and its stack, if known. */
void gc_report_object(crawl_report *r, uintptr_t object, size_t size);
/* The native frame holding Frame f on the calling thread, as a frame line
 * ("interp_run vm/interp.c:205"), into buf; "" if f is not on its chain. */
void gc_frame_home(const void *f, char *buf, size_t len);
void gc_report_root_problem(const gc_root_rec *rec);

/* A full collection that first sweeps what the previous one found
 * unreachable (Boehm sweeps lazily; GC_gcollect does not, so disclaim
 * hooks — the quarantine — would wait for allocations of the same size). */
void gc_collect(void);

/* The precise trace registered for base's kind (crawl's own kinds counted
 * as the Boehm kinds they stand in for), or NULL (gc_trace.c). */
crawl_gc_trace_fn gc_trace_for(const void *base);
/* crawl's object kinds (gc_objects.c): the Boehm kind they stand in for. */
int gc_public_kind(int kind);

/* 1 for pointer-free objects (Boehm's and crawl's atomic kind): not traced. */
int gc_pointer_free(const void *base);

/* ---- tracing the heap (gc_trace.c) ------------------------------------------
 * A breadth-first search over heap objects from sources the caller adds,
 * tracing every object conservatively (each aligned word that points into
 * the GC heap is an edge). Run it under Boehm's allocation lock
 * (GC_call_with_alloc_lock), so no collection frees what it reads; it
 * uses malloc, never the GC. */
typedef struct gc_node {
    uintptr_t base;
    size_t size;
    long parent;                        /* node index, or -1 for a source */
    size_t offset;                      /* of the word in the parent (or the source) */
    long source;                        /* the caller's index for a source, else -1 */
} gc_node;
typedef struct gc_graph {
    gc_node *node;
    size_t n, cap;
    uintptr_t *set;                     /* bases seen: open addressing */
    long *set_node;
    size_t set_cap;
    size_t done;                        /* nodes traced so far */
    int failed;                         /* out of memory: the search is incomplete */
} gc_graph;
void gc_graph_init(gc_graph *g);
void gc_graph_free(gc_graph *g);
/* Add the object value points into as a source (if it is one and is new):
 * its node index, or -1. */
long gc_graph_source(gc_graph *g, uintptr_t value, long source, size_t offset);
/* Trace until target's object is found (its node index) or everything
 * reachable is (-1). target 0: trace everything. */
long gc_graph_run(gc_graph *g, uintptr_t target);
/* The node of base's object, or -1. */
long gc_graph_find(const gc_graph *g, uintptr_t base);

/* Writable data of every loaded module, the collector's own included (its
 * thread table and other internal objects are roots of its own). */
void gc_static_ranges(void (*fn)(uintptr_t lo, uintptr_t hi, const char *module, void *ctx),
                      void *ctx);

/* The calling thread's frames older than the one whose frame address is
 * above (pass an entry point's __builtin_frame_address(0): its caller's
 * frame comes first): native frames with [sp, cfa) and their description,
 * and script frames (VM activations, function Frames) with theirs. */
typedef struct gc_frame_rec {
    int script;
    uintptr_t sp, cfa;                  /* native: the words the frame owns */
    char text[200];
} gc_frame_rec;
size_t gc_stack_frames(gc_frame_rec **out, uintptr_t above);
/* The same, every step through libunwind, and the registers of the first
 * native frame above `above` as they were at its call (the callee-saved
 * ones recovered from where the callees saved them) into *regs, with the
 * frame's description; regs->sp is 0 when there is none (libunwind
 * missing at run time). Where that walk fails, the frames are
 * gc_stack_frames'. */
size_t gc_stack_frames_regs(gc_frame_rec **out, uintptr_t above, crawl_regs *regs,
                            char *caller, size_t caller_len);

#endif
