/* bench/heap_profile's workload: 10M malloc/free pairs of 16..527 bytes
 * from three call paths 4 to 7 frames deep, 4096 chunks live at any time
 * (each allocation replaces one). Built as Debian builds programs: -O2,
 * no frame pointers, so stacks need the CFI. Prints its wall time.
 * usage: bench_heap_work [PAIRS] [diverse|stopped]: with "diverse", 192
 * call paths (one of 8 wrappers, then 1 to 24 levels of mid: 8 to 31
 * frames), so that a thread's last few stacks rarely start where the next
 * one does; with "stopped", the ring filled first and then, under
 * libcrawl-preload.so, the heap profile stopped (crawl_heap_profile_stop,
 * looked up at run time: the program links nothing of crawl's) before the
 * timed pairs: what frees cost once a profile that ran has stopped. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define LIVE 4096
static void *ring[LIVE];
static unsigned long sink;

__attribute__((noinline)) static void *leaf(size_t n)
{
    char *p = malloc(n);
    p[0] = (char)n;
    return p;
}
__attribute__((noinline)) static void *mid(size_t n, int depth)
{
    void *p = depth ? mid(n, depth - 1) : leaf(n);
    __asm__ volatile("" ::: "memory");
    return p;
}
__attribute__((noinline)) static void *path_a(size_t n) { return mid(n, 1); }
__attribute__((noinline)) static void *path_b(size_t n) { return mid(n, 2); }
__attribute__((noinline)) static void *path_c(size_t n) { return mid(n, 4); }

/* diverse: a path of its own depth under one of 8 distinct wrappers */
__attribute__((noinline)) static void *deep(size_t n, unsigned path, unsigned extra)
{
    void *p = mid(n, (int)(8 * path + extra));
    __asm__ volatile("" ::: "memory");
    return p;
}
#define WRAPPER(k)                                                                             \
    __attribute__((noinline)) static void *wrap##k(size_t n, unsigned path, unsigned extra)    \
    {                                                                                          \
        void *p = deep(n, path, extra);                                                        \
        sink += k;                                                                             \
        return p;                                                                              \
    }
WRAPPER(0) WRAPPER(1) WRAPPER(2) WRAPPER(3) WRAPPER(4) WRAPPER(5) WRAPPER(6) WRAPPER(7)
static void *(*const wrappers[8])(size_t, unsigned, unsigned) = {wrap0, wrap1, wrap2, wrap3,
                                                                 wrap4, wrap5, wrap6, wrap7};

int main(int argc, char **argv)
{
    long iters = argc > 1 ? atol(argv[1]) : 10000000;
    const char *mode = argc > 2 ? argv[2] : "";
    int diverse = strcmp(mode, "diverse") == 0;
    if (strcmp(mode, "stopped") == 0) {
        for (int i = 0; i < LIVE; i++)
            ring[i] = path_a(16 + (size_t)i % 512);   /* recorded while it runs */
        void (*stop)(void) = (void (*)(void))dlsym(RTLD_DEFAULT, "crawl_heap_profile_stop");
        if (stop)
            stop();
        else                             /* (glibc alone: nothing to stop) */
            fprintf(stderr, "bench_heap_work: no crawl_heap_profile_stop in the process\n");
    } else if (*mode && !diverse) {
        fprintf(stderr, "usage: bench_heap_work [PAIRS] [diverse|stopped]\n");
        return 2;
    }
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    uint64_t x = 88172645463325252ULL;
    for (long i = 0; i < iters; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        size_t n = 16 + (x & 511);
        unsigned slot = (unsigned)(x >> 20) % LIVE;
        free(ring[slot]);
        if (diverse) {
            ring[slot] = wrappers[(x >> 44) & 7](n, (unsigned)(x >> 40) % 3, 1 + (unsigned)(x >> 48) % 8);
            sink += *(char *)ring[slot];
            continue;
        }
        switch ((x >> 40) % 3) {
        case 0: ring[slot] = path_a(n); break;
        case 1: ring[slot] = path_b(n); break;
        default: ring[slot] = path_c(n); break;
        }
        sink += *(char *)ring[slot];
    }
    clock_gettime(CLOCK_MONOTONIC, &b);
    for (int i = 0; i < LIVE; i++)
        free(ring[i]);
    printf("%.3f\n", (double)(b.tv_sec - a.tv_sec) + (double)(b.tv_nsec - a.tv_nsec) / 1e9);
    return sink == 42;
}
