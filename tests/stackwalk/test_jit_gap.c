/* A walk through JIT code without a registered rule resumes at the
 * transition Frame and says so (regression test for "a precise walk
 * through JIT code with no registered rule silently drops a frame").
 *
 *   main -> jit_run (pushes a transition Frame)
 *     -> stub (mmap'ed, unregistered) -> jit_callback -> crawl_walk(0 / FAST)
 *
 * The stub is `sub rsp,8; call *rdi; add rsp,8; ret`: it keeps no frame
 * pointer and leaves jit_run's rbp in place, so a frame-pointer step from
 * it lands in jit_run's caller and skips jit_run, and it has no CFI. Neither mode
 * may guess: right after jit_callback the walk resumes at jit_run's
 * transition Frame, flagged CRAWL_CF_AFTER_GAP, then jit_run at the Frame's
 * saved ip, then jit_run's callers exactly as jit_run's own walk sees them.
 *
 * The walks run from main itself, before cmocka takes over, so that main
 * is in reach whether or not a fast walk gets through libcmocka (built
 * without frame pointers); the cmocka tests judge what they recorded. */
#define _GNU_SOURCE
#include "../support.h"

#include <stdio.h>
#include <string.h>
#include <sys/mman.h>

#include "prof_support.h"

int main(void);

/* Unregistered JIT code is not code to crawl (test_walk's
 * test_resume_past_code_without_unwind_info): no frame may have its ip in
 * the stub page, not even the stub's own frame, whose return address
 * (stub + 6) jit_callback's frame would give exactly. Build with
 * -DSTRICT_NO_STUB_FRAME=0 to accept that one frame (right after
 * jit_callback, at exactly that ip); any other pc in the page is always an
 * error. */
#ifndef STRICT_NO_STUB_FRAME
#define STRICT_NO_STUB_FRAME 1
#endif

/* sub rsp,8; call *rdi; add rsp,8; ret */
static const unsigned char stub_bytes[] = {0x48, 0x83, 0xEC, 0x08, 0xFF, 0xD7,
                                           0x48, 0x83, 0xC4, 0x08, 0xC3};
#define STUB_RET_OFFSET 6 /* after `call *rdi` */
typedef void (*stub_fn)(void (*fn)(void));

static unsigned char *stub_page;
static trace T[2], REF[2];        /* [0] precise, [1] fast */
static crawl_frame *run_frame[2]; /* jit_run's transition Frame, per mode */
static crawl_regs run_regs[2];    /* its saved registers, kept */
static unsigned walk_flags;
static int mode;
static fn_range callback_fn, run_fn, main_fn;
static int setup_ok;

NOINLINE void jit_callback(void)
{
    T[mode].st = crawl_walk(t_record, &T[mode], walk_flags);
    __asm__ volatile("" ::: "memory");
}

NOINLINE static void ref_walk(void)
{
    REF[mode].st = crawl_walk(t_record, &REF[mode], walk_flags);
    __asm__ volatile("" ::: "memory");
}

NOINLINE void jit_run(void)
{
    crawl_transition t;
    crawl_transition_push(&t, NULL);
    run_frame[mode] = &t.frame;
    run_regs[mode] = t.regs;
    ref_walk();
    ((stub_fn)(void *)stub_page)(jit_callback);
    crawl_frame_pop(&t.frame);
}

static void record_both_modes(void)
{
    stub_page = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (stub_page == MAP_FAILED)
        return;
    memcpy(stub_page, stub_bytes, sizeof stub_bytes);
    if (mprotect(stub_page, 4096, PROT_READ | PROT_EXEC) != 0)
        return;
    setup_ok = fn_range_of((const void *)jit_callback, "jit_callback", &callback_fn) == 0 &&
               fn_range_of((const void *)jit_run, "jit_run", &run_fn) == 0 &&
               fn_range_of((const void *)main, "main", &main_fn) == 0;
    static const unsigned flags[2] = {0, CRAWL_WALK_FAST};
    for (mode = 0; mode < 2; mode++) {
        walk_flags = flags[mode];
        jit_run();
    }
}

/* support.h's check, also printing the reference walk on failure. */
#define EXPECT_VS_REF(cond)                                                                    \
    do {                                                                                       \
        if (!(cond))                                                                           \
            t_dump(ref, "jit_run's own walk (reference)");                                     \
        T_EXPECT_IN(t, what, cond);                                                            \
    } while (0)

static int in_stub(uintptr_t pc)
{
    return pc - (uintptr_t)stub_page < 4096;
}

static void check(int m, const char *what)
{
    assert_true(setup_ok);
    trace *t = &T[m], *ref = &REF[m];
    t_name(t);
    t_name(ref);
    uintptr_t stub_ret = (uintptr_t)stub_page + STUB_RET_OFFSET;
    unsigned stub_frames = 0, other_stub_pcs = 0;
    int main_at = -1;
    for (unsigned k = 0; k < t->n; k++) {
        const rec *r = &t->r[k];
        if (r->kind != CRAWL_CF_NATIVE && r->kind != CRAWL_CF_JIT)
            continue;
        if (in_stub(cf_pc(r->ip, r->flags))) {
            if (r->ip == stub_ret && k == 1)
                stub_frames++;
            else
                other_stub_pcs++;
        }
        if (fn_has(&main_fn, cf_pc(r->ip, r->flags)))
            main_at = (int)k;
    }
    print_message("%s: %u reports, status %d; the stub's frame reported %u time(s), other pcs "
                  "in the stub page %u; main at #%d\n",
                  what, t->n, t->st, stub_frames, other_stub_pcs, main_at);
    EXPECT_VS_REF(t->st == CRAWL_WALK_DONE);
    EXPECT_VS_REF(other_stub_pcs == 0);
    EXPECT_VS_REF(!STRICT_NO_STUB_FRAME || stub_frames == 0);
    /* jit_callback first, then (after the stub's frame, if reported) the gap */
    EXPECT_VS_REF(t->n > 3 && t->r[0].kind == CRAWL_CF_NATIVE && fn_has(&callback_fn, t->r[0].ip - 1));
    unsigned g = 1 + stub_frames;
    EXPECT_VS_REF(t->r[g].kind == CRAWL_CF_FRAME && t->r[g].frame == run_frame[m]);
    EXPECT_VS_REF(t->r[g].flags & CRAWL_CF_AFTER_GAP);
    for (unsigned k = 0; k < t->n; k++)
        EXPECT_VS_REF(k == g || !(t->r[k].flags & CRAWL_CF_AFTER_GAP));
    /* jit_run at the transition's saved ip (a return address inside jit_run) */
    EXPECT_VS_REF(t->r[g + 1].kind == CRAWL_CF_NATIVE && t->r[g + 1].ip == run_regs[m].ip &&
           t->r[g + 1].sp == run_regs[m].sp && fn_has(&run_fn, run_regs[m].ip - 1));
    /* jit_run's callers as jit_run's own walk saw them (main's call site included) */
    int ref_run = -1;
    for (unsigned k = 0; k < ref->n && ref_run < 0; k++)
        if (ref->r[k].kind == CRAWL_CF_NATIVE && fn_has(&run_fn, ref->r[k].ip - 1))
            ref_run = (int)k;
    EXPECT_VS_REF(ref->st == CRAWL_WALK_DONE && ref_run > 0);
    EXPECT_VS_REF(t->n - (g + 2) == ref->n - (unsigned)(ref_run + 1));
    for (unsigned k = g + 2; k < t->n; k++) {
        const rec *a = &t->r[k], *b = &ref->r[ref_run + 1 + (k - (g + 2))];
        EXPECT_VS_REF(a->kind == b->kind && a->ip == b->ip && a->sp == b->sp && a->frame == b->frame);
    }
    EXPECT_VS_REF(main_at > 0);
    t_check_order(t);
}

static void test_precise(void **state)
{
    (void)state;
    if (!crawl_walk_precise_available())
        skip();
    check(0, "precise walk through an unregistered stub");
}

static void test_fast(void **state)
{
    (void)state;
    check(1, "fast walk through an unregistered stub");
}

int main(void)
{
    crawl_thread_attach();
    record_both_modes();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_precise),
        cmocka_unit_test(test_fast),
    };
    int rc = cmocka_run_group_tests_name("jit-gap", tests, NULL, NULL);
    if (stub_page && stub_page != MAP_FAILED)
        munmap(stub_page, 4096);
    return rc;
}
