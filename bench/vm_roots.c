/* bench/vm_roots: what crawl_enum_roots costs per root, with 1000 nested
 * crawlvm calls on the stack (one interpreter segment, every activation's
 * closure and stack slots reported), next to a plain loop over the same
 * slots. Median of 21 batches. */
#include <gc/gc.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include <crawl/boehm.h>

#include "vm/builtins.h"
#include "vm/vm.h"
#include "bench.h"

static unsigned long sink;

static void count_root(void **slot, unsigned flags, const crawl_cf *cf, void *ctx)
{
    (void)flags, (void)cf;
    ++*(unsigned long *)ctx;
    sink += (uintptr_t)*slot;
}

/* called through a pointer, as crawl calls it */
static void (*volatile root_fn)(void **, unsigned, const crawl_cf *, void *) = count_root;

static value b_time_roots(vm_state *vm, int argc, value *argv)
{
    (void)argc, (void)argv;
    unsigned long roots = 0;
    crawl_enum_roots(count_root, &roots, 0);
    enum { BATCHES = 21, REPS = 2000 };
    double crawl_ns[BATCHES], plain_ns[BATCHES];
    for (int b = 0; b < BATCHES; b++) {
        double t0 = now_ns();
        for (int r = 0; r < REPS; r++) {
            unsigned long n = 0;
            crawl_enum_roots(count_root, &n, 0);
        }
        crawl_ns[b] = (now_ns() - t0) / REPS / (double)roots;
        /* the floor: the same callback, through a pointer, over the same
         * slots, without Frames */
        t0 = now_ns();
        for (int r = 0; r < REPS; r++) {
            unsigned long n = 0;
            void (*fn)(void **, unsigned, const crawl_cf *, void *) = root_fn;
            for (uint32_t i = 0; i < vm->nci; i++)
                fn((void **)&vm->ci[i].cl, 0, NULL, &n);
            for (uint32_t i = 0; i < vm->top; i++)
                fn((void **)&vm->stack[i], 0, NULL, &n);
        }
        plain_ns[b] = (now_ns() - t0) / REPS / (double)roots;
    }
    double crawl_med = bench_median(crawl_ns, BATCHES), plain_med = bench_median(plain_ns, BATCHES);
    printf("bench/vm_roots: %lu roots at %u nested calls\n", roots, vm->nci);
    printf("  crawl_enum_roots      %6.2f ns per root (median of %d)\n", crawl_med,
           BATCHES);
    printf("  direct loop, no Frames %5.2f ns per root (same callback, same slots)\n", plain_med);
    printf("  ratio                 %6.2fx\n", crawl_med / plain_med);
    return V_NIL;
}

int main(void)
{
    GC_INIT();
    crawl_thread_attach();
    crawl_boehm_install();
    vm_state *vm = vm_new();
    vm_open_libs(vm);
    vm_def_builtin(vm, "time-roots", 0, 0, b_time_roots);
    return vm_eval(vm,
                   "(define (nest k) (let ((a k) (b (vector k))) (if (> k 0) (nest (- k 1)) "
                   "(time-roots))))\n(nest 999)\n",
                   "bench", NULL) == 0 ? 0 : 1;
}
