/* The guarded pool's first allocation stack compiles the CFI of the
 * modules it passes, through the preload's malloc: that leaves the
 * thread's heap-sampling byte countdown as it was. (It took libdw's bytes
 * off it: the program's next allocation was then sampled early, about 3
 * runs in 100 of a small program at gpa_sample_rate=100.) Linked against
 * libcrawl-preload.so, run with CRAWL_OPTIONS=heap_profile=1:
 * heap_sample_bytes=1000000000:gpa_sample_rate=0, so that no stack has
 * been taken before. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdlib.h>
#include <cmocka.h>

#include <crawl/guarded.h>
#include <crawl/heap_profile.h>

static void test_first_pool_stack_leaves_the_countdown(void **state)
{
    (void)state;
    assert_true(crawl_heap_profile_active());
    long before = crawl__hp_countdown;
    void *p = crawl_gpa_allocate(64, 0);
    long after = crawl__hp_countdown;
    assert_non_null(p);
    assert_true(crawl_gpa_owns(p));
    crawl_gpa_deallocate(p);
    assert_int_equal(after, before);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_first_pool_stack_leaves_the_countdown),
    };
    return cmocka_run_group_tests_name("preload_gpa_countdown", tests, NULL, NULL);
}
