/* Function Frames keep their position: a Frame type's position hook is the
 * Frame's crawl_cf_ip in walks, and stored stacks (depot traces, the checked
 * heap's allocation and free stacks) keep it, so they name the line. */
#define _GNU_SOURCE
#include "../support.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

typedef struct fn_frame {
    crawl_frame frame;
    const char *function;
    unsigned line;                       /* updated as the function runs */
} fn_frame;

static const void *fn_method(const crawl_frame *f) { return ((const fn_frame *)f)->function; }
static uintptr_t fn_position(const crawl_frame *f) { return ((const fn_frame *)f)->line; }
static int fn_describe_method(const void *m, uintptr_t pc, char *buf, size_t len)
{
    return pc ? snprintf(buf, len, "%s prog.script:%lu", (const char *)m, (unsigned long)pc)
              : snprintf(buf, len, "%s prog.script:?", (const char *)m);
}

static const crawl_frame_type with_position = {
    .name = "fn", .flags = CRAWL_FRAME_FUNCTION, .method = fn_method,
    .describe_method = fn_describe_method, .position = fn_position,
};
static const crawl_frame_type without_position = {
    .name = "fn-nopos", .flags = CRAWL_FRAME_FUNCTION, .method = fn_method,
    .describe_method = fn_describe_method,
};

static uintptr_t seen_ip;
static crawl_action find_frame(const crawl_cf *cf, void *ctx)
{
    if (crawl_cf_kind(cf) == CRAWL_CF_FRAME && crawl_cf_frame(cf) == ctx) {
        seen_ip = crawl_cf_ip(cf);
        return CRAWL_ABORT;
    }
    return CRAWL_CONTINUE;
}

static char report[1 << 16];
static void keep_report(const char *text, void *ctx)
{
    (void)ctx;
    snprintf(report, sizeof report, "%s", text);
}


NOINLINE static uint32_t run_script(const crawl_frame_type *type, char **chunk)
{
    fn_frame f = {.function = "make_table", .line = 3};
    crawl_frame_push(&f.frame, type);
    f.line = 17;                          /* the interpreter moved on */
    seen_ip = 0;
    assert_int_equal(crawl_walk(find_frame, &f.frame, 0), CRAWL_WALK_ABORTED);
    uint32_t id = crawl_depot_capture(8, 0);
    *chunk = crawl_heap_malloc(24);
    crawl_frame_pop(&f.frame);
    return id;
}

static void test_position_in_walks_and_stored_stacks(void **state)
{
    (void)state;
    char *chunk, text[4096];
    uint32_t id = run_script(&with_position, &chunk);
    assert_int_equal(seen_ip, 17);
    t_depot_text(id, text, sizeof text);
    assert_non_null(strstr(text, "    #0 in make_table prog.script:17\n"));
    crawl_heap_free(chunk);
    assert_int_equal(crawl_heap_check(chunk, 1, 0), 1);
    assert_non_null(strstr(report, "previously allocated by thread T0 here:\n"
                                   "    #0 in make_table prog.script:17\n"));

    /* without the hook: no position, as before */
    id = run_script(&without_position, &chunk);
    assert_int_equal(seen_ip, 0);
    t_depot_text(id, text, sizeof text);
    assert_non_null(strstr(text, "    #0 in make_table prog.script:?\n"));
    crawl_heap_free(chunk);
}

int main(void)
{
    crawl_thread_attach();
    crawl_set_report_callback(keep_report, NULL);
    assert_int_equal(crawl_sanitizer_set_options("halt_on_error=0"), 0);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_position_in_walks_and_stored_stacks),
    };
    return cmocka_run_group_tests_name("function-frames", tests, NULL, NULL);
}
