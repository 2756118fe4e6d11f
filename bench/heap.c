/* bench/heap: the same allocation workload on glibc malloc, on crawl's
 * checked heap (with a crawl_heap_check before every access, as an
 * interpreter does), and, as a separate binary built from this file with
 * -fsanitize=address, on AddressSanitizer. bench/heap.sh runs all three
 * and prints ratios. Prints "MODE ns-per-operation" (median of 9). */
#include <crawl/crawl.h>
#ifdef CRAWL_BENCH_ASAN
/* ASan checks the accesses itself */
static inline int no_check(const void *p, size_t n, int w) { return (void)p, (void)n, w & 0; }
#define crawl_heap_check no_check
#endif
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "bench.h"

#define LIVE 1024
#define OPS 200000
#define BATCHES 9

typedef struct heap {
    void *(*alloc)(size_t);
    void (*release)(void *);
    int check;                           /* call crawl_heap_check before accesses */
} heap;

static volatile unsigned long sink;

/* One operation: replace a random live block (free + malloc of 16..528
 * bytes), write its first and last 8 bytes, read 8 bytes of another. */
__attribute__((noinline)) static double run(const heap *h)
{
    static unsigned char *live[LIVE];
    static size_t size[LIVE];
    unsigned x = 42;
    for (int i = 0; i < LIVE; i++) {
        size[i] = 16;
        live[i] = h->alloc(16);
        memset(live[i], 0, 16);
    }
    double t0 = now_ns();
    for (int op = 0; op < OPS; op++) {
        x = x * 1103515245u + 12345u;
        unsigned s = (x >> 8) % LIVE, r = (x >> 18) % LIVE;
        h->release(live[s]);
        size[s] = 16 + (x >> 3) % 513;
        unsigned char *p = h->alloc(size[s]);
        live[s] = p;
        if (h->check) {
            crawl_heap_check(p, 8, 1);
            crawl_heap_check(p + size[s] - 8, 8, 1);
            crawl_heap_check(live[r], 8, 0);
        }
        memset(p, 1, 8);
        memset(p + size[s] - 8, 2, 8);
        unsigned long v;
        memcpy(&v, live[r], 8);
        sink += v;
    }
    double ns = (now_ns() - t0) / OPS;
    for (int i = 0; i < LIVE; i++)
        h->release(live[i]);
    return ns;
}

static double median(const heap *h)
{
    double b[BATCHES];
    for (int k = 0; k < BATCHES; k++)
        b[k] = run(h);
    return bench_median(b, BATCHES);
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "glibc";
    heap glibc = {malloc, free, 0};
#ifdef CRAWL_BENCH_ASAN
    printf("asan %.1f\n", median(&glibc));
    (void)mode;
#else
    if (strcmp(mode, "crawl") == 0) {
        crawl_thread_attach();
        heap checked = {crawl_heap_malloc, crawl_heap_free, 1};
        printf("crawl %.1f\n", median(&checked));
    } else {
        printf("glibc %.1f\n", median(&glibc));
    }
#endif
    return 0;
}
