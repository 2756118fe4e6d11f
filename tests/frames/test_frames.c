/* Frames and threads: the chain, its checks, and what misuse prints. */
#define _GNU_SOURCE
#include "../support.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

static void test_attach_is_idempotent(void **state)
{
    (void)state;
    assert_int_equal(crawl_thread_attach(), 0);
    assert_int_equal(crawl_thread_attach(), 0);
    assert_true(crawl_thread_is_attached());
    uintptr_t lo = 0, hi = 0;
    assert_int_equal(crawl_thread_stack_bounds(&lo, &hi), 0);
    uintptr_t here = (uintptr_t)&lo;
    assert_true(lo < here && here < hi);
}

/* Runs on its own thread: cmocka's asserts must stay on the main one, so it
 * returns the number of the first check that failed, or 0. */
static void *attach_detach_thread(void *arg)
{
    (void)arg;
    if (crawl_thread_is_attached())
        return (void *)1;
    if (crawl_thread_stack_bounds(NULL, NULL) != -ENOENT)
        return (void *)2;
    label_frame f = {.label = "t"};
    crawl_frame_push(&f.frame, &t_label_type);     /* attaches implicitly */
    if (!crawl_thread_is_attached())
        return (void *)3;
    crawl_frame_pop(&f.frame);
    crawl_thread_detach();
    if (crawl_thread_is_attached())
        return (void *)4;
    crawl_thread_detach();                          /* harmless twice */
    return NULL;
}

static void test_push_attaches_and_detach(void **state)
{
    (void)state;
    pthread_t t;
    void *failed = (void *)-1;
    assert_int_equal(pthread_create(&t, NULL, attach_detach_thread, NULL), 0);
    assert_int_equal(pthread_join(t, &failed), 0);
    assert_ptr_equal(failed, NULL);
}

static void test_push_pop_top(void **state)
{
    (void)state;
    unsigned base = crawl_frame_count();
    crawl_frame *old_top = crawl_frame_top();
    label_frame a = {.label = "a"}, b = {.label = "b"};
    crawl_frame_push(&a.frame, &t_label_type);
    assert_ptr_equal(crawl_frame_top(), &a.frame);
    assert_ptr_equal(a.frame.next, old_top);
    assert_ptr_equal(a.frame.type, &t_label_type);
    crawl_frame_push(&b.frame, &t_plain_type);
    assert_ptr_equal(crawl_frame_top(), &b.frame);
    assert_ptr_equal(b.frame.next, &a.frame);
    assert_int_equal(crawl_frame_count(), base + 2);
    crawl_frame_pop(&b.frame);
    assert_ptr_equal(crawl_frame_top(), &a.frame);
    crawl_frame_pop(&a.frame);
    assert_ptr_equal(crawl_frame_top(), old_top);
    assert_int_equal(crawl_frame_count(), base);
}

/* A debugger decodes a Frame from memory: next, then type, type->name first. */
static void test_plain_layout(void **state)
{
    (void)state;
    assert_int_equal(offsetof(crawl_frame, next), 0);
    assert_int_equal(offsetof(crawl_frame, type), sizeof(void *));
    assert_int_equal(offsetof(crawl_frame_type, name), 0);
    assert_int_equal(offsetof(crawl_transition, regs), 2 * sizeof(void *));
    assert_string_equal(crawl_transition_type.name, "transition");
    assert_int_equal(crawl_transition_type.kind, CRAWL_FRAME_KIND_TRANSITION);
    assert_string_equal(crawl_entry_type.name, "entry");
    assert_int_equal(crawl_entry_type.kind, CRAWL_FRAME_KIND_ENTRY);
}

/* Two Frames in one C function may sit in either address order. */
static void test_two_frames_either_order(void **state)
{
    (void)state;
    label_frame pair[2] = {{.label = "low"}, {.label = "high"}};
    crawl_frame_push(&pair[1].frame, &t_label_type);   /* higher address first */
    crawl_frame_push(&pair[0].frame, &t_label_type);
    crawl_frame_pop(&pair[0].frame);
    crawl_frame_pop(&pair[1].frame);
    crawl_frame_push(&pair[0].frame, &t_label_type);   /* lower address first */
    crawl_frame_push(&pair[1].frame, &t_label_type);
    crawl_frame_pop(&pair[1].frame);
    crawl_frame_pop(&pair[0].frame);
    assert_null(crawl_frame_top());
}

NOINLINE static void capture_here(crawl_regs *r)
{
    crawl_capture_regs(r);
    __asm__ volatile("" ::: "memory");
}

static void test_transition_saves_registers(void **state)
{
    (void)state;
    crawl_transition t;
    crawl_transition_push(&t, NULL);
    void *fp = __builtin_frame_address(0);
    assert_ptr_equal(crawl_frame_top(), &t.frame);
    assert_ptr_equal(t.frame.type, &crawl_transition_type);
    assert_ptr_equal((void *)t.regs.fp, fp);            /* this function's frame pointer */
    assert_true(t.regs.sp <= (uintptr_t)&t && (uintptr_t)&t < (uintptr_t)fp);
    /* the saved ip is a return address inside this test function */
    assert_true(t.regs.ip > (uintptr_t)test_transition_saves_registers);
    assert_true(t.regs.ip < (uintptr_t)test_transition_saves_registers + 4096);
    crawl_frame_pop(&t.frame);

    crawl_regs r;
    capture_here(&r);
    assert_true(r.ip > (uintptr_t)capture_here && r.ip < (uintptr_t)capture_here + 256);
}

/* ---- misuse stops the process with one line -------------------------------- */

static void pop_out_of_order(void)
{
    label_frame a = {.label = "a"};
    crawl_entry e = {.target = NULL};
    crawl_frame_push(&a.frame, &t_label_type);
    crawl_frame_push(&e.frame, &crawl_entry_type);
    crawl_frame_pop(&a.frame);
}

static void push_heap_frame(void)
{
    crawl_frame *f = malloc(sizeof *f);
    crawl_frame_push(f, &t_plain_type);
}

static crawl_frame *other_threads_frame;
static void *park_a_frame(void *arg)
{
    (void)arg;
    crawl_frame f;
    other_threads_frame = &f;
    crawl_frame_push(&f, &t_plain_type);   /* never popped: the process dies first */
    pause();
    return NULL;
}

static void push_other_threads_frame(void)
{
    pthread_t t;
    pthread_create(&t, NULL, park_a_frame, NULL);
    while (!__atomic_load_n(&other_threads_frame, __ATOMIC_ACQUIRE))
        sched_yield();
    crawl_frame_push(other_threads_frame, &t_label_type);
}

static void push_null_type(void)
{
    crawl_frame f;
    crawl_frame_push(&f, NULL);
}

static void pop_empty(void)
{
    crawl_frame f;
    crawl_frame_pop(&f);
}

static void push_twice(void)
{
    crawl_frame f;
    crawl_frame_push(&f, &t_plain_type);
    crawl_frame_push(&f, &t_plain_type);
}

static void detach_with_frames(void)
{
    crawl_frame f;
    crawl_frame_push(&f, &t_plain_type);
    crawl_thread_detach();
}

static const crawl_frame_type no_regs_type = {.name = "not-a-transition"};
static void transition_with_bad_type(void)
{
    crawl_transition t;
    crawl_transition_push(&t, &no_regs_type);
}

static void pop_null_empty(void)
{
    crawl_thread_attach();
    crawl_frame_pop(NULL);
}

static void pop_null(void)
{
    crawl_frame f;
    crawl_frame_push(&f, &t_plain_type);
    crawl_frame_pop(NULL);
}

static void push_misaligned(void)
{
    struct { char c[24]; } raw __attribute__((aligned(16)));
    crawl_frame_push((crawl_frame *)(void *)(raw.c + 1), &t_plain_type);
}

/* A return inside a GCPROTECT-style block: the callee's Frame is left on
 * top, dead, and its memory is reused by the next calls. */
NOINLINE static void leave_frame_pushed(void)
{
    label_frame dead = {.label = "dead"};
    crawl_frame_push(&dead.frame, &t_label_type);
}

NOINLINE static void scribble(void)
{
    volatile char junk[512];
    memset((char *)junk, 'A', sizeof junk);
}

static void return_inside_protect(void)
{
    label_frame outer = {.label = "outer"};
    crawl_frame_push(&outer.frame, &t_label_type);
    leave_frame_pushed();
    scribble();                          /* the dead Frame's type pointer is now 0x4141... */
    crawl_frame_pop(&outer.frame);
}

static void expect_abort(void (*fn)(void), const char *expected)
{
    char out[2048];
    int status = t_run_child(fn, out, sizeof out);
    if (!WIFSIGNALED(status) || WTERMSIG(status) != SIGABRT || !strstr(out, expected)) {
        fprintf(stderr, "expected SIGABRT and \"%s\"; got status %#x and:\n%s\n", expected,
                status, out);
        fail();
    }
    /* exactly one line */
    char *nl = strchr(out, '\n');
    assert_non_null(nl);
    assert_int_equal(nl[1], '\0');
}

static void test_misuse_is_fatal_with_one_line(void **state)
{
    (void)state;
    expect_abort(pop_out_of_order, "crawl: fatal: Frame popped out of order: expected the top "
                                   "Frame 'entry' at ");
    expect_abort(pop_out_of_order, ", got 'label' at ");
    expect_abort(return_inside_protect, "crawl: fatal: Frame popped out of order: crawl_frame_pop "
                                        "of 'label' Frame ");
    expect_abort(return_inside_protect, "lies in a stack frame that has already returned (a "
                                        "return or longjmp skipped its crawl_frame_pop?");
    expect_abort(push_heap_frame, "crawl_frame_push of 'plain' Frame ");
    expect_abort(push_heap_frame, "not on this thread's stack");
    expect_abort(push_other_threads_frame, "not on this thread's stack");
    expect_abort(push_null_type, "with a NULL type");
    expect_abort(pop_empty, "Frame chain is empty");
    expect_abort(pop_null_empty, "crawl_frame_pop of '?' Frame (nil), but this thread's Frame chain is empty");
    expect_abort(pop_null, "expected the top Frame 'plain' at ");
    expect_abort(push_misaligned, "misaligned (Frames are pointer-aligned)");
    expect_abort(push_twice, "already the top Frame");
    expect_abort(detach_with_frames, "crawl_thread_detach with 1 Frame(s) still pushed (top 'plain'");
    expect_abort(transition_with_bad_type,
                 "crawl_transition_push with type 'not-a-transition': it needs CRAWL_FRAME_SAVES_REGS");
}

/* A thread that exits while attached leaves the registry; its Frames go with
 * it (pthread_exit with a GCPROTECT Frame still pushed). */
static void *exit_attached(void *arg)
{
    void *local = arg;
    void **slots[] = {&local};
    crawl_gcprotect g;
    crawl_gcprotect_push(&g, slots, 1);
    pthread_exit(NULL);
}

static void count_root(void **slot, unsigned flags, const crawl_cf *cf, void *ctx)
{
    (void)slot, (void)flags, (void)cf;
    ++*(unsigned *)ctx;
}

static void test_exit_while_attached(void **state)
{
    (void)state;
    for (int i = 0; i < 50; i++) {
        pthread_t t;
        static int marker;
        assert_int_equal(pthread_create(&t, NULL, exit_attached, &marker), 0);
        assert_int_equal(pthread_join(t, NULL), 0);
        /* no thread but this one is left, and this one has no roots */
        unsigned roots = 0;
        assert_int_equal(crawl_enum_roots_all_threads(count_root, &roots, 0), CRAWL_WALK_DONE);
        assert_int_equal(roots, 0);
    }
    assert_true(crawl_thread_is_attached());
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_attach_is_idempotent),
        cmocka_unit_test(test_push_attaches_and_detach),
        cmocka_unit_test(test_push_pop_top),
        cmocka_unit_test(test_plain_layout),
        cmocka_unit_test(test_two_frames_either_order),
        cmocka_unit_test(test_transition_saves_registers),
        cmocka_unit_test(test_misuse_is_fatal_with_one_line),
        cmocka_unit_test(test_exit_while_attached),
    };
    return cmocka_run_group_tests_name("frames", tests, NULL, NULL);
}
