/* A program under libcrawl-preload.so that also dlopens a copy of it by
 * another path: both copies' malloc and free read their own copies of
 * crawl's kind words (crawl__hp_mirror_kinds), and crawl must keep both.
 * When only the last copy registered was kept, the preload serving the
 * program never saw the guarded pool made, handed a pool chunk to glibc's
 * free (which aborted: "free(): invalid pointer"), and never sampled.
 * Nor may a copy's constructor start again the profile of the options
 * once the program has stopped it. Linked against libcrawl-preload.so,
 * run with CRAWL_OPTIONS=heap_profile=1:gpa_sample_rate=0; SECOND_COPY
 * and THIRD_COPY are the copies' paths (in the build tree). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <cmocka.h>

#include <crawl/guarded.h>
#include <crawl/heap_profile.h>
#include <crawl/sanitizer.h>

#include "../heap_live.h"

static void *second;

static void test_pool_chunks_go_back_to_the_pool(void **state)
{
    (void)state;
    second = dlopen(SECOND_COPY, RTLD_NOW | RTLD_LOCAL);
    assert_non_null(second);
    assert_int_equal(crawl_sanitizer_set_options("gpa_sample_rate=1"), 0);
    void *p = calloc(1, 32);
    assert_true(crawl_gpa_owns(p));
    free(p);                             /* (glibc's free aborted here) */
    /* the second copy's own entry points, as code bound to it calls them */
    void *(*its_malloc)(size_t) = (void *(*)(size_t))dlsym(second, "malloc");
    void (*its_free)(void *) = (void (*)(void *))dlsym(second, "free");
    assert_non_null(its_malloc);
    assert_non_null(its_free);
    assert_ptr_not_equal(its_malloc, malloc);
    void *q = its_malloc(48);
    assert_true(crawl_gpa_owns(q));
    its_free(q);
    void *r = malloc(16);
    assert_true(crawl_gpa_owns(r));
    its_free(r);                         /* either copy takes the other's chunks */
    assert_int_equal(crawl_sanitizer_set_options("gpa_sample_rate=0"), 0);
}

static void test_both_copies_sample(void **state)
{
    (void)state;
    enum { COUNT = 4096 };
    static void *keep[COUNT];
    assert_int_equal(crawl_sanitizer_set_options("heap_sample_bytes=1024"), 0);
    assert_int_equal(crawl_heap_profile_start(), 0);
    size_t base = live_objects();
    for (int i = 0; i < COUNT; i++)
        keep[i] = malloc(64);
    size_t got = live_objects() - base;
    for (int i = 0; i < COUNT; i++)
        free(keep[i]);
    /* 252 expected (1 - e^-65/1024 of them; standard deviation 15): 0
     * when the copy serving malloc was not kept */
    print_message("4096 x malloc(64): %zu samples\n", got);
    assert_in_range(got, 150, 400);
    assert_int_equal(live_objects(), base);
    crawl_heap_profile_stop();
    /* a copy stays loaded (pinned): crawl goes on storing in its words */
    assert_int_equal(dlclose(second), 0);
    assert_int_equal(crawl_sanitizer_set_options("gpa_sample_rate=1"), 0);
    void *p = malloc(8);
    assert_non_null(p);
    free(p);
    assert_int_equal(crawl_sanitizer_set_options("gpa_sample_rate=0"), 0);
}

/* crawl keeps 8 pairs: a copy loaded when they are taken is told so, and
 * sends every call to its slow paths, which read crawl's own state */
static void test_a_copy_crawl_cannot_keep(void **state)
{
    (void)state;
    static int words[2 * 8];
    int *mine = &words[0];
    assert_int_equal(crawl__hp_mirror_kinds(NULL, mine), -EINVAL);
    int rc = 0, n = 0;
    while (n < 8 && (rc = crawl__hp_mirror_kinds(&words[2 * n], &words[2 * n + 1])) == 0)
        n++;
    assert_int_equal(rc, -ENOSPC);       /* (the two copies hold two pairs) */
    assert_in_range(n, 1, 6);
    assert_int_equal(crawl__hp_mirror_kinds(&words[0], &words[1]), 0);   /* (kept already) */
    assert_int_equal(crawl_heap_profile_active(), 0);   /* (stopped by the test before) */
    void *third = dlopen(THIRD_COPY, RTLD_NOW | RTLD_LOCAL);
    assert_non_null(third);
    /* its constructor does not start the profile of the options again */
    assert_int_equal(crawl_heap_profile_active(), 0);
    void *(*its_malloc)(size_t) = (void *(*)(size_t))dlsym(third, "malloc");
    void (*its_free)(void *) = (void (*)(void *))dlsym(third, "free");
    assert_non_null(its_malloc);
    assert_non_null(its_free);
    void *q = its_malloc(40);            /* (its first call: it registers, and is refused) */
    assert_non_null(q);
    its_free(q);
    assert_int_equal(crawl_sanitizer_set_options("gpa_sample_rate=1"), 0);
    q = its_malloc(40);
    assert_true(crawl_gpa_owns(q));
    its_free(q);
    void *r = malloc(24);
    assert_true(crawl_gpa_owns(r));
    its_free(r);
    assert_int_equal(crawl_sanitizer_set_options("gpa_sample_rate=0"), 0);
    /* a mirrored word holds the kinds: the pool's bit among the free kind's */
    assert_true(words[1] & CRAWL__FREE_POOL);
    assert_int_equal(words[0], crawl__hook_kind);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pool_chunks_go_back_to_the_pool),
        cmocka_unit_test(test_both_copies_sample),
        cmocka_unit_test(test_a_copy_crawl_cannot_keep),
    };
    return cmocka_run_group_tests_name("second_copy", tests, NULL, NULL);
}
