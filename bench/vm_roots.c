/* bench/vm_roots: what crawl_enum_roots costs per root, with 1000 nested
 * crawlvm calls on the stack (one interpreter segment, every activation's
 * closure and stack slots reported), next to a plain loop over the same
 * slots. Median of 21 batches. */
#include <gc/gc.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "vm/vm.h"

static unsigned long sink;

static void count_root(void **slot, unsigned flags, const crawl_cf *cf, void *ctx)
{
    (void)flags, (void)cf;
    ++*(unsigned long *)ctx;
    sink += (uintptr_t)*slot;
}

/* called through a pointer, as crawl calls it */
static void (*volatile root_fn)(void **, unsigned, const crawl_cf *, void *) = count_root;

static double now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e9 + ts.tv_nsec;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

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
    qsort(crawl_ns, BATCHES, sizeof(double), cmp);
    qsort(plain_ns, BATCHES, sizeof(double), cmp);
    printf("bench/vm_roots: %lu roots at %u nested calls\n", roots, vm->nci);
    printf("  crawl_enum_roots      %6.2f ns per root (median of %d)\n", crawl_ns[BATCHES / 2],
           BATCHES);
    printf("  direct loop, no Frames %5.2f ns per root (same callback, same slots)\n", plain_ns[BATCHES / 2]);
    printf("  ratio                 %6.2fx\n", crawl_ns[BATCHES / 2] / plain_ns[BATCHES / 2]);
    return V_NIL;
}

int main(void)
{
    GC_INIT();
    crawl_thread_attach();
    crawl_boehm_install();
    vm_state *vm = vm_new();
    vm_def_builtin(vm, "time-roots", 0, 0, b_time_roots);
    return vm_eval(vm,
                   "(define (nest k) (let ((a k) (b (vector k))) (if (> k 0) (nest (- k 1)) "
                   "(time-roots))))\n(nest 999)\n",
                   "bench", NULL) == 0 ? 0 : 1;
}
