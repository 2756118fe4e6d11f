/* CRAWL_OPTIONS (set by ctest for this program: depot_budget_mb=1) apply
 * from the start, in a program that calls nothing but the depot and the
 * heap check, which read options without asking for them: the depot's
 * budget was 256 MiB until some call read the options first (an outside
 * test stored 41 MB of traces under depot_budget_mb=1). */
#define _GNU_SOURCE
#include "../support.h"

static void test_environment_applies_at_load(void **state)
{
    (void)state;
    crawl_depot_stats st;
    crawl_depot_get_stats(&st);
    assert_int_equal(st.budget, 1u << 20);
    unsigned stored = 0;
    for (unsigned i = 0; i < 20000; i++) {
        uintptr_t tr[32];
        for (int k = 0; k < 32; k++)
            tr[k] = 0x500000 + i * 32 + (unsigned)k;
        stored += crawl_depot_put(tr, 32) != 0;
    }
    crawl_depot_get_stats(&st);
    assert_true(stored < 20000 && st.drops > 0);
    assert_true(st.bytes <= (1u << 20));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_environment_applies_at_load),
    };
    return cmocka_run_group_tests_name("options-at-load", tests, NULL, NULL);
}
