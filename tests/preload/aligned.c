/* The sampled heap profile's samples are glibc chunks that the preload's
 * free tells by their address (crawl__hp_addr_tellable: 4 KiB-aligned, or
 * 16 bytes past a page's start, where glibc puts a chunk it maps whole)
 * and then their chunk's shape (1 KiB at least, or mapped whole), so free
 * needs no filter (crawl__free_kind is then FREE_ALIGNED alone).
 * Run with CRAWL_OPTIONS=heap_profile=1:heap_sample_bytes=262144:
 * gpa_sample_rate=0. Whether a chunk was recorded shows when it is freed
 * (the live count drops by one), so each chunk is checked on its own. The
 * tests run in this order: the last two record pointers free cannot tell.
 * Small samples (up to 16 KiB) are made the size of their class and kept
 * for the next sample of their class when freed (test_spares_reused). */
#include <dlfcn.h>
#include <malloc.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include <crawl/heap_profile.h>
#include <crawl/sanitizer.h>

#include "../heap_live.h"

#define SMALL (100 * 1024)              /* below glibc's mmap threshold: a heap chunk */
#define BIG (200 * 1024)                /* above it: mapped whole */
#define N 64
#define SPARES 4                        /* chunks kept a class (preload.c) */

/* p, as the compiler cannot follow it: stores before a free are not
 * dropped, nor reads of what malloc returned taken as indeterminate */
static void *opaque(void *p)
{
    __asm__ volatile("" : "+r"(p) : : "memory");
    return p;
}

static int tellable(const void *p) { return crawl__hp_addr_tellable((uintptr_t)p); }
static int page_aligned(const void *p) { return !((uintptr_t)p & 4095); }

enum { MALLOC, CALLOC, REALLOC, MEMALIGN, STRDUP };
static const int entries[] = {MALLOC, CALLOC, REALLOC, MEMALIGN, STRDUP};

static void *make(int how, size_t n)
{
    static char text[BIG + 1];
    switch (how) {
    case MALLOC: return malloc(n);
    case CALLOC: return calloc(n / 8, 8);
    case REALLOC: {                      /* (its first bytes 0x3c: moved, they stay) */
        void *p = malloc(1000);
        if (!p)
            return NULL;
        memset(p, 0x3c, 1000);
        return realloc(p, n);
    }
    case MEMALIGN: return memalign(64, n);
    default:
        memset(text, 'x', n - 1);
        text[n - 1] = '\0';
        return strdup(text);
    }
}

/* N chunks of n bytes from one entry point, freed one by one: each that
 * was recorded (a sample) is tellable (made 4 KiB-aligned, unless glibc
 * placed it so already), some are samples, and each sample's free takes it out. (A big one is
 * glibc's mapped chunk when glibc maps it, but glibc may carve it from
 * free heap space instead: test_large_calloc_untouched asks for one no
 * heap space holds.) */
static void check_entry(int how, size_t n)
{
    void *p[N];
    size_t start = live_objects();
    for (int i = 0; i < N; i++) {
        p[i] = make(how, n);
        assert_non_null(p[i]);
        if (how == CALLOC) {
            const unsigned char *c = p[i];
            for (size_t j = 0; j < n; j += 4093)
                assert_int_equal(c[j], 0);
        }
        if (how == STRDUP)
            assert_int_equal(strlen(p[i]), n - 1);
    }
    uintptr_t addr[N];                   /* (read before any free: GCC's -Wuse-after-free) */
    for (int i = 0; i < N; i++)
        addr[i] = (uintptr_t)p[i];
    int samples = 0;
    for (int i = 0; i < N; i++) {
        uintptr_t a = addr[i];
        size_t before = live_objects();
        free(p[i]);
        size_t after = live_objects();
        assert_true(after == before || after == before - 1);
        if (after == before - 1) {
            samples++;
            if (!tellable((void *)a))
                fail_msg("sample %#lx of %zu bytes (entry %d) is not where free can tell it",
                         (unsigned long)a, n, how);
        }
    }
    assert_int_equal(live_objects(), start);
    /* 1 - e^(-n/256 KiB) of them on average: 32% or 54% */
    assert_in_range(samples, 4, N);
    assert_int_equal(crawl__free_kind, CRAWL__FREE_ALIGNED);
}

/* Samples of n bytes from one entry point, made until 16 were, the
 * allocations that were not freed at once: each sample is tellable, holds
 * n bytes (a small one is made the size of its class, and may be a spare
 * chunk: calloc's is cleared, realloc's and strdup's hold their bytes),
 * and each sample's free takes it out. */
static void check_small(int how, size_t n)
{
    void *p[16];
    size_t start = live_objects();
    for (int k = 0; k < 16;) {
        size_t before = live_objects();
        void *q = make(how, n);          /* (calloc's: n / 8 * 8 bytes) */
        size_t m = how == CALLOC ? n / 8 * 8 : n;
        assert_non_null(q);
        if (live_objects() == before) {
            free(q);
            continue;
        }
        assert_int_equal(live_objects(), before + 1);
        if (!tellable(q))
            fail_msg("sample %p of %zu bytes (entry %d) is not where free can tell it", q, n, how);
        assert_true(malloc_usable_size(q) >= m);
        const unsigned char *c = opaque(q);
        if (how == CALLOC)
            for (size_t j = 0; j < m; j++)
                assert_int_equal(c[j], 0);
        if (how == STRDUP)
            assert_int_equal(strlen(q), n - 1);
        if (how == REALLOC)
            for (size_t j = 0; j < m && j < 1000; j++)
                assert_int_equal(c[j], 0x3c);
        memset(q, 0x5c, m);              /* (a spare made from it must be cleared again) */
        p[k++] = q;
    }
    for (int k = 0; k < 16; k++) {
        size_t before = live_objects();
        free(opaque(p[k]));
        assert_int_equal(live_objects(), before - 1);
    }
    assert_int_equal(live_objects(), start);
    assert_int_equal(crawl__free_kind, CRAWL__FREE_ALIGNED);
}

static int setup(void **state)
{
    (void)state;
    /* fixed: glibc would raise it past BIG at the first free of one */
    assert_int_equal(mallopt(M_MMAP_THRESHOLD, 128 * 1024), 1);
    for (int i = 0; i < 100; i++) {     /* a thread's first visit only starts its count */
        void *volatile q = malloc(BIG);
        free(q);
    }
    return 0;
}

/* state: the entry point (a pointer to one of the enum's values) */
static void test_heap_sized_samples(void **state) { check_entry(*(const int *)*state, SMALL); }
static void test_mapped_samples(void **state) { check_entry(*(const int *)*state, BIG); }

/* in the sizes of the first class, the third, and past the last */
static void test_small_samples(void **state)
{
    int how = *(const int *)*state;
    check_small(how, 700);
    check_small(how, 3000);
    check_small(how, 40000);
}

/* the next sample of n bytes from malloc (the others freed at once) */
static unsigned char *sample_of(size_t n)
{
    for (;;) {
        size_t before = live_objects();
        unsigned char *q = opaque(malloc(n));
        if (live_objects() == before + 1)
            return q;
        free(q);
    }
}

static unsigned char *small_sample(void) { return sample_of(100); }

/* A small sample's chunk, freed, is kept (SPARES of a class) and is a
 * next small sample as it was, not made again (memalign cost glibc 5,000
 * instructions a sample here): the first SPARES frees' chunks are the
 * next SPARES samples, in that order, their bytes untouched. (Made before
 * the test, spares of other tests' samples are taken first. glibc itself
 * may hand out the last chunk freed to it untouched, merged into its top:
 * the one after is not asked about.) */
static void test_spares_reused(void **state)
{
    (void)state;
    enum { MADE = SPARES + 4 };
    unsigned char *s[MADE];
    uintptr_t addr[MADE];
    for (int round = 0; round < 2; round++) {
        for (int k = 0; k < MADE; k++)   /* the first round takes what spares there are */
            s[k] = small_sample();
        for (int k = 0; k < MADE; k++) {
            memset(s[k], 0xa0 + k, 100);
            addr[k] = (uintptr_t)s[k];
            free(opaque(s[k]));          /* the first SPARES are kept */
        }
    }
    for (int k = 0; k < SPARES; k++) {
        s[k] = small_sample();
        if ((uintptr_t)s[k] != addr[k])
            fail_msg("sample %d is %p, not the chunk freed %d-th (%#lx)", k, (void *)s[k], k,
                     (unsigned long)addr[k]);
        for (int j = 0; j < 100; j++)
            assert_int_equal(s[k][j], 0xa0 + k);
    }
    for (int k = 0; k < SPARES; k++)
        free(s[k]);
}

/* The child ends by SIGABRT (a double free seen), not by _exit (3: one
 * chunk handed out twice) */
static void expect_abort(pid_t child)
{
    int status;
    assert_int_equal(waitpid(child, &status, 0), child);
    if (!WIFSIGNALED(status))
        fail_msg("the double free did not abort: exit status %d (3: one chunk live twice)",
                 WEXITSTATUS(status));
    assert_int_equal(WTERMSIG(status), SIGABRT);
}

/* The child ends by _exit(0), each of its checks held (else its exit
 * status says which failed) */
static void expect_clean_exit(pid_t child)
{
    int status;
    assert_int_equal(waitpid(child, &status, 0), child);
    if (!WIFEXITED(status))
        fail_msg("the child was killed by signal %d", WTERMSIG(status));
    assert_int_equal(WEXITSTATUS(status), 0);
}

/* A spare freed again (a double free) is said and the process aborted, as
 * glibc's free does for one it sees, instead of being kept twice and
 * handed out as two samples' memory: in each class (1 to 16 KiB), as free
 * looks among the spares of the class the chunk's size says. In a child
 * each: */
static void test_spare_freed_twice(void **state)
{
    (void)state;
    static const size_t sizes[] = {100, 1500, 3000, 6000, 12000};
    for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++) {
        pid_t child = fork();
        assert_true(child >= 0);
        if (child == 0) {
            /* q a spare (then its slot is free) or made (no spare held):
             * its free keeps it */
            unsigned char *q = sample_of(sizes[s]);
            free(opaque(q));
            free(opaque(q));             /* (crawl aborts here) */
            unsigned char *a = sample_of(sizes[s]), *b = sample_of(sizes[s]);
            _exit(a == b ? 3 : 4);       /* 3: q handed out twice */
        }
        expect_abort(child);
    }
}

/* A double free whose first free went to glibc (the class's spares were
 * full): the chunk, in glibc's tcache, still shows a class's size, and was
 * kept as a spare all the same, then handed out by glibc and as a sample
 * at once. Only a recorded sample's chunk is kept now: glibc sees the
 * second free and aborts. In a child: */
static void test_double_free_through_glibc(void **state)
{
    (void)state;
    pid_t child = fork();
    assert_true(child >= 0);
    if (child == 0) {
        unsigned char *held[SPARES];
        for (int k = 0; k < SPARES; k++) /* the spares taken, then SPARES kept: full */
            held[k] = small_sample();
        for (int k = 0; k < SPARES; k++)
            free(held[k]);
        void *q = memalign(4096, 1024);
        uintptr_t qa = (uintptr_t)q;
        void *volatile again = q;        /* (GCC's -Wuse-after-free) */
        free(q);                         /* to glibc (a sample or not: no slot) */
        unsigned char *s = small_sample();   /* a slot free again */
        free(again);                     /* (glibc aborts here) */
        uintptr_t a = (uintptr_t)malloc(1024), b = (uintptr_t)small_sample();
        _exit(a == qa && b == qa ? 3 : 4);   /* 3: q live twice */
        (void)s;
    }
    expect_abort(child);
}

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

/* A small sample at an alignment wider than a page is made as big as
 * free tells a placed one (1 KiB at least: glibc's chunk of 1,000 bytes
 * at 8 KiB is 1,008): its free takes it out */
static void test_wide_alignment_small_samples(void **state)
{
    (void)state;
    int samples = 0;
    for (int i = 0; i < 200000 && samples < 8; i++) {
        size_t before = live_objects();
        void *p = NULL;
        assert_int_equal(posix_memalign(&p, 8192, 1000), 0);
        assert_int_equal((uintptr_t)p & 8191, 0);
        if (live_objects() == before + 1) {   /* 1 in 262 on average */
            samples++;
            assert_true(malloc_usable_size(p) >= 1000);
            memset(p, 0x6b, 1000);
        }
        free(opaque(p));
        assert_int_equal(live_objects(), before);
    }
    assert_int_equal(samples, 8);
    assert_int_equal(crawl__free_kind, CRAWL__FREE_ALIGNED);
}

/* A pointer at a tellable address that the preload did not place, when
 * recorded (here through crawl_heap_profile_alloc; a sample the pool or a
 * failed memalign gave is another): free looks for it in the filter, as
 * its chunk has not a placed sample's shape, and its free takes it out.
 * In a child: the filter's kind bit stays set once set. */
static void test_tellable_records_use_the_filter(void **state)
{
    (void)state;
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        void *p = NULL;
        for (int i = 0; i < 100 && !p; i++) {
            size_t before = live_objects();
            p = memalign(4096, 64);      /* 4 KiB-aligned, in a chunk of 80 bytes */
            if (!p || !tellable(p))
                _exit(2);
            if (live_objects() != before) {   /* (a sample itself: one in 4,000) */
                free(p);
                p = NULL;
            }
        }
        if (!p || crawl__free_kind != CRAWL__FREE_ALIGNED)
            _exit(3);
        size_t before = live_objects();
        crawl_heap_profile_alloc(p, (size_t)1 << 30, 0);   /* 1 GiB counted: a sample, surely */
        if (live_objects() != before + 1)
            _exit(4);
        if (!(crawl__free_kind & CRAWL__FREE_FILTER))
            _exit(5);
        free(opaque(p));
        _exit(live_objects() == before ? 0 : 6);
    }
    expect_clean_exit(pid);
}

/* A placed sample resized by glibc's own realloc, past the preload (it
 * shrinks in place: a chunk of 80 bytes at the sample's address, its
 * entry still listed), then recorded again there through the API: the
 * new record's free finds it through the filter and takes it out (the
 * entry replaced in place set no kind bit: its free took the fast path
 * to glibc, the entry left behind; found by a review). In a child. */
static void test_replaced_sample_uses_the_filter(void **state)
{
    (void)state;
    void *(*libc_realloc)(void *, size_t) =
        (void *(*)(void *, size_t))dlsym(RTLD_DEFAULT, "__libc_realloc");
    assert_non_null(libc_realloc);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        if (crawl__free_kind != CRAWL__FREE_ALIGNED)
            _exit(2);
        unsigned char *a = sample_of(1500);   /* 4 KiB-aligned, in a 2 KiB class chunk */
        size_t with = live_objects();
        if (libc_realloc(a, 64) != a)    /* (glibc shrinks a chunk in place) */
            _exit(3);
        crawl_heap_profile_alloc(a, (size_t)1 << 30, 0);   /* a sample, surely: replaces */
        if (live_objects() != with)
            _exit(4);
        free(opaque(a));
        _exit(live_objects() == with - 1 ? 0 : 5);
    }
    expect_clean_exit(pid);
}

/* A large sampled calloc is glibc's own, its fresh pages not cleared
 * again: a 64 MiB one stays almost wholly unresident (made aligned and
 * cleared with memset, each one was committed whole) */
static void test_large_calloc_untouched(void **state)
{
    (void)state;
    enum { MIB64 = 64 << 20 };
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    static unsigned char vec[(64 << 20) / 4096 + 1];
    for (int round = 0; round < 4; round++) {
        size_t before = live_objects();
        unsigned char *p = calloc(1, MIB64);
        assert_non_null(p);
        assert_int_equal(live_objects(), before + 1);   /* 64 MiB: a sample, surely */
        uintptr_t lo = (uintptr_t)p & ~(page - 1);
        assert_int_equal(mincore((void *)lo, MIB64, vec), 0);
        size_t resident = 0;
        for (size_t i = 0; i < MIB64 / page; i++)
            resident += vec[i] & 1;
        assert_true(resident < 16);
        assert_int_equal(p[MIB64 / 2], 0);
        free(p);
        assert_int_equal(live_objects(), before);
    }
}

/* A sample is glibc's own chunk: glibc's free takes it, bypassing the
 * preload (the profile then keeps listing it, as the README says) */
static void test_glibc_free_takes_a_sample(void **state)
{
    (void)state;
    void (*libc_free)(void *) = (void (*)(void *))dlsym(RTLD_DEFAULT, "__libc_free");
    assert_non_null(libc_free);
    for (int i = 0; i < 1000; i++) {
        size_t before = live_objects();
        void *p = malloc(SMALL);
        assert_non_null(p);
        if (live_objects() == before + 1) {
            libc_free(p);
            assert_int_equal(live_objects(), before + 1);   /* still listed */
            crawl_heap_profile_free(p);  /* (else a new sample there replaces it, uncounted) */
            assert_int_equal(live_objects(), before);
            return;
        }
        free(p);
    }
    fail_msg("no sample in 1000 allocations of 100 KiB");
}

/* A pointer free cannot tell, recorded in a filter slot whose count is
 * stuck (a bootstrap block's, or 255 pointers'): its free still takes it
 * out (it went to glibc, the entry left behind: the kind's filter bit was
 * set only past the stuck count) */
static void test_stuck_slot(void **state)
{
    (void)state;
    assert_int_equal(crawl__free_kind, CRAWL__FREE_ALIGNED);
    char *q = NULL, *rejected[100];
    int nrejected = 0;
    while (!q && nrejected < 100) {
        size_t before = live_objects();
        q = malloc(100);
        if (live_objects() != before || tellable(q)) {   /* a sample, or a lucky address */
            rejected[nrejected++] = q;   /* (kept: freed, it would come back) */
            q = NULL;
        }
    }
    while (nrejected)
        free(rejected[--nrejected]);
    assert_non_null(q);
    unsigned slot = crawl__hp_filter_slot(q);
    uintptr_t a = (uintptr_t)1 << 40;
    while (crawl__hp_filter_slot((const void *)a) != slot)
        a += 4096;
    crawl__hp_filter_stick((const void *)a);
    size_t before = live_objects();
    crawl_heap_profile_alloc(q, (size_t)1 << 30, 0);   /* 1 GiB counted: a sample, surely */
    assert_int_equal(live_objects(), before + 1);
    assert_true(crawl__free_kind & CRAWL__FREE_FILTER);
    free(q);
    assert_int_equal(live_objects(), before);
}

/* Sampling densely, samples are not placed (the memory it would cost):
 * free tests the filter, and takes each out */
static void test_dense_samples_use_the_filter(void **state)
{
    (void)state;
    assert_int_equal(crawl_sanitizer_set_options("heap_sample_bytes=1024"), 0);
    assert_int_equal(crawl_heap_profile_start(), 0);
    /* what is left of the countdown drawn at the old interval (4 MiB: one
     * time in e^16) */
    for (int i = 0; i < 40; i++) {
        void *volatile q = malloc(SMALL);
        free(q);
    }
    void *p[N];
    size_t before = live_objects();
    int aligned = 0;
    for (int i = 0; i < N; i++) {
        p[i] = malloc(SMALL);
        aligned += page_aligned(p[i]);
    }
    assert_int_equal(live_objects() - before, N);   /* each a sample */
    assert_true(aligned < N / 4);
    assert_int_equal(crawl__free_kind, CRAWL__FREE_ALIGNED | CRAWL__FREE_FILTER);
    for (int i = 0; i < N; i++)
        free(p[i]);
    assert_int_equal(live_objects(), before);
}

#define ENTRY_TESTS(test)                                                                      \
    cmocka_unit_test_prestate(test, (void *)&entries[MALLOC]),                                 \
        cmocka_unit_test_prestate(test, (void *)&entries[CALLOC]),                             \
        cmocka_unit_test_prestate(test, (void *)&entries[REALLOC]),                            \
        cmocka_unit_test_prestate(test, (void *)&entries[MEMALIGN]),                           \
        cmocka_unit_test_prestate(test, (void *)&entries[STRDUP])

int main(void)
{
    const struct CMUnitTest tests[] = {
        ENTRY_TESTS(test_heap_sized_samples),
        ENTRY_TESTS(test_mapped_samples),
        ENTRY_TESTS(test_small_samples),
        cmocka_unit_test(test_spares_reused),
        cmocka_unit_test(test_spare_freed_twice),
        cmocka_unit_test(test_double_free_through_glibc),
        cmocka_unit_test(test_wide_alignment_kept),
        cmocka_unit_test(test_wide_alignment_small_samples),
        cmocka_unit_test(test_tellable_records_use_the_filter),
        cmocka_unit_test(test_replaced_sample_uses_the_filter),
        cmocka_unit_test(test_large_calloc_untouched),
        cmocka_unit_test(test_glibc_free_takes_a_sample),
        cmocka_unit_test(test_stuck_slot),
        cmocka_unit_test(test_dense_samples_use_the_filter),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
