/* bench/depot: ns per crawl_depot_put of a stored 32-frame trace (hit) and
 * of a new one (miss), with 1 and 2 threads, at 1,000 and 100,000 stored
 * traces, next to the bound the issue sets: XXH3 of the same 256 bytes plus
 * a probe of an open-addressing table of the stored hashes, in the same
 * run. Medians of 9 batches. */
#define _GNU_SOURCE
#define XXH_INLINE_ALL
#include <crawl/crawl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <xxhash.h>
#include "bench.h"

#define FRAMES 32
#define BATCHES 9

static uintptr_t (*traces)[FRAMES];      /* stored */
static uintptr_t (*fresh)[FRAMES];       /* never stored before the miss batch */
static unsigned ntraces, nfresh_used;
static volatile uint64_t sink;

static void make(uintptr_t *t, unsigned i, unsigned salt)
{
    for (int k = 0; k < FRAMES; k++)
        t[k] = 0x400000 + (uintptr_t)i * 4096 + (uintptr_t)k * 64 + salt;
}

/* ---- the bound: XXH3 + open addressing --------------------------------------- */
static uint64_t *table;
static size_t table_mask;

static void table_build(unsigned n)
{
    size_t size = 1;
    while (size < 2 * (size_t)n)
        size <<= 1;
    free(table);
    table = calloc(size, sizeof *table);
    table_mask = size - 1;
    for (unsigned i = 0; i < n; i++) {
        uint64_t h = XXH3_64bits(traces[i], sizeof traces[i]) | 1;
        size_t j = h & table_mask;
        while (table[j])
            j = (j + 1) & table_mask;
        table[j] = h;
    }
}

static uint64_t table_lookup(const uintptr_t *t)
{
    uint64_t h = XXH3_64bits(t, FRAMES * sizeof *t) | 1;
    size_t j = h & table_mask;
    while (table[j] && table[j] != h)
        j = (j + 1) & table_mask;
    return table[j];
}

/* ---- timed loops ------------------------------------------------------------------- */
#define OPS 200000
static unsigned order[OPS];

typedef struct job {
    int what;                            /* 0 depot hit, 1 bound */
    double ns;
} job;

static void *run_job(void *arg)
{
    job *j = arg;
    double t0 = now_ns();
    uint64_t acc = 0;
    for (unsigned i = 0; i < OPS; i++) {
        const uintptr_t *t = traces[order[i]];
        acc += j->what == 0 ? crawl_depot_put(t, FRAMES) : table_lookup(t);
    }
    j->ns = (now_ns() - t0) / OPS;
    sink += acc;
    return NULL;
}

static double median_parallel(int what, int threads)
{
    double b[BATCHES];
    for (int k = 0; k < BATCHES; k++) {
        job jobs[2] = {{what, 0}, {what, 0}};
        pthread_t th[2];
        for (int t = 0; t < threads; t++)
            pthread_create(&th[t], NULL, run_job, &jobs[t]);
        double worst = 0;
        for (int t = 0; t < threads; t++) {
            pthread_join(th[t], NULL);
            if (jobs[t].ns > worst)
                worst = jobs[t].ns;
        }
        b[k] = worst;
    }
    return bench_median(b, BATCHES);
}

static double miss_ns(void)
{
    enum { N = 2000 };
    double b[BATCHES];
    for (int k = 0; k < BATCHES; k++) {
        double t0 = now_ns();
        for (unsigned i = 0; i < N; i++)
            sink += crawl_depot_put(fresh[nfresh_used + i], FRAMES);
        b[k] = (now_ns() - t0) / N;
        nfresh_used += N;
    }
    return bench_median(b, BATCHES);
}

int main(void)
{
    static const unsigned sizes[2] = {1000, 100000};
    traces = malloc(sizeof *traces * 100000);
    fresh = malloc(sizeof *fresh * 2 * BATCHES * 2000);
    for (unsigned i = 0; i < 2 * BATCHES * 2000; i++)
        make(fresh[i], i, 7);            /* salt 7: distinct from every stored trace */
    crawl_thread_attach();
    printf("bench/depot: ns per operation on a 32-frame (256-byte) trace, median of %d batches\n\n",
           BATCHES);
    printf("%-8s %9s %9s %9s %9s %9s %9s %9s\n", "stored", "hit 1T", "hit 2T", "bound 1T",
           "bound 2T", "hit/bnd", "miss", "miss/bnd");
    for (int s = 0; s < 2; s++) {
        for (unsigned i = ntraces; i < sizes[s]; i++) {
            make(traces[i], i, 0);
            crawl_depot_put(traces[i], FRAMES);
        }
        ntraces = sizes[s];
        table_build(ntraces);
        unsigned x = 1;
        for (unsigned i = 0; i < OPS; i++) {
            x = x * 1103515245u + 12345u;
            order[i] = (x >> 8) % ntraces;
        }
        double hit1 = median_parallel(0, 1), hit2 = median_parallel(0, 2);
        double bnd1 = median_parallel(1, 1), bnd2 = median_parallel(1, 2);
        double miss = miss_ns();
        printf("%-8u %9.1f %9.1f %9.1f %9.1f %8.2fx %9.1f %8.2fx\n", ntraces, hit1, hit2, bnd1,
               bnd2, hit1 / bnd1, miss, miss / bnd1);
    }
    crawl_depot_stats st;
    crawl_depot_get_stats(&st);
    printf("\ndepot: %lu traces, %lu KiB of arenas\n", st.ids, st.bytes / 1024);
    return 0;
}
