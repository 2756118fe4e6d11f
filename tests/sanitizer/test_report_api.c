/* The public report path (crawl_report_*): what crawl-boehm and embedders
 * use for reports of their own. Same destination, callback, count and
 * halt_on_error as the checked heap's reports. */
#define _GNU_SOURCE
#include "../support.h"

#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static char last[1 << 16];
static void keep(const char *text, void *ctx)
{
    (void)ctx;
    snprintf(last, sizeof last, "%s", text);
}

NOINLINE static void report_from_here(uint32_t id)
{
    crawl_report *r = crawl_report_begin();
    crawl_report_printf(r, "==%d==ERROR: MyChecker: bad-thing on %s\n", 42, "widget");
    crawl_report_stack(r, 0);
    crawl_report_printf(r, "\nskipping one:\n");
    crawl_report_stack(r, 1);
    crawl_report_printf(r, "\nrecorded here:\n");
    crawl_report_trace(r, id);
    crawl_report_trace(r, 0xfffffff0u);  /* an id the depot never gave */
    crawl_report_trace(r, 0);            /* nothing recorded (the budget refused none) */
    crawl_report_end(r);
    T_NO_TAIL();
}

NOINLINE static uint32_t recorded_here(void)
{
    uint32_t id = crawl_depot_capture(16, 0);
    T_NO_TAIL();
    return id;
}

static void test_report_shape(void **state)
{
    (void)state;
    uint32_t id = recorded_here();
    assert_true(id != 0);
    unsigned long before = crawl_sanitizer_report_count();
    report_from_here(id);
    assert_int_equal(crawl_sanitizer_report_count(), before + 1);
    t_expect_lines(last, (const char *const[]){
        "^=================================================================$",
        "^==42==ERROR: MyChecker: bad-thing on widget$",
        "^    #0 0x[0-9a-f]+ in report_from_here .*test_report_api.c:[0-9]+$",
        "^    #1 0x[0-9a-f]+ in test_report_shape .*test_report_api.c:[0-9]+$",
        "^skipping one:$",
        "^    #0 0x[0-9a-f]+ in test_report_shape .*test_report_api.c:[0-9]+$",
        "^recorded here:$",
        "^    #0 0x[0-9a-f]+ in recorded_here .*test_report_api.c:[0-9]+$",
        "^    #1 0x[0-9a-f]+ in test_report_shape ",
        "^    <no stack with id 4294967280 in the depot>$",
        "^    <stack not recorded>$",
        NULL});
}

/* crawl_depot_capture_from: registers taken in a helper start the trace at
 * the helper's caller (an allocator's entry point). */
NOINLINE static uint32_t helper_captures(void)
{
    crawl_regs here;
    crawl_capture_regs(&here);
    uint32_t id = crawl_depot_capture_from(&here, 8, 0);
    T_NO_TAIL();
    return id;
}

NOINLINE static uint32_t entry_point(void)
{
    uint32_t id = helper_captures();
    T_NO_TAIL();
    return id;
}

static void test_capture_from(void **state)
{
    (void)state;
    assert_int_equal(crawl_depot_capture_from(NULL, 8, 0), 0);
    uint32_t id = entry_point();
    crawl_report *r = crawl_report_begin();
    crawl_report_trace(r, id);
    crawl_report_end(r);
    t_expect_lines(last, (const char *const[]){"^    #0 0x[0-9a-f]+ in entry_point ",
                                              "^    #1 0x[0-9a-f]+ in test_capture_from ",
                                              NULL});
    assert_null(strstr(last, "helper_captures"));
}

static void report_and_halt(void)
{
    crawl_sanitizer_set_options("halt_on_error=1:log_path=stderr");
    crawl_report *r = crawl_report_begin();
    crawl_report_printf(r, "one line\n");
    crawl_report_end(r);
    _exit(0);                            /* not reached: halt_on_error aborts */
}

static void test_halt_on_error_aborts(void **state)
{
    (void)state;
    char out[4096];
    int st = t_run_child(report_and_halt, out, sizeof out);
    assert_true(WIFSIGNALED(st));
    t_expect_lines(out, (const char *const[]){"^one line$", "^==[0-9]+==ABORTING$", NULL});
}

static void test_null_report_is_ignored(void **state)
{
    (void)state;
    crawl_report_printf(NULL, "x");
    crawl_report_trace(NULL, 1);
    crawl_report_stack(NULL, 0);
    crawl_report_end(NULL);
}

int main(void)
{
    crawl_thread_attach();
    crawl_set_report_callback(keep, NULL);
    if (crawl_sanitizer_set_options("halt_on_error=0:log_path=/dev/null") != 0)
        return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_report_shape),
        cmocka_unit_test(test_halt_on_error_aborts),
        cmocka_unit_test(test_null_report_is_ignored),
        cmocka_unit_test(test_capture_from),
    };
    return cmocka_run_group_tests_name("report-api", tests, NULL, NULL);
}
