/* crawl's own mappings are not the program's: with heap_profile_mmap=1 the
 * preload records the regions the program maps, and crawl's tables (a
 * thread's walk memo, depot arenas, the guarded pool) must not show up
 * there, however they come to be mapped: a walk the program asks for, a
 * capture, a pool sample. Their mmap went through the preload's once, was
 * recorded with a stack inside crawl, and the memo's, recorded from inside
 * a walk, walked again and mapped a second memo that no one unmapped.
 * Linked against libcrawl-preload.so, run with
 * CRAWL_OPTIONS=heap_profile=1:heap_profile_mmap=1:gpa_sample_rate=1. */
#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <cmocka.h>

#include <crawl/frames.h>
#include <crawl/guarded.h>
#include <crawl/heap_profile.h>
#include <crawl/sanitizer.h>
#include <crawl/stackwalk.h>

static size_t regions_now(void)
{
    size_t regions = 0;
    crawl_heap_profile_mapped(NULL, &regions);
    return regions;
}

/* The regions recorded while the thread is alive, past its walks (its
 * memo is unmapped, and a recorded one taken out again, as it detaches) */
static size_t during;

static void *walker(void *arg)
{
    (void)arg;
    uintptr_t pcs[16];
    if (crawl_thread_attach() != 0)
        return (void *)1;
    int n = crawl_backtrace(pcs, 16, 0);  /* an attached thread's first walk maps its memo */
    uint32_t id = crawl_depot_capture(16, 0);
    void *p = malloc(100);                /* gpa_sample_rate=1: a pool chunk, its stack */
    int pooled = crawl_gpa_owns(p);
    free(p);
    during = regions_now();
    crawl_thread_detach();
    return (void *)(uintptr_t)(n < 2 || id == 0 || !pooled);
}

static void test_crawl_maps_are_not_the_programs(void **state)
{
    (void)state;
    assert_int_equal(crawl_heap_profile_active(), 1);
    size_t before = regions_now();
    for (int i = 0; i < 20; i++) {
        pthread_t t;
        void *bad;
        assert_int_equal(pthread_create(&t, NULL, walker, NULL), 0);
        assert_int_equal(pthread_join(t, &bad), 0);
        assert_null(bad);
        assert_int_equal(during, before);
    }
    assert_int_equal(regions_now(), before);
}

/* and the program's own are (the check above would pass with nothing
 * recorded at all) */
static void test_program_maps_are(void **state)
{
    (void)state;
    size_t before = regions_now();
    void *m = mmap(NULL, 3 * 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    assert_true(m != MAP_FAILED);
    assert_int_equal(regions_now(), before + 1);
    assert_int_equal(munmap(m, 3 * 4096), 0);
    assert_int_equal(regions_now(), before);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_crawl_maps_are_not_the_programs),
        cmocka_unit_test(test_program_maps_are),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
