/* The preload's and the leak check's edge cases, each once a defect:
 * a failed realloc recorded its block at the size asked for (the leak
 * check then scanned far past it and crashed) and lost errno; pvalloc of
 * nearly SIZE_MAX wrapped to a small block; a leaked chunk that points to
 * itself was called an indirect leak; the check crashed when another
 * thread unmapped a large chunk while it ran. Linked against
 * libcrawl-preload.so, run with CRAWL_OPTIONS=heap_profile=1:gpa_sample_rate=0. */
#define _GNU_SOURCE
#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include <crawl/heap_profile.h>

static size_t live_bytes(void)
{
    crawl_heap_totals t;
    crawl_heap_profile_totals(&t);
    return t.live_bytes;
}

/* The leak report of a check now, as text (from a temporary file) */
static char report[1 << 16];

static long check_into_report(void)
{
    FILE *f = tmpfile();
    assert_non_null(f);
    long n = crawl_leak_check(fileno(f));
    rewind(f);
    size_t got = fread(report, 1, sizeof report - 1, f);
    report[got] = '\0';
    fclose(f);
    return n;
}

static void *volatile keep;

static void test_failed_realloc_keeps_the_block(void **state)
{
    (void)state;
    assert_int_equal(crawl_heap_profile_active(), 1);
    size_t before = live_bytes();
    keep = malloc(32);
    assert_non_null(keep);
    errno = 0;
    void *q = realloc(keep, SIZE_MAX / 2);
    assert_null(q);
    assert_int_equal(errno, ENOMEM);     /* as glibc left it, recording or not */
    size_t grew = live_bytes() - before;
    assert_in_range(grew, 32, malloc_usable_size(keep));
    assert_true(check_into_report() >= 0);   /* (scanned SIZE_MAX / 2 bytes before: SIGSEGV) */
    free(keep);
    keep = NULL;
    assert_int_equal(live_bytes(), before);
}

static void test_pvalloc_near_size_max(void **state)
{
    (void)state;
    errno = 0;
    assert_null(pvalloc(SIZE_MAX - 10));
    assert_int_equal(errno, ENOMEM);
}

/* ---- a leaked chunk that points to itself ---------------------------------------------- */

#define HIDE ((uintptr_t)0x5a5a5a5a5a5a5a5aULL)
static uintptr_t hidden;                 /* the node's address, not as a pointer */

struct node {
    struct node *next, *prev;
};

__attribute__((noinline)) static void leak_ring(void)
{
    struct node *volatile n = malloc(sizeof *n);
    n->next = n->prev = n;               /* an empty circular list's head */
    hidden = (uintptr_t)n ^ HIDE;
    n = NULL;
}

__attribute__((noinline)) static void scrub(void)
{
    volatile char junk[16384];
    memset((char *)junk, 0, sizeof junk);
}

static void test_self_pointer_is_a_direct_leak(void **state)
{
    (void)state;
    leak_ring();
    scrub();
    assert_true(check_into_report() >= 1);
    if (!strstr(report, "Direct leak of 16 byte(s) in 1 object(s) allocated from:"))
        print_message("%s", report);
    assert_non_null(strstr(report, "Direct leak of 16 byte(s) in 1 object(s) allocated from:"));
    assert_null(strstr(report, "Indirect leak"));
    free((void *)(hidden ^ HIDE));
}

/* ---- large chunks unmapped by another thread during the check ------------------------------ */

static atomic_int stop;

static void *churn(void *arg)
{
    (void)arg;
    while (!atomic_load(&stop)) {
        char *volatile p = malloc(1 << 20);   /* above the mmap threshold: a mapping each */
        memset(p, 1, 4096);
        free(p);
    }
    return NULL;
}

static void test_check_while_chunks_come_and_go(void **state)
{
    (void)state;
    mallopt(M_MMAP_THRESHOLD, 128 * 1024);
    pthread_t t[2];
    for (int i = 0; i < 2; i++)
        assert_int_equal(pthread_create(&t[i], NULL, churn, NULL), 0);
    for (int i = 0; i < 60; i++)
        assert_true(check_into_report() >= 0);   /* (crashed within a few dozen before) */
    atomic_store(&stop, 1);
    for (int i = 0; i < 2; i++)
        assert_int_equal(pthread_join(t[i], NULL), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_failed_realloc_keeps_the_block),
        cmocka_unit_test(test_pvalloc_near_size_max),
        cmocka_unit_test(test_self_pointer_is_a_direct_leak),
        cmocka_unit_test(test_check_while_chunks_come_and_go),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
