/* bench.h: the clock and the median every benchmark in bench/ uses. */
#ifndef CRAWL_BENCH_H
#define CRAWL_BENCH_H

#include <stdlib.h>
#include <time.h>

/* Monotonic time in nanoseconds. */
static inline double now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static inline int bench_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Sorts v[0..n) and returns its middle element. */
static inline double bench_median(double *v, size_t n)
{
    qsort(v, n, sizeof v[0], bench_cmp_double);
    return v[n / 2];
}

#endif
