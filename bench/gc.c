/* bench/gc: crawl-boehm's diagnostics against what a user would otherwise
 * run, in one process:
 *   - crawl_gc_malloc with every diagnostic off against GC_MALLOC;
 *   - crawl_gc_malloc with gc_alloc_stacks=1 (a mixed stack per object)
 *     against Boehm's debug allocator GC_debug_malloc (which records one
 *     caller), and against GC_MALLOC;
 *   - the census and why-alive on a 100,000-object heap;
 *   - root verification, per root: a collection with gc_verify=1 against
 *     one without, over 20,000 reported roots.
 * Medians of 9 batches; ns per operation. */
#define GC_THREADS
#include <gc/gc.h>

#include <crawl/boehm.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "bench.h"

#define BATCHES 9
#define ALLOCS 200000

static void *volatile sink;

typedef void *(*alloc_fn)(size_t);

static void *gc_malloc(size_t n) { return GC_MALLOC(n); }
static void *gc_debug(size_t n) { return GC_debug_malloc(n, GC_EXTRAS); }

/* ns per allocation of 32 bytes, over ALLOCS allocations (a collection
 * every so often, as in real use: the heap is kept small) */
__attribute__((noinline)) static double per_alloc(alloc_fn fn)
{
    double t0 = now_ns();
    for (int i = 0; i < ALLOCS; i++)
        sink = fn(32);
    return (now_ns() - t0) / ALLOCS;
}

/* Interleave the contenders batch by batch so drift hits them alike. */
static void compare(const char *title, alloc_fn a, const char *an, alloc_fn b, const char *bn)
{
    double ta[BATCHES], tb[BATCHES];
    per_alloc(a), per_alloc(b);          /* warm up */
    for (int i = 0; i < BATCHES; i++) {
        ta[i] = per_alloc(a);
        tb[i] = per_alloc(b);
    }
    double ma = bench_median(ta, BATCHES), mb = bench_median(tb, BATCHES);
    printf("%-44s %-18s %7.1f ns   %-18s %7.1f ns   ratio %.2fx\n", title, an, ma, bn, mb,
           ma / mb);
}

/* ---- a 100,000-object heap: a list hanging off one protected root ---------- */

typedef struct cell {
    struct cell *next;
    void *payload;
} cell;

static double time_census_and_why(cell **head_slot, int devnull, double *why_ns)
{
    double tc[BATCHES], tw[BATCHES];
    cell *last = *head_slot;
    while (last->next)
        last = last->next;
    for (int i = 0; i < BATCHES; i++) {
        double t0 = now_ns();
        crawl_gc_census(devnull);
        tc[i] = now_ns() - t0;
        t0 = now_ns();
        int rc = crawl_gc_why(last, devnull);
        tw[i] = now_ns() - t0;
        if (rc != 100000 - 1) {
            fprintf(stderr, "bench/gc: why gave %d, expected %d\n", rc, 100000 - 1);
            exit(1);
        }
    }
    *why_ns = bench_median(tw, BATCHES);
    return bench_median(tc, BATCHES);
}

/* ---- verification per root ------------------------------------------------- */

#define ROOTS 20000
typedef struct many {
    crawl_frame frame;
    void *slot[ROOTS];
} many;

static void many_roots(crawl_frame *f, crawl_roots *sink_)
{
    many *m = (many *)f;
    for (int i = 0; i < ROOTS; i++)
        crawl_roots_report(sink_, &m->slot[i], 0);
}

static const crawl_frame_type many_type = {.name = "many", .enum_roots = many_roots};

static double collect_ns(void)
{
    double t[BATCHES];
    for (int i = 0; i < BATCHES; i++) {
        double t0 = now_ns();
        GC_gcollect();
        t[i] = now_ns() - t0;
    }
    return bench_median(t, BATCHES);
}

int main(void)
{
    GC_INIT();
    crawl_thread_attach();
    crawl_boehm_install();
    crawl_sanitizer_set_options("halt_on_error=0:log_path=/dev/null");
    printf("bench/gc: medians of %d batches (ns per operation)\n\n", BATCHES);

    compare("diagnostics off: crawl_gc_malloc vs GC_MALLOC", crawl_gc_malloc, "crawl_gc_malloc",
            gc_malloc, "GC_MALLOC");
    crawl_sanitizer_set_options("gc_alloc_stacks=1");
    compare("gc_alloc_stacks=1 vs Boehm's debug allocator", crawl_gc_malloc, "crawl_gc_malloc",
            gc_debug, "GC_debug_malloc");
    compare("gc_alloc_stacks=1 vs GC_MALLOC", crawl_gc_malloc, "crawl_gc_malloc", gc_malloc,
            "GC_MALLOC");
    crawl_sanitizer_set_options("fast_unwind_on_malloc=1");
    compare("... with fast_unwind_on_malloc=1 (frame pointers)", crawl_gc_malloc,
            "crawl_gc_malloc", gc_debug, "GC_debug_malloc");
    crawl_sanitizer_set_options("gc_alloc_stacks=0:fast_unwind_on_malloc=0");

    cell *head = NULL;
    for (int i = 0; i < 100000; i++) {
        cell *c = crawl_gc_malloc(sizeof *c);
        c->next = head;
        head = c;
    }
    int devnull = open("/dev/null", O_WRONLY);
    double why_ns, census_ns;
    CRAWL_GCPROTECT_BEGIN(head);
    census_ns = time_census_and_why(&head, devnull, &why_ns);
    CRAWL_GCPROTECT_END();
    printf("\n100,000-object heap: census %.1f ms, why-alive (path of 99,999 steps) %.1f ms "
           "(each runs one collection)\n",
           census_ns / 1e6, why_ns / 1e6);

    many local_frame;                    /* a Frame lives on the stack (160 KiB here) */
    for (int i = 0; i < ROOTS; i++)
        local_frame.slot[i] = crawl_gc_malloc(16);
    crawl_frame_push(&local_frame.frame, &many_type);
    double plain = collect_ns();
    crawl_sanitizer_set_options("gc_verify=1");
    (void)crawl_gc_malloc(8);            /* reads the option */
    double verified = collect_ns();
    crawl_sanitizer_set_options("gc_verify=0");
    (void)crawl_gc_malloc(8);
    crawl_frame_pop(&local_frame.frame);
    printf("verification: a collection with %d roots %.2f ms, with gc_verify=1 %.2f ms: "
           "%.1f ns per root\n",
           ROOTS, plain / 1e6, verified / 1e6, (verified - plain) / ROOTS);
    close(devnull);
    return 0;
}
