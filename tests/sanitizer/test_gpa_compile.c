/* A pool allocation's stack compiles the CFI of the modules it passes,
 * whatever the walk that took it found in the CFI cache: the fault report
 * of a use after free then walks, signal-safe, from a pc no capture met.
 * Here a sparse capture (the heap profile's kind) reads the rules of a call
 * site pc by pc first, so the pool's capture from the same site finds them
 * all cached: before the fix it compiled nothing, and a signal-safe walk
 * from elsewhere in this program stopped after its first frame. Nothing
 * may walk before this test: it is alone in its process. */
#define _GNU_SOURCE
#include "../support.h"

#include <crawl/guarded.h>

#include <ucontext.h>

static void *pooled;

NOINLINE static void site(int pool)
{
    crawl_regs here;
    crawl_capture_regs(&here);
    if (pool)
        pooled = crawl__gpa_allocate_from(32, 0, &here);
    else
        assert_int_not_equal(crawl_depot_capture_from(&here, 64, 0), 0);
    T_NO_TAIL();
}

static crawl_action count_native(const crawl_cf *cf, void *ctx)
{
    if (crawl_cf_kind(cf) == CRAWL_CF_NATIVE)
        ++*(int *)ctx;
    return CRAWL_CONTINUE;
}

static int safe_n, normal_n;

/* code no capture went through */
NOINLINE static void walk_both(void)
{
    ucontext_t uc;
    getcontext(&uc);
    safe_n = normal_n = 0;
    assert_int_equal(crawl_walk_context(&uc, count_native, &safe_n, CRAWL_WALK_SIGNAL_SAFE),
                     CRAWL_WALK_DONE);
    assert_int_equal(crawl_walk_context(&uc, count_native, &normal_n, 0), CRAWL_WALK_DONE);
    T_NO_TAIL();
}

NOINLINE static void elsewhere(void)
{
    walk_both();
    T_NO_TAIL();
}

static void test_pool_stack_compiles_cached_modules(void **state)
{
    (void)state;
    assert_int_equal(crawl_thread_attach(), 0);
    assert_int_equal(crawl_sanitizer_set_options("gpa_sample_rate=1"), 0);
    for (int i = 0; i < 2; i++)
        site(i);                         /* one call site: the same pcs above it */
    assert_non_null(pooled);
    assert_true(crawl_gpa_owns(pooled));
    elsewhere();                         /* (before the free: its stack compiles too) */
    crawl_gpa_deallocate(pooled);
    assert_true(normal_n >= 4);
    if (safe_n != normal_n)
        print_message("signal-safe walk: %d native frames, normal walk: %d\n", safe_n, normal_n);
    assert_int_equal(safe_n, normal_n);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pool_stack_compiles_cached_modules),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
