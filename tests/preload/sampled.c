/* The sampled heap profile's chunks under libcrawl-preload.so: a sample is
 * a chunk of glibc's with a header of crawl's in front, which free tells
 * apart without the heap profile's free filter. These check that every
 * entry point gives and takes such chunks as glibc's own (size, alignment,
 * zeroing, contents kept across realloc in and out of samples), that their
 * frees take them out of the profile (after a stop too), that the leak
 * check sees them, and that in sampled mode the filter stays unused (its
 * test stays off free's fast path). Linked against libcrawl-preload.so,
 * run with CRAWL_OPTIONS=heap_profile=1:heap_sample_bytes=256:gpa_sample_rate=0.
 * The tests run in this order: the last one records every allocation,
 * which turns the filter on for good. */
#define _GNU_SOURCE
#include <malloc.h>
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include <crawl/heap_profile.h>
#include <crawl/sanitizer.h>

static size_t live_objects(void)
{
    crawl_heap_totals t;
    crawl_heap_profile_totals(&t);
    return t.live_objects;
}

static unsigned rng = 12345;

static size_t rand_below(size_t n)
{
    rng = rng * 1103515245u + 12345u;
    return (rng >> 8) % n;
}

/* p's n bytes hold the pattern of seed */
static void fill(unsigned char *p, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (unsigned char)(seed + i * 7);
}

static int holds(const unsigned char *p, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++)
        if (p[i] != (unsigned char)(seed + i * 7))
            return 0;
    return 1;
}

/* A fresh allocation: 1 if the heap profile took it as a sample */
static size_t last_live;

static int was_sampled(void)
{
    size_t now = live_objects();
    int grew = now > last_live;
    last_live = now;
    return grew;
}

static void usable_and_writable(void *p, size_t n)
{
    assert_non_null(p);
    size_t u = malloc_usable_size(p);
    assert_true(u >= n);
    memset(p, 0xab, u);                  /* all of it is the program's */
}

enum { ROUNDS = 400, KINDS = 6 };

static void test_every_entry_point(void **state)
{
    (void)state;
    assert_int_equal(crawl_heap_profile_active(), 1);
    size_t base = live_objects();
    last_live = base;
    void *keep[ROUNDS * KINDS];
    int sampled[KINDS] = {0}, plain[KINDS] = {0}, k = 0;
    for (int r = 0; r < ROUNDS; r++) {
        size_t n = 1 + rand_below(1024);
        void *p;

        p = malloc(n);
        usable_and_writable(p, n);
        assert_int_equal((uintptr_t)p % 16, 0);
        (was_sampled() ? sampled : plain)[0]++;
        keep[k++] = p;

        unsigned char *z = calloc(n, 1);
        assert_non_null(z);
        (was_sampled() ? sampled : plain)[1]++;
        for (size_t i = 0; i < n; i++)
            assert_int_equal(z[i], 0);
        usable_and_writable(z, n);
        keep[k++] = z;

        size_t align = (size_t)16 << rand_below(9);   /* 16 .. 4096 */
        p = memalign(align, n);
        usable_and_writable(p, n);
        assert_int_equal((uintptr_t)p % align, 0);
        (was_sampled() ? sampled : plain)[2]++;
        keep[k++] = p;

        assert_int_equal(posix_memalign(&p, 64, n), 0);
        usable_and_writable(p, n);
        assert_int_equal((uintptr_t)p % 64, 0);
        (was_sampled() ? sampled : plain)[3]++;
        keep[k++] = p;

        p = memalign(48, n);             /* glibc rounds it up to 64 */
        usable_and_writable(p, n);
        assert_int_equal((uintptr_t)p % 64, 0);
        (was_sampled() ? sampled : plain)[4]++;
        keep[k++] = p;

        char text[1100];
        memset(text, 'a' + r % 26, n);
        text[n] = '\0';
        char *d = strndup(text, n - n / 3);
        assert_non_null(d);
        assert_int_equal(strlen(d), n - n / 3);
        assert_memory_equal(d, text, n - n / 3);
        (was_sampled() ? sampled : plain)[5]++;
        keep[k++] = d;
    }
    for (int i = 0; i < KINDS; i++) {
        print_message("entry point %d: %d samples, %d not\n", i, sampled[i], plain[i]);
        assert_true(sampled[i] >= 20);
        assert_true(plain[i] >= 20);
    }
    assert_true(live_objects() > base);
    for (int i = 0; i < k; i++)
        free(keep[i]);
    assert_int_equal(live_objects(), base);
    assert_int_equal(__atomic_load_n(&crawl__hp_filtered, __ATOMIC_RELAXED), 0);
}

/* A block moved by realloc after realloc, in and out of samples (a
 * sample's realloc moves it; one that becomes a sample moves into a chunk
 * of its own): its contents stay, and each step leaves one chunk. */
static void test_realloc_in_and_out_of_samples(void **state)
{
    (void)state;
    size_t base = live_objects();
    int into = 0, out_of = 0;
    for (int chain = 0; chain < 40; chain++) {
        size_t n = 1 + rand_below(600);
        unsigned char *p = malloc(n);
        assert_non_null(p);
        int was = live_objects() > base;
        fill(p, n, (unsigned)chain);
        for (int step = 0; step < 50; step++) {
            size_t m = 1 + rand_below(2000);
            unsigned char *q = realloc(p, m);
            assert_non_null(q);
            assert_true(holds(q, n < m ? n : m, (unsigned)chain));
            assert_true(malloc_usable_size(q) >= m);
            size_t live = live_objects();
            assert_in_range(live, base, base + 1);
            int is = live > base;
            into += !was && is;
            out_of += was && !is;
            was = is;
            p = q, n = m;
            fill(p, n, (unsigned)chain);
        }
        free(p);
        assert_int_equal(live_objects(), base);
    }
    print_message("%d moves into samples, %d out of them\n", into, out_of);
    assert_true(into >= 20);
    assert_true(out_of >= 20);
    assert_null(realloc(malloc(5000), 0));   /* a sample (nearly surely) freed by realloc */
    assert_int_equal(live_objects(), base);
    assert_int_equal(__atomic_load_n(&crawl__hp_filtered, __ATOMIC_RELAXED), 0);
}

/* crawl's own allocations (glibc's qsort in the outputs, with more than
 * a few dozen samples live; libdw compiling CFI in a walk) go through the
 * preload's malloc too: they leave the thread's byte countdown as it was.
 * (They took it down: every allocation after an output was a sample.) */
static void test_outputs_leave_the_countdown(void **state)
{
    (void)state;
    void *keep[400];
    size_t base = live_objects();
    for (int i = 0; i < 400; i++)
        keep[i] = malloc(1000);          /* nearly all samples: more than qsort keeps on its stack */
    assert_true(live_objects() - base > 300);
    char path[] = "/tmp/crawl-sampled-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    unlink(path);
    for (int i = 0; i < 3; i++) {
        long before = crawl__hp_countdown;
        crawl_heap_totals t;
        crawl_heap_profile_totals(&t);
        assert_int_equal(crawl_heap_profile_write_fd(fd, CRAWL_HEAP_JSON), 0);
        assert_int_equal(crawl__hp_countdown, before);
        void *volatile p = malloc(1);    /* one byte: a sample one time in 128 */
        free(p);
    }
    close(fd);
    for (int i = 0; i < 400; i++)
        free(keep[i]);
    assert_int_equal(live_objects(), base);
}

/* ---- the leak check sees samples -------------------------------------------------------- */

static void *reachable;

struct pair {
    void *volatile other;            /* (volatile: the compiler would drop a malloc only stored here) */
    char pad[40];
};

__attribute__((noinline)) static void plant_sampled_leaks(void)
{
    for (int i = 0; i < 16; i++) {
        struct pair *volatile p = malloc(sizeof *p);
        p->other = malloc(24);           /* an indirect leak behind each */
        p = NULL;
    }
}

__attribute__((noinline)) static void keep_from_a_global(void) { reachable = malloc(100); }

__attribute__((noinline)) static void scrub(void)
{
    volatile char junk[32768];
    for (size_t i = 0; i < sizeof junk; i++)
        junk[i] = 0;
}

static void test_leak_check_sees_samples(void **state)
{
    (void)state;
    /* a sample in every allocation of this thread, once its countdown,
     * drawn at 256 bytes on average, has run out */
    assert_int_equal(crawl_sanitizer_set_options("heap_sample_bytes=1"), 0);
    assert_int_equal(crawl_heap_profile_start(), 0);
    void *volatile big = malloc(1 << 20);
    free(big);
    size_t base = live_objects();
    plant_sampled_leaks();
    keep_from_a_global();
    scrub();
    assert_int_equal(live_objects(), base + 33);

    char path[] = "/tmp/crawl-sampled-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    unlink(path);
    long n = crawl_leak_check(fd);
    static char report[1 << 16];
    ssize_t got = pread(fd, report, sizeof report - 1, 0);
    close(fd);
    assert_true(got > 0);
    report[got] = '\0';
    assert_int_equal(n, 32);
    assert_non_null(strstr(report, "Direct leak of 768 byte(s) in 16 object(s) allocated from:"));
    assert_non_null(strstr(report, "Indirect leak of 384 byte(s) in 16 object(s) allocated from:"));
    assert_non_null(strstr(report, "plant_sampled_leaks"));
    assert_null(strstr(report, "keep_from_a_global"));
    free(reachable);
    assert_int_equal(__atomic_load_n(&crawl__hp_filtered, __ATOMIC_RELAXED), 0);
}

/* Samples freed or moved after the heap profile stopped, and then while it
 * records every allocation: still glibc's chunks again, and taken out. */
static void test_samples_outlive_their_mode(void **state)
{
    (void)state;
    size_t base = live_objects();
    void *volatile a = malloc(300), *volatile b = malloc(300), *volatile c = malloc(300);
    assert_int_equal(live_objects(), base + 3);
    crawl_heap_profile_stop();
    free(a);
    b = realloc(b, 5000);
    assert_non_null(b);
    assert_int_equal(live_objects(), base + 1);   /* c; b moved, not recorded again */

    assert_int_equal(crawl_sanitizer_set_options("heap_sample_bytes=0"), 0);
    assert_int_equal(crawl_heap_profile_start(), 0);
    void *volatile d = malloc(40);
    assert_int_equal(live_objects(), base + 2);
    assert_int_equal(__atomic_load_n(&crawl__hp_filtered, __ATOMIC_RELAXED), 1);
    free(c);
    free(d);
    free(b);
    assert_int_equal(live_objects(), base);
    crawl_heap_profile_stop();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_entry_point),
        cmocka_unit_test(test_realloc_in_and_out_of_samples),
        cmocka_unit_test(test_outputs_leave_the_countdown),
        cmocka_unit_test(test_leak_check_sees_samples),
        cmocka_unit_test(test_samples_outlive_their_mode),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
