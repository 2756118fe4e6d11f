/* Allocation and free stacks in a host built without frame pointers: the
 * sanitizer's default capture must give the true order (each Frame before
 * the native frame that holds it) and reach main, even when rbp holds a
 * plausible-looking frame record (nofp_alloc.c). */
#define _GNU_SOURCE
#include "../support.h"

#include <stdio.h>
#include <string.h>

#include "nofp_alloc.h"

static char last[1 << 16];

static void keep_report(const char *text, void *ctx)
{
    (void)ctx;
    snprintf(last, sizeof last, "%s", text);
}

NOINLINE static void alloc_free_and_read(void)
{
    char *p = nofp_top(48);
    crawl_heap_free(p);
    assert_int_equal(crawl_heap_check(p + 4, 1, 0), 1);
}

static void test_default_capture_without_frame_pointers(void **state)
{
    (void)state;
    last[0] = '\0';
    alloc_free_and_read();
    t_expect_lines(last, (const char *const[]){
        "^previously allocated by thread T0 here:$",
        "^    #0 0x[0-9a-f]+ in nofp_leaf .*nofp_alloc\\.c:[0-9]+$",
        "^    #1 in make_table nofp\\.script:1$",
        "^    #2 0x[0-9a-f]+ in nofp_mid .*nofp_alloc\\.c:[0-9]+$",
        "^    #3 0x[0-9a-f]+ in nofp_top .*nofp_alloc\\.c:[0-9]+$",
        "^    #4 0x[0-9a-f]+ in alloc_free_and_read .*test_heap_nofp\\.c:[0-9]+$",
        "^    #5 0x[0-9a-f]+ in test_default_capture_without_frame_pointers ",
        "^    #[0-9]+ 0x[0-9a-f]+ in main ",
        "^SUMMARY: ", NULL});
    assert_null(strstr(last, "nofp_decoy"));    /* the fake frame record was not followed */
}

int main(void)
{
    crawl_thread_attach();
    crawl_set_report_callback(keep_report, NULL);
    assert_int_equal(crawl_sanitizer_set_options("halt_on_error=0"), 0);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_default_capture_without_frame_pointers),
    };
    return cmocka_run_group_tests_name("heap-nofp", tests, NULL, NULL);
}
