/* bench/gpa: the guarded pool's cost on a malloc-heavy workload at the
 * default rate (1 in 5000), beside plain glibc malloc, in one run: an
 * allocator that asks crawl_gpa_should_sample() before each malloc and
 * frees through crawl_gpa_owns() (GWP-ASan's allocator stubs), against the
 * same loop calling malloc/free directly. GWP-ASan's production promise is
 * within 2%. Medians of 9 interleaved batches. */
#include <crawl/guarded.h>
#include <stdio.h>
#include <stdlib.h>

#include "bench.h"

#define OPS 2000000
#define LIVE 1024
#define BATCHES 9

static void *slot[LIVE];

static void *sampled_malloc(size_t n)
{
    if (__builtin_expect(crawl_gpa_should_sample_inline(), 0)) {
        void *p = crawl_gpa_allocate(n, 0);
        if (p)
            return p;
    }
    return malloc(n);
}

static void sampled_free(void *p)
{
    if (__builtin_expect(crawl_gpa_owns_inline(p), 0))
        crawl_gpa_deallocate(p);
    else
        free(p);
}

static void plain_free(void *p) { free(p); }

/* free + malloc of 16..528 bytes over LIVE live blocks; ns per pair.
 * The blocks start from malloc and end freed by whoever made them. */
__attribute__((noinline)) static double run(void *(*alloc)(size_t), void (*release)(void *))
{
    for (int i = 0; i < LIVE; i++)
        slot[i] = malloc(16);
    unsigned x = 12345;
    double t0 = now_ns();
    for (int i = 0; i < OPS; i++) {
        x = x * 1103515245u + 12345u;
        unsigned k = (x >> 8) % LIVE;
        release(slot[k]);
        slot[k] = alloc(16 + (x >> 20) % 512);
        ((volatile char *)slot[k])[0] = 1;
    }
    double ns = (now_ns() - t0) / OPS;
    for (int i = 0; i < LIVE; i++)
        sampled_free(slot[i]);
    return ns;
}

int main(void)
{
    double plain[BATCHES], sampled[BATCHES];
    run(malloc, plain_free), run(sampled_malloc, sampled_free);       /* warm up */
    for (int b = 0; b < BATCHES; b++) {
        plain[b] = run(malloc, plain_free);
        sampled[b] = run(sampled_malloc, sampled_free);
    }
    double p = bench_median(plain, BATCHES), s = bench_median(sampled, BATCHES);
    printf("bench/gpa: ns per free+malloc pair, median of %d batches of %d (gpa_sample_rate as set)\n",
           BATCHES, OPS);
    printf("  glibc malloc                     %6.2f\n", p);
    printf("  through the guarded-pool stubs   %6.2f   %+.1f%%\n", s, (s / p - 1) * 100);
    return 0;
}
