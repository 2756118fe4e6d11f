/* The sampled heap profile's samples are CRAWL__HP_ALIGN-aligned glibc
 * chunks, so that the preload's free tells them by their address, with no
 * filter (crawl__free_kind is then FREE_ALIGNED alone). Run with
 * CRAWL_OPTIONS=heap_profile=1:heap_sample_bytes=262144:gpa_sample_rate=0
 * and glibc's mmap threshold fixed at 128 KiB: a chunk of 200 KiB is then
 * mapped, 16 bytes past a page's start, unless it is a sample, so each
 * entry point's samples are exactly its aligned chunks. The tests run in
 * this order: the last one makes a sample that is not aligned. */
#include <dlfcn.h>
#include <malloc.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include <crawl/heap_profile.h>
#include <crawl/sanitizer.h>

#define BIG (200 * 1024)
#define N 64

static size_t live_objects(void)
{
    crawl_heap_totals t;
    crawl_heap_profile_totals(&t);
    return t.live_objects;
}

static int is_aligned(const void *p) { return !((uintptr_t)p & (CRAWL__HP_ALIGN - 1)); }

enum { MALLOC, CALLOC, REALLOC, MEMALIGN, STRDUP };
static const int entries[] = {MALLOC, CALLOC, REALLOC, MEMALIGN, STRDUP};

static void *make(int how, const char *text)
{
    switch (how) {
    case MALLOC: return malloc(BIG);
    case CALLOC: return calloc(BIG / 8, 8);
    case REALLOC: {
        void *p = malloc(1000);
        return p ? realloc(p, BIG) : NULL;
    }
    case MEMALIGN: return memalign(64, BIG);
    default: return strdup(text);
    }
}

/* N chunks from one entry point: as many samples as aligned chunks, some
 * of each; every sample's free takes it out */
static void check_entry(int how)
{
    static char text[BIG];
    memset(text, 'x', BIG - 1);
    void *p[N];
    size_t before = live_objects();
    int aligned = 0;
    for (int i = 0; i < N; i++) {
        p[i] = make(how, text);
        assert_non_null(p[i]);
        aligned += is_aligned(p[i]);
        if (how == CALLOC) {
            const unsigned char *c = p[i];
            for (size_t j = 0; j < BIG; j += 4093)
                assert_int_equal(c[j], 0);
        }
        if (how == STRDUP)
            assert_int_equal(strlen(p[i]), BIG - 1);
    }
    size_t recorded = live_objects() - before;
    /* 1 - e^(-200/256) of them on average: about 35 */
    assert_in_range(recorded, 8, N);
    assert_int_equal(aligned, (int)recorded);
    for (int i = 0; i < N; i++)
        free(p[i]);
    assert_int_equal(live_objects(), before);
    assert_int_equal(crawl__free_kind, CRAWL__FREE_ALIGNED);
}

static int setup(void **state)
{
    (void)state;
    /* fixed: glibc would raise it past 200 KiB at the first free */
    assert_int_equal(mallopt(M_MMAP_THRESHOLD, 128 * 1024), 1);
    for (int i = 0; i < 100; i++) {     /* a thread's first visit only starts its count */
        void *volatile q = malloc(BIG);
        free(q);
    }
    return 0;
}

/* state: the entry point (a pointer to one of the enum's values) */
static void test_entry_samples(void **state) { check_entry(*(const int *)*state); }

/* An alignment wider than the samples' is kept */
static void test_wide_alignment_kept(void **state)
{
    (void)state;
    size_t before = live_objects();
    void *p[N];
    for (int i = 0; i < N; i++) {
        assert_int_equal(posix_memalign(&p[i], 16384, BIG), 0);
        assert_int_equal((uintptr_t)p[i] & 16383, 0);
    }
    assert_in_range(live_objects() - before, 8, N);
    for (int i = 0; i < N; i++)
        free(p[i]);
    assert_int_equal(live_objects(), before);
}

/* A sample is glibc's own chunk: glibc's free takes it, bypassing the
 * preload (the profile then keeps listing it, as the README says) */
static void test_glibc_free_takes_a_sample(void **state)
{
    (void)state;
    void (*libc_free)(void *) = (void (*)(void *))dlsym(RTLD_DEFAULT, "__libc_free");
    assert_non_null(libc_free);
    for (int i = 0; i < 1000; i++) {
        void *p = malloc(BIG);
        assert_non_null(p);
        if (is_aligned(p)) {
            libc_free(p);
            return;
        }
        free(p);
    }
    fail_msg("no sample in 1000 allocations of 200 KiB");
}

/* Sampling densely, samples are not made aligned (the memory it would
 * cost): the first one put in the filter switches free to the filter */
static void test_dense_samples_use_the_filter(void **state)
{
    (void)state;
    assert_int_equal(crawl__free_kind, CRAWL__FREE_ALIGNED);
    assert_int_equal(crawl_sanitizer_set_options("heap_sample_bytes=1024"), 0);
    assert_int_equal(crawl_heap_profile_start(), 0);
    /* what is left of the countdown drawn at the old interval (4 MiB: one
     * time in e^16) */
    for (int i = 0; i < 20; i++) {
        void *volatile q = malloc(BIG);
        free(q);
    }
    void *p[N];
    size_t before = live_objects();
    int aligned = 0;
    for (int i = 0; i < N; i++) {
        p[i] = malloc(BIG);
        aligned += is_aligned(p[i]);
    }
    assert_int_equal(live_objects() - before, N);   /* each a sample */
    assert_int_equal(aligned, 0);
    assert_int_equal(crawl__free_kind, CRAWL__FREE_ALIGNED | CRAWL__FREE_FILTER);
    for (int i = 0; i < N; i++)
        free(p[i]);
    assert_int_equal(live_objects(), before);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_prestate(test_entry_samples, (void *)&entries[MALLOC]),
        cmocka_unit_test_prestate(test_entry_samples, (void *)&entries[CALLOC]),
        cmocka_unit_test_prestate(test_entry_samples, (void *)&entries[REALLOC]),
        cmocka_unit_test_prestate(test_entry_samples, (void *)&entries[MEMALIGN]),
        cmocka_unit_test_prestate(test_entry_samples, (void *)&entries[STRDUP]),
        cmocka_unit_test(test_wide_alignment_kept),
        cmocka_unit_test(test_glibc_free_takes_a_sample),
        cmocka_unit_test(test_dense_samples_use_the_filter),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
