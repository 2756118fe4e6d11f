/* The sampled heap profile under libcrawl-preload.so: every entry point
 * gives and takes samples as glibc's own chunks (size, alignment, zeroing,
 * contents kept across realloc in and out of samples), their frees take
 * them out of the profile (after a stop too, and under every-allocation
 * mode), crawl's own allocations leave the thread's byte countdown alone,
 * the leak check sees samples, and a sample freed by glibc's own free
 * (reached without the preload, as Python's ctypes.CDLL("libc.so.6").free
 * does) is glibc's to free. Linked against libcrawl-preload.so, run with
 * CRAWL_OPTIONS=heap_profile=1:heap_sample_bytes=256:gpa_sample_rate=0 (the
 * guarded pool's chunks are not glibc's: see the README). The tests run in
 * this order. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <malloc.h>
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include <crawl/guarded.h>
#include <crawl/heap_profile.h>
#include <crawl/sanitizer.h>

#include "../heap_live.h"

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
/* (not a constant: clang refuses one that is not a power of two) */
static volatile size_t odd_alignment = 48;

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

        p = memalign(odd_alignment, n);  /* 48: glibc rounds it up to 64 */
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
}

/* The fast path's byte countdown: an allocation of n bytes counts n + 1,
 * so that one of 0 bytes can be a sample too, and the sample points are
 * heap_sample_bytes (256) apart on average, counted so: an allocation is
 * a sample when one falls in its n + 1 bytes, 1 - e^-(n+1)/256 of them. */
static size_t samples_among(size_t n, int count, void **keep)
{
    size_t base = live_objects();
    for (int i = 0; i < count; i++) {
        keep[i] = malloc(n);
        assert_non_null(keep[i]);
    }
    size_t got = live_objects() - base;
    for (int i = 0; i < count; i++)
        free(keep[i]);
    assert_int_equal(live_objects(), base);
    return got;
}

static void test_countdown_counts_bytes(void **state)
{
    (void)state;
    enum { COUNT = 25600 };
    static void *keep[COUNT];
    /* 99.8 expected (standard deviation 10) */
    size_t zero = samples_among(0, COUNT, keep);
    print_message("malloc(0): %zu samples of %d\n", zero, COUNT);
    assert_in_range(zero, 50, 200);
    /* 64 + 1 bytes: 5742 expected (standard deviation 67; a countdown
     * taken down twice as fast would give 10190) */
    size_t small = samples_among(64, COUNT, keep);
    print_message("malloc(64): %zu samples of %d\n", small, COUNT);
    assert_in_range(small, 5742 - 600, 5742 + 600);
}

/* A start draws the calling thread's count for the interval it reads:
 * restarted at 16 bytes after 1e9, the first allocations are samples at
 * once (what was left of the 1e9 count would have run for some 1e9
 * bytes more). Restarted at 256 after, as the tests after expect. */
static void test_start_draws_the_count(void **state)
{
    (void)state;
    static void *keep[64];
    crawl_heap_profile_stop();
    assert_int_equal(crawl_sanitizer_set_options("heap_sample_bytes=1000000000"), 0);
    assert_int_equal(crawl_heap_profile_start(), 0);
    assert_int_equal(samples_among(100, 64, keep), 0);   /* (one in 150,000 runs has one) */
    crawl_heap_profile_stop();
    assert_int_equal(crawl_sanitizer_set_options("heap_sample_bytes=16"), 0);
    assert_int_equal(crawl_heap_profile_start(), 0);
    size_t got = samples_among(100, 64, keep);
    print_message("malloc(100) every 16 bytes: %zu samples of 64\n", got);
    assert_in_range(got, 60, 64);
    crawl_heap_profile_stop();
    assert_int_equal(crawl_sanitizer_set_options("heap_sample_bytes=256"), 0);
    assert_int_equal(crawl_heap_profile_start(), 0);
}

/* malloc(0)s from the fast path: each takes 1 from this thread's
 * crawl__hp_countdown (n + 1), as long as that stays above 0; another
 * thread's word is not touched. The preload reaches the word by its
 * offset from the thread pointer, taken once: that offset is every
 * thread's. 0, or a failed check's line. */
static long *main_countdown;

static void *opaque_malloc(size_t n)
{
    void *p = malloc(n);
    __asm__ volatile("" : "+r"(p) : : "memory");   /* (not elided with its free) */
    return p;
}

static int countdown_steps(void)
{
    long other = main_countdown ? *main_countdown : 0;
    int steps = 0;
    for (int i = 0; i < 4096 && steps < 64; i++) {
        long before = crawl__hp_countdown;
        void *p = opaque_malloc(0);
        long after = crawl__hp_countdown;
        free(p);
        if (before > 1) {                /* (else a sample: the slow path draws again) */
            if (after != before - 1)
                return __LINE__;
            steps++;
        }
    }
    if (steps < 64)
        return __LINE__;
    if (main_countdown && *main_countdown != other)
        return __LINE__;
    return 0;
}

static void *countdown_thread(void *arg)
{
    (void)arg;
    return (void *)(intptr_t)countdown_steps();
}

static void test_countdown_is_each_threads(void **state)
{
    (void)state;
    assert_int_equal(countdown_steps(), 0);
    main_countdown = &crawl__hp_countdown;
    pthread_t t;
    void *line;
    assert_int_equal(pthread_create(&t, NULL, countdown_thread, NULL), 0);
    assert_int_equal(pthread_join(t, &line), 0);
    main_countdown = NULL;
    assert_int_equal((intptr_t)line, 0);
}

/* A block resized by realloc after realloc, in and out of samples: its
 * contents stay, and each step leaves one chunk, recorded or not. */
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
    void *volatile big = malloc(5000);   /* (volatile: clang folds realloc(malloc(n), 0)) */
    assert_null(realloc(big, 0));        /* a sample (nearly surely) freed by realloc */
    assert_int_equal(live_objects(), base);
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
    FILE *out = tmpfile();
    assert_non_null(out);
    int fd = fileno(out);
    for (int i = 0; i < 3; i++) {
        long before = crawl__hp_countdown;
        crawl_heap_totals t;
        crawl_heap_profile_totals(&t);
        assert_int_equal(crawl_heap_profile_write_fd(fd, CRAWL_HEAP_JSON), 0);
        assert_int_equal(crawl__hp_countdown, before);
        void *volatile p = malloc(1);    /* one byte: a sample one time in 128 */
        free(p);
    }
    fclose(out);
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
        /* (zeroed: a stale heap word left in one could point at another pair) */
        struct pair *volatile p = calloc(1, sizeof *p);
        p->other = calloc(1, 24);        /* an indirect leak behind each */
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

/* A sampled table lacks most chunks: a chunk reachable only through one
 * never sampled would be reported. The check refuses it, writing nothing
 * (leak_check=1 records every allocation instead; tests/preload/heap.sh). */
static void test_leak_check_refuses_samples(void **state)
{
    (void)state;
    assert_int_equal(crawl_sanitizer_set_options("heap_sample_bytes=1"), 0);
    assert_int_equal(crawl_heap_profile_start(), 0);
    plant_sampled_leaks();
    keep_from_a_global();
    scrub();
    FILE *out = tmpfile();
    assert_non_null(out);
    assert_int_equal(crawl_leak_check(fileno(out)), -EINVAL);
    char c;
    assert_int_equal(pread(fileno(out), &c, 1, 0), 0);
    fclose(out);
    free(reachable);
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
    free(c);
    free(d);
    free(b);
    assert_int_equal(live_objects(), base);
}

/* A sample freed, resized and measured by glibc's own functions, found on
 * libc's handle (as ctypes and RTLD_DEEPBIND libraries find them, past the
 * preload): a chunk of glibc's like any other. (The profile keeps an
 * entry for each: that free was never seen.) */
static void test_glibcs_own_free_takes_samples(void **state)
{
    (void)state;
    assert_int_equal(crawl_sanitizer_set_options("heap_sample_bytes=1"), 0);
    assert_int_equal(crawl_heap_profile_start(), 0);
    void *libc = dlopen("libc.so.6", RTLD_LAZY | RTLD_NOLOAD);
    assert_non_null(libc);
    void (*glibc_free)(void *) = (void (*)(void *))dlsym(libc, "free");
    void *(*glibc_realloc)(void *, size_t) = (void *(*)(void *, size_t))dlsym(libc, "realloc");
    size_t (*glibc_usable)(void *) = (size_t(*)(void *))dlsym(libc, "malloc_usable_size");
    assert_non_null(glibc_free);
    assert_true(glibc_free != free);     /* the preload's is the program's */
    size_t base = live_objects();
    for (int i = 0; i < 64; i++) {
        char *p = malloc(100 + 4000 * (size_t)i);
        assert_non_null(p);
        assert_true(glibc_usable(p) >= 100 + 4000 * (size_t)i);
        p = glibc_realloc(p, 50);
        assert_non_null(p);
        glibc_free(p);
    }
    assert_true(live_objects() > base);  /* samples, their frees unseen */
    dlclose(libc);
    crawl_heap_profile_stop();
}

/* The README's limit: a chunk of the guarded pool, freed by glibc's own
 * free past the preload, ends the process (a child here). Last: the
 * pool, once made, stays. */
static void test_glibcs_own_free_of_a_pool_chunk_dies(void **state)
{
    (void)state;
    assert_int_equal(crawl_sanitizer_set_options("gpa_sample_rate=1"), 0);
    void *p = NULL;
    for (int i = 0; i < 1 << 21 && !crawl_gpa_owns(p); i++) {
        free(p);                         /* (the thread's countdown takes the new rate in time) */
        p = malloc(64);
    }
    assert_true(crawl_gpa_owns(p));
    void *libc = dlopen("libc.so.6", RTLD_LAZY | RTLD_NOLOAD);
    assert_non_null(libc);
    void (*glibc_free)(void *) = (void (*)(void *))dlsym(libc, "free");
    pid_t child = fork();
    assert_true(child >= 0);
    if (child == 0) {
        int null = open("/dev/null", O_WRONLY);
        dup2(null, 2);                   /* (glibc's message) */
        dup2(null, 1);                   /* (cmocka's, for a test in the child that ends) */
        glibc_free(p);
        _exit(0);
    }
    int status;
    assert_int_equal(waitpid(child, &status, 0), child);
    /* glibc aborts, or its read below a chunk at a page's start faults in
     * the guard page and the pool's report ends the process (exit 1) */
    assert_false(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    free(p);
    dlclose(libc);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_entry_point),
        cmocka_unit_test(test_countdown_counts_bytes),
        cmocka_unit_test(test_start_draws_the_count),
        cmocka_unit_test(test_countdown_is_each_threads),
        cmocka_unit_test(test_realloc_in_and_out_of_samples),
        cmocka_unit_test(test_outputs_leave_the_countdown),
        cmocka_unit_test(test_leak_check_refuses_samples),
        cmocka_unit_test(test_samples_outlive_their_mode),
        cmocka_unit_test(test_glibcs_own_free_takes_samples),
        cmocka_unit_test(test_glibcs_own_free_of_a_pool_chunk_dies),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
