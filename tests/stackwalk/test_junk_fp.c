/* Junk in rbp is never a frame (regression test for "fast mode reports
 * `0x13 in <unknown>` with status DONE").
 *
 *   main -> ... -> junk_outer (pushes a transition Frame) -> junk_mid (a local buffer)
 *     -> junk_call (nofp_host.c: assembly without CFI, rbp = junk)
 *     -> junk_walker -> crawl_walk(FAST) / crawl_backtrace(FAST)
 *
 * junk_walker keeps a frame pointer, so its frame record holds the junk rbp
 * and a good return address into junk_call. From junk_call on, neither
 * frame pointers nor CFI can go on: the walk must stop there and resume
 * from junk_outer's transition Frame, flagging the gap. The junk takes every
 * shape frameless code leaves in rbp: small integers, heap pointers, stack
 * addresses of data (a "frame record" whose return address is data), and
 * misaligned stack addresses. Whatever the junk, the trace is the same.
 *
 * The walks run from main itself, before cmocka takes over: libcmocka is
 * built without frame pointers, and whether a fast walk gets through it is
 * not this test's question; main must be in reach to check that the walk
 * gets there. The cmocka test judges the counts they left. */
#define _GNU_SOURCE
#include "../support.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nofp_host.h"
#include "prof_support.h"

int main(void);

#define WALKS 1000
#define MAX_PCS 128

static trace T;   /* crawl_walk's reports */
static trace REF; /* junk_outer's own walk, without junk */
static uintptr_t pcs[MAX_PCS], ref_pcs[MAX_PCS];
static int npcs, nref_pcs;
static exec_maps maps;
static fn_range walk_here_fn, junk_fn, mid_fn, outer_fn, main_fn;

typedef struct junk_stats {
    unsigned walks, not_done, leaked_ip; /* leaked: a native report outside executable code */
    unsigned no_outer, no_main, no_gap_flag, wrong_prefix, wrong_tail;
    unsigned distinct_bt, bt_bad_ip, bt_no_outer, bt_wrong;
    int first_bad; /* walk index */
    char first_bad_why[96];
} junk_stats;

static junk_stats S;
static crawl_transition *outer_t;

NOINLINE void junk_walker(void *arg)
{
    (void)arg;
    memset(&T, 0, sizeof T);
    T.st = crawl_walk(t_record, &T, CRAWL_WALK_FAST);
    npcs = crawl_backtrace(pcs, MAX_PCS, CRAWL_WALK_FAST);
    __asm__ volatile("" ::: "memory");
}

/* The same from junk_outer, with a sane rbp: what every frame from junk_outer's
 * caller on must look like. */
NOINLINE static void ref_walk(void)
{
    memset(&REF, 0, sizeof REF);
    REF.st = crawl_walk(t_record, &REF, CRAWL_WALK_FAST);
    nref_pcs = crawl_backtrace(ref_pcs, MAX_PCS, CRAWL_WALK_FAST);
    __asm__ volatile("" ::: "memory");
}

/* The junk for walk i; buf is a buffer in junk_mid's frame (stack data above
 * the walking frames), heap a heap buffer. */
static uintptr_t junk_for(unsigned i, volatile uintptr_t *buf, uintptr_t *heap)
{
    unsigned v = i / 6;
    switch (i % 6) {
    case 0: /* a small integer: 0x13, 0x1b, ... */
        return 0x13 + 8 * (uintptr_t)v;
    case 1: /* a heap pointer to data */
        heap[0] = 0x13 + v;
        heap[1] = 0x13 + 2 * v;
        return (uintptr_t)&heap[v % 4];
    case 2: /* a stack address of a "frame record": saved rbp junk, return address 0x13... */
        buf[0] = 0x13 + v;
        buf[1] = 0x13 + v;
        return (uintptr_t)&buf[0];
    case 3: /* ...whose return address is a stack address, and saved rbp a heap one */
        buf[2] = (uintptr_t)heap;
        buf[3] = (uintptr_t)&buf[8 + v % 8];
        return (uintptr_t)&buf[2];
    case 4: /* a misaligned stack address */
        buf[4] = 0x1313131313131313u;
        buf[5] = 0x13;
        return (uintptr_t)&buf[4] + 1 + v % 7;
    default: /* a record whose return address is 0 and saved rbp points back into buf */
        buf[6] = (uintptr_t)&buf[0];
        buf[7] = 0;
        return (uintptr_t)&buf[6];
    }
}

static void note_bad(unsigned i, const char *why)
{
    if (S.first_bad < 0) {
        S.first_bad = (int)i;
        snprintf(S.first_bad_why, sizeof S.first_bad_why, "%s", why);
    }
}

static int same_frame(const rec *a, const rec *b)
{
    return a->kind == b->kind && a->ip == b->ip && a->sp == b->sp && a->frame == b->frame;
}

/* Check one walk against what it must be:
 *   junk_walker, junk_call, [transition] (AFTER_GAP), junk_outer, <as in REF>... main */
static void check_walk(unsigned i)
{
    S.walks++;
    if (T.st != CRAWL_WALK_DONE) {
        S.not_done++;
        note_bad(i, "status is not DONE");
    }
    int leaked = 0, outer_at = -1, main_at = -1;
    for (unsigned k = 0; k < T.n; k++) {
        const rec *r = &T.r[k];
        if (r->kind != CRAWL_CF_NATIVE && r->kind != CRAWL_CF_JIT)
            continue;
        uintptr_t pc = cf_pc(r->ip, r->flags);
        if (!exec_maps_has(&maps, pc))
            leaked = 1;
        if (outer_at < 0 && fn_has(&outer_fn, pc))
            outer_at = (int)k;
        if (fn_has(&main_fn, pc))
            main_at = (int)k;
    }
    if (leaked) {
        S.leaked_ip++;
        note_bad(i, "a native frame's ip is not executable code");
    }
    if (outer_at < 0) {
        S.no_outer++;
        note_bad(i, "junk_outer is missing");
    }
    if (main_at < 0) {
        S.no_main++;
        note_bad(i, "main is missing");
    }
    /* the prefix: junk_walker, junk_call (its true return address), then the
     * transition Frame flagged as after a gap, then junk_outer at its saved ip */
    int prefix = T.n >= 4 && T.r[0].kind == CRAWL_CF_NATIVE &&
                 fn_has(&walk_here_fn, T.r[0].ip - 1) && T.r[1].kind == CRAWL_CF_NATIVE &&
                 T.r[1].ip == (uintptr_t)junk_call_ret && T.r[2].kind == CRAWL_CF_FRAME &&
                 T.r[2].frame == &outer_t->frame && T.r[3].kind == CRAWL_CF_NATIVE &&
                 T.r[3].ip == outer_t->regs.ip && T.r[3].sp == outer_t->regs.sp;
    if (!prefix) {
        S.wrong_prefix++;
        note_bad(i, "not: junk_walker, junk_call, [transition], junk_outer");
    }
    if (T.n < 3 || !(T.r[2].flags & CRAWL_CF_AFTER_GAP)) {
        S.no_gap_flag++;
        note_bad(i, "the report after junk_call does not carry CRAWL_CF_AFTER_GAP");
    }
    /* the tail: junk_outer's callers exactly as junk_outer's own walk saw them */
    int ref_outer = -1;
    for (unsigned k = 0; k < REF.n && ref_outer < 0; k++)
        if (REF.r[k].kind == CRAWL_CF_NATIVE && fn_has(&outer_fn, REF.r[k].ip - 1))
            ref_outer = (int)k;
    int tail = prefix && ref_outer >= 0 && T.n - 4 == REF.n - (unsigned)ref_outer - 1;
    for (unsigned k = 4; tail && k < T.n; k++)
        tail = same_frame(&T.r[k], &REF.r[ref_outer + 1 + (k - 4)]);
    if (!tail) {
        S.wrong_tail++;
        note_bad(i, "junk_outer's callers differ from its own walk");
    }

    /* crawl_backtrace: the same pcs every time, none outside code, junk_outer there */
    int bt_outer = 0;
    for (int k = 0; k < npcs; k++) {
        if (!exec_maps_has(&maps, pcs[k] - 1)) {
            S.bt_bad_ip++;
            note_bad(i, "crawl_backtrace: a pc is not executable code");
            break;
        }
        bt_outer |= fn_has(&outer_fn, pcs[k] - 1);
    }
    if (!bt_outer) {
        S.bt_no_outer++;
        note_bad(i, "crawl_backtrace: junk_outer is missing");
    }
    /* junk_walker, junk_call, junk_outer (the transition's ip), then junk_outer's callers */
    int bt_ok = npcs >= 3 && fn_has(&walk_here_fn, pcs[0] - 1) &&
                pcs[1] == (uintptr_t)junk_call_ret && pcs[2] == outer_t->regs.ip && nref_pcs >= 2 &&
                npcs - 3 == nref_pcs - 2 &&
                memcmp(&pcs[3], &ref_pcs[2], (size_t)(npcs - 3) * sizeof pcs[0]) == 0;
    if (!bt_ok) {
        S.bt_wrong++;
        note_bad(i,
                 "crawl_backtrace: not junk_walker, junk_call, junk_outer, junk_outer's callers");
    }
    /* distinct pc sequences (the first few kept to compare with) */
    static uintptr_t seen[8][MAX_PCS];
    static int seen_n[8], nseen;
    if (i == 0)
        nseen = 0;
    int known = 0;
    for (int q = 0; q < nseen && !known; q++)
        known = seen_n[q] == npcs && memcmp(seen[q], pcs, (size_t)npcs * sizeof pcs[0]) == 0;
    if (!known) {
        S.distinct_bt++;
        if (nseen < 8) {
            memcpy(seen[nseen], pcs, sizeof pcs);
            seen_n[nseen++] = npcs;
        }
        if (i > 0)
            note_bad(i, "crawl_backtrace: a second pc sequence");
    }
}

static trace first_bad_trace;
static uintptr_t first_bad_pcs[MAX_PCS];
static int first_bad_npcs;

NOINLINE void junk_mid(unsigned i, uintptr_t *heap)
{
    volatile uintptr_t buf[16];
    for (int k = 0; k < 16; k++)
        buf[k] = 0x13;
    uintptr_t junk = junk_for(i, buf, heap);
    junk_call(junk, junk_walker, NULL);
    __asm__ volatile("" : : "r"(buf) : "memory");
}

NOINLINE void junk_outer(unsigned walks)
{
    crawl_transition t;
    crawl_transition_push(&t, NULL);
    outer_t = &t;
    ref_walk();
    uintptr_t *heap = calloc(64, sizeof *heap);
    if (!heap)
        abort();
    for (unsigned i = 0; i < walks; i++) {
        junk_mid(i, heap);
        check_walk(i);
        if (S.first_bad == (int)i) {
            first_bad_trace = T;
            memcpy(first_bad_pcs, pcs, sizeof pcs);
            first_bad_npcs = npcs;
        }
    }
    free(heap);
    crawl_frame_pop(&t.frame);
    outer_t = NULL;
}

static int setup_ok;

#define EXPECT_NONE(field)                                                                         \
    do {                                                                                           \
        if (S.field)                                                                               \
            fail_msg("%s in %u of %u walks (want none)", #field, S.field, S.walks);                \
    } while (0)

static void test_junk_rbp_is_never_a_frame(void **state)
{
    (void)state;
    assert_true(setup_ok);
    assert_int_equal(S.walks, WALKS);
    t_name(&REF);
    assert_int_equal(REF.st, CRAWL_WALK_DONE);
    print_message("%u fast walks with junk in rbp: not DONE %u, a native ip outside code %u, "
                  "junk_outer missing %u, main missing %u, no AFTER_GAP after junk_call %u, "
                  "wrong prefix %u, wrong tail %u\n",
                  S.walks, S.not_done, S.leaked_ip, S.no_outer, S.no_main, S.no_gap_flag,
                  S.wrong_prefix, S.wrong_tail);
    print_message("crawl_backtrace: %u distinct pc sequences, a pc outside code in %u, junk_outer "
                  "missing in %u, not the expected pcs in %u\n",
                  S.distinct_bt, S.bt_bad_ip, S.bt_no_outer, S.bt_wrong);
    if (S.first_bad >= 0) {
        t_name(&first_bad_trace);
        char title[160];
        snprintf(title, sizeof title, "walk %d (junk kind %d): %s", S.first_bad, S.first_bad % 6,
                 S.first_bad_why);
        t_dump(&first_bad_trace, title);
        t_dump(&REF, "junk_outer's own walk (reference)");
        fprintf(stderr, "-- its crawl_backtrace: %d pcs\n", first_bad_npcs);
        for (int k = 0; k < first_bad_npcs; k++) {
            char buf[512];
            crawl_symbol sym;
            int ok =
                crawl_symbolize(first_bad_pcs[k] - 1, &sym, buf, sizeof buf) == 0 && sym.function;
            fprintf(stderr, "  [%d] %#lx %s\n", k, (unsigned long)first_bad_pcs[k],
                    ok ? sym.function : "<unknown>");
        }
    }
    EXPECT_NONE(not_done);
    EXPECT_NONE(leaked_ip);
    EXPECT_NONE(no_outer);
    EXPECT_NONE(no_main);
    EXPECT_NONE(no_gap_flag);
    EXPECT_NONE(wrong_prefix);
    EXPECT_NONE(wrong_tail);
    EXPECT_NONE(bt_bad_ip);
    EXPECT_NONE(bt_no_outer);
    EXPECT_NONE(bt_wrong);
    if (S.distinct_bt != 1)
        fail_msg("crawl_backtrace gave %u distinct pc sequences for one stack (want 1)",
                 S.distinct_bt);
}

int main(void)
{
    crawl_thread_attach();
    setup_ok = fn_range_of((const void *)junk_walker, "junk_walker", &walk_here_fn) == 0 &&
               fn_range_of((const void *)junk_call, "junk_call", &junk_fn) == 0 &&
               fn_range_of((const void *)junk_mid, "junk_mid", &mid_fn) == 0 &&
               fn_range_of((const void *)junk_outer, "junk_outer", &outer_fn) == 0 &&
               fn_range_of((const void *)main, "main", &main_fn) == 0 && exec_maps_read(&maps) == 0;
    S.first_bad = -1;
    if (setup_ok)
        junk_outer(WALKS);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_junk_rbp_is_never_a_frame),
    };
    return cmocka_run_group_tests_name("junk-fp", tests, NULL, NULL);
}
