/* CRAWL_DEBUG=unwind (set for this test by CTest): each walk says where it
 * starts, where and why it stops, where it resumes, and how it ends. */
#include <stdint.h>
#include <string.h>

#include "../support.h"

static crawl_action count(const crawl_cf *cf, void *ctx)
{
    (void)cf;
    ++*(unsigned *)ctx;
    return CRAWL_CONTINUE;
}

NOINLINE static void walk_clean(void)
{
    label_frame f = {.label = "here"};
    crawl_frame_push(&f.frame, &t_label_type);
    unsigned n = 0;
    crawl_walk(count, &n, 0);
    crawl_walk(count, &n, CRAWL_WALK_FAST);
    crawl_frame_pop(&f.frame);
    T_NO_TAIL();
}

/* A Frame whose next points off the stack: the walk fails, and says why. */
NOINLINE static void walk_corrupt(void)
{
    label_frame f = {.label = "here"};
    crawl_frame_push(&f.frame, &t_label_type);
    crawl_frame *saved = f.frame.next;
    static label_frame heap_frame;       /* not on any stack */
    f.frame.next = &heap_frame.frame;
    unsigned n = 0;
    crawl_walk(count, &n, 0);
    f.frame.next = saved;
    crawl_frame_pop(&f.frame);
    T_NO_TAIL();
}

static void test_clean_walk_is_traced(void **state)
{
    (void)state;
    char out[8192];
    int st = t_run_child(walk_clean, out, sizeof out);
    assert_int_equal(st, 0);
    const char *const want[] = {
        "^crawl\\[unwind\\] walk from ip 0x[0-9a-f]+ sp 0x[0-9a-f]+: precise, 1 Frame\\(s\\) on the chain$",
        "^crawl\\[unwind\\] stop at ip 0x[0-9a-f]+ sp 0x[0-9a-f]+: (end of stack|stop) \\(.+\\)$",
        "^crawl\\[unwind\\] walk ends: done$",
        "^crawl\\[unwind\\] walk from ip 0x[0-9a-f]+ sp 0x[0-9a-f]+: fast, 1 Frame\\(s\\) on the chain$",
        "^crawl\\[unwind\\] walk ends: done$",
        NULL};
    t_expect_lines(out, want);
}

static void test_corrupt_chain_is_traced(void **state)
{
    (void)state;
    char out[8192];
    int st = t_run_child(walk_corrupt, out, sizeof out);
    assert_int_equal(st, 0);
    const char *const want[] = {
        "^crawl\\[unwind\\] walk from .*: precise, 1 Frame\\(s\\) on the chain$",
        "^crawl\\[unwind\\] Frame 0x[0-9a-f]+ fails the check .*the chain is corrupt$",
        "^crawl\\[unwind\\] walk ends: FAILED \\(corrupt stack or Frame chain\\)$",
        NULL};
    t_expect_lines(out, want);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_clean_walk_is_traced),
        cmocka_unit_test(test_corrupt_chain_is_traced),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
