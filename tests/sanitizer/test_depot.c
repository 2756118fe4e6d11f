/* The stack depot: dedupe, id stability under threads, mixed capture, budget. */
#define _GNU_SOURCE
#include "../support.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* Resident pages of the process, from /proc/self/statm. */
static long resident_kib(void)
{
    FILE *f = fopen("/proc/self/statm", "r");
    assert_non_null(f);
    long size = 0, resident = 0;
    assert_int_equal(fscanf(f, "%ld %ld", &size, &resident), 2);
    fclose(f);
    return resident * (sysconf(_SC_PAGESIZE) / 1024);
}

/* First (the depot is still empty): a process that stores a few dozen
 * traces holds the pages they touch (a page of buckets each, at most, and
 * the arena's pages they fill), not huge pages (2 MiB of buckets and 2 MiB
 * of the first arena, zeroed at the first put, before the fix). */
static void test_small_depot_small_footprint(void **state)
{
    (void)state;
    crawl_depot_stats st;
    crawl_depot_get_stats(&st);
    assert_int_equal(st.ids, 0);
    long before = resident_kib();
    for (unsigned i = 0; i < 50; i++) {
        uintptr_t tr[32];
        for (int k = 0; k < 32; k++)
            tr[k] = 0x700000 + i * 4096 + (unsigned)k * 16;
        assert_true(crawl_depot_put(tr, 32) != 0);
    }
    long grown = resident_kib() - before;
    print_message("50 traces of 32 frames: %ld KiB resident more\n", grown);
    assert_true(grown < 1024);
}

static void test_put_get(void **state)
{
    (void)state;
    uintptr_t a[3] = {0x401000, 0x402000, 0x403000}, b[3] = {0x401000, 0x402000, 0x403001};
    uint32_t ia = crawl_depot_put(a, 3), ib = crawl_depot_put(b, 3);
    assert_true(ia != 0 && ib != 0 && ia != ib);
    assert_int_equal(crawl_depot_put(a, 3), ia);                /* dedupe */
    assert_int_equal(crawl_depot_put(a, 2), crawl_depot_put(a, 2));
    assert_true(crawl_depot_put(a, 2) != ia);                   /* a prefix is another trace */
    const uintptr_t *got;
    assert_int_equal(crawl_depot_get(ia, &got), 3);
    assert_memory_equal(got, a, sizeof a);
    assert_int_equal(crawl_depot_get(0, &got), 0);
    assert_int_equal(crawl_depot_get(0x7fffffff, &got), 0);
    assert_int_equal(crawl_depot_put(NULL, 3), 0);
    /* no frame asked for: nothing stored (one frame was, before) */
    crawl_depot_stats before, after;
    crawl_depot_get_stats(&before);
    assert_int_equal(crawl_depot_capture(0, 0), 0);
    crawl_regs here;
    crawl_capture_regs(&here);
    assert_int_equal(crawl_depot_capture_from(&here, 0, CRAWL_WALK_FAST), 0);
    crawl_depot_get_stats(&after);
    assert_int_equal(after.ids, before.ids);
    assert_int_equal(crawl_depot_put(a, 0), 0);
    uintptr_t big[CRAWL_DEPOT_MAX_FRAMES + 1] = {0};
    assert_int_equal(crawl_depot_put(big, CRAWL_DEPOT_MAX_FRAMES + 1), 0);
    assert_true(crawl_depot_put(big, CRAWL_DEPOT_MAX_FRAMES) != 0);
}

/* A thread's recent traces are remembered by a fingerprint of a few of
 * their words: traces that differ only elsewhere, put in turn, must still
 * get ids of their own (the remembered trace is compared whole). */
static void test_put_alternating_lookalikes(void **state)
{
    (void)state;
    uintptr_t a[8], b[8];
    for (unsigned k = 0; k < 8; k++)
        a[k] = b[k] = 0x500000 + 16 * k;
    b[3] ^= 0x40;                        /* word 3: not among those fingerprinted */
    uint32_t ia = crawl_depot_put(a, 8), ib = crawl_depot_put(b, 8);
    assert_true(ia != 0 && ib != 0 && ia != ib);
    for (int round = 0; round < 4; round++) {
        assert_int_equal(crawl_depot_put(a, 8), ia);
        assert_int_equal(crawl_depot_put(b, 8), ib);
        assert_int_equal(crawl_depot_put(a, 7), crawl_depot_put(a, 7));
        assert_true(crawl_depot_put(a, 7) != ia);
    }
    const uintptr_t *got;
    assert_int_equal(crawl_depot_get(ib, &got), 8);
    assert_memory_equal(got, b, sizeof b);
}

/* 4 threads put the same 2000 traces in different orders: every trace gets
 * one id, the same in every thread, and get returns that trace. */
#define TRACES 2000
static uint32_t ids[4][TRACES];

static void make_trace(unsigned i, uintptr_t out[8])
{
    for (unsigned k = 0; k < 8; k++)
        out[k] = 0x400000 + i * 64 + k * (i % 7 + 1);
}

static void *put_all(void *arg)
{
    unsigned t = (unsigned)(uintptr_t)arg;
    static const unsigned stride[4] = {1, 3, 7, 9};          /* coprime to TRACES */
    for (unsigned j = 0; j < TRACES; j++) {
        unsigned i = (j * stride[t] + t * 517) % TRACES;     /* a different order per thread */
        uintptr_t tr[8];
        make_trace(i, tr);
        ids[t][i] = crawl_depot_put(tr, 8);
    }
    return NULL;
}

static void test_ids_stable_under_threads(void **state)
{
    (void)state;
    pthread_t th[4];
    for (uintptr_t t = 0; t < 4; t++)
        assert_int_equal(pthread_create(&th[t], NULL, put_all, (void *)t), 0);
    for (int t = 0; t < 4; t++)
        pthread_join(th[t], NULL);
    for (unsigned i = 0; i < TRACES; i++) {
        assert_true(ids[0][i] != 0);
        for (int t = 1; t < 4; t++)
            assert_int_equal(ids[t][i], ids[0][i]);
        for (unsigned j = 0; j < i; j++)
            if (ids[0][j] == ids[0][i])
                fail_msg("traces %u and %u share id %u", i, j, ids[0][i]);
        uintptr_t tr[8];
        make_trace(i, tr);
        const uintptr_t *got;
        assert_int_equal(crawl_depot_get(ids[0][i], &got), 8);
        assert_memory_equal(got, tr, sizeof tr);
        assert_int_equal(crawl_depot_put(tr, 8), ids[0][i]);   /* still the same later */
    }
}

/* ---- capture of a mixed stack --------------------------------------------------- */

typedef struct script_frame {
    crawl_frame frame;
    const char *function;
    int line;
} script_frame;

static const void *script_method(const crawl_frame *f)
{
    return ((const script_frame *)f)->function;
}

static int script_describe(const crawl_frame *f, char *buf, size_t len)
{
    const script_frame *s = (const script_frame *)f;
    return snprintf(buf, len, "%s app.script:%d", s->function, s->line);
}

static int script_describe_method(const void *method, uintptr_t pc, char *buf, size_t len)
{
    (void)pc;
    return snprintf(buf, len, "%s app.script", (const char *)method);
}

static const crawl_frame_type script_type = {
    .name = "script",
    .flags = CRAWL_FRAME_FUNCTION,
    .method = script_method,
    .describe = script_describe,
    .describe_method = script_describe_method,
};

static uint32_t captured;

NOINLINE static void capture_here(unsigned flags)
{
    captured = crawl_depot_capture(64, flags);
    __asm__ volatile("" ::: "memory");
}

NOINLINE static void scripted(unsigned flags)
{
    script_frame sf = {.function = "handler", .line = 9};
    crawl_frame_push(&sf.frame, &script_type);
    crawl_transition t;                  /* not a function: not captured */
    crawl_transition_push(&t, NULL);
    capture_here(flags);
    crawl_frame_pop(&t.frame);
    crawl_frame_pop(&sf.frame);
}

static void test_capture_mixed_stack(void **state)
{
    (void)state;
    static const unsigned modes[2] = {CRAWL_WALK_FAST, 0};
    for (int m = 0; m < 2; m++) {
        uint32_t twice[2];
        for (volatile int k = 0; k < 2; k++) { /* one call site (no unrolling) */
            scripted(modes[m]);
            twice[k] = captured;
        }
        assert_int_equal(twice[0], twice[1]);
        const uintptr_t *w;
        unsigned n = crawl_depot_get(captured, &w);
        assert_true(n >= 5);
        /* [0] a pc in capture_here, [1..3] the script activation, [4] scripted */
        char buf[512];
        crawl_symbol s;
        assert_int_equal(crawl_symbolize(w[0] - 1, &s, buf, sizeof buf), 0);
        assert_string_equal(s.function, "capture_here");
        assert_int_equal(w[1], CRAWL_DEPOT_VM | (uintptr_t)&script_type);
        assert_string_equal((const char *)w[2], "handler");
        assert_int_equal(crawl_symbolize(w[4] - 1, &s, buf, sizeof buf), 0);
        assert_string_equal(s.function, "scripted");
    }
    /* printed in the ASan shape, the activation through describe_method */
    char out[4096];
    t_depot_text(captured, out, sizeof out);
    assert_non_null(strstr(out, "    #0 0x"));
    assert_non_null(strstr(out, " in capture_here "));
    assert_non_null(strstr(out, "    #1 in handler app.script\n    #2 0x"));
}

/* The depot takes any words: an activation whose type word was never a
 * pushed Frame's type is printed as unknown, not followed (it faulted). */
static void test_print_made_up_activation(void **state)
{
    (void)state;
    uintptr_t w[4] = {CRAWL_DEPOT_VM | 0x1230, 5, 6, 0x401000};
    uint32_t id = crawl_depot_put(w, 4);
    assert_int_not_equal(id, 0);
    char out[4096];
    t_depot_text(id, out, sizeof out);
    assert_non_null(strstr(out, "    #0 in [activation of unknown type 0x1230, method 0x5]\n"
                                "    #1 0x401000 in "));
}

/* ---- captures the walk memo replays ---------------------------------------------------- */

/* depot_from_x and depot_from_y have the same frame at the same depth: the
 * stacks below them differ in one word (the return address into each), so
 * a capture in depot_leaf starts from the same registers both times. A
 * replayed capture reuses the depot id kept with the walk memo: it must be
 * the id of its own stack, for its own max. */

static uint32_t memo_ids[2][2];          /* [caller][max 3, max 6] */

NO_IPA static void depot_leaf(int which)
{
    for (volatile int m = 0; m < 2; m++)  /* one call site for both */
        memo_ids[which][m] = crawl_depot_capture(m ? 6 : 3, 0);
    __asm__ volatile("" ::: "memory");
}

NO_IPA static void depot_from_x(void)
{
    depot_leaf(0);
    __asm__ volatile("" ::: "memory");
}

NO_IPA static void depot_from_y(void)
{
    depot_leaf(1);
    __asm__ volatile("" ::: "memory");
}

static const char *function_at(uint32_t id, unsigned i)
{
    static char buf[512];
    static crawl_symbol s;
    const uintptr_t *w;
    unsigned n = crawl_depot_get(id, &w);
    if (i >= n || crawl_symbolize(w[i] - 1, &s, buf, sizeof buf) != 0)
        return "?";
    return s.function;
}

static void test_capture_memo_keeps_ids_apart(void **state)
{
    (void)state;
    uint32_t first[2][2];
    for (int round = 0; round < 6; round++) {
        void (*order[2])(void) = {depot_from_x, depot_from_y};
        if (round % 2)
            order[0] = depot_from_y, order[1] = depot_from_x;
        for (volatile int i = 0; i < 2; i++)  /* one call site: the stacks differ only above */
            order[i]();
        if (round == 0)
            memcpy(first, memo_ids, sizeof first);
        assert_memory_equal(first, memo_ids, sizeof first);   /* the same ids each time */
    }
    const uintptr_t *w;
    for (int c = 0; c < 2; c++) {
        assert_int_equal(crawl_depot_get(memo_ids[c][0], &w), 3);
        assert_int_equal(crawl_depot_get(memo_ids[c][1], &w), 6);
        assert_string_equal(function_at(memo_ids[c][1], 0), "depot_leaf");
        assert_string_equal(function_at(memo_ids[c][1], 1), c ? "depot_from_y" : "depot_from_x");
        assert_string_equal(function_at(memo_ids[c][0], 1), c ? "depot_from_y" : "depot_from_x");
    }
    assert_true(memo_ids[0][0] != memo_ids[1][0] && memo_ids[0][1] != memo_ids[1][1]);

    /* one place, max in turn: each id has its own max's frames */
    static const unsigned maxes[] = {6, 3, 5, 2, 6, 4, 3, 6, 2, 5};
    uint32_t by_max[7] = {0};
    for (int round = 0; round < 3; round++)
        for (volatile unsigned i = 0; i < sizeof maxes / sizeof maxes[0]; i++) {
            uint32_t id = crawl_depot_capture(maxes[i], 0);
            assert_int_equal(crawl_depot_get(id, &w), maxes[i]);
            if (!by_max[maxes[i]])
                by_max[maxes[i]] = id;
            assert_int_equal(id, by_max[maxes[i]]);
        }
}

/* ---- the memo where rbp decides the frames above ------------------------------------- */

#if defined(__x86_64__)
/* fp_jump(fn, rbp, arg) calls fn(arg) with rbp set to a record the caller
 * made, under CFI that computes its CFA from rbp (as code with frame
 * pointers and alloca has it): its caller, as an unwinder sees it, is the
 * return address in that record. Two calls from one place, with records
 * at two addresses, make walks that start from the same registers and
 * read the same return address words where the first walk read them (the
 * first record stays as it was), and part only by rbp. fake_a and fake_b
 * are the callers the records name. save_rbp(fn) calls fn with rbp saved
 * on the stack and then zeroed: the walk reads fp_jump's rbp back from
 * there, not from the registers it starts with. */
__asm__(".text\n"
        ".type fp_jump, @function\n"
        "fp_jump:\n"
        ".cfi_startproc\n"
        "push %rbp\n"
        ".cfi_def_cfa_offset 16\n"
        ".cfi_offset %rbp, -16\n"
        "mov %rsi, %rbp\n"
        ".cfi_def_cfa %rbp, 16\n"
        "mov %rdi, %rax\n"
        "mov %rdx, %rdi\n"
        "call *%rax\n"
        "lea 8(%rsp), %rsp\n"      /* (rbp back from the real stack) */
        ".cfi_def_cfa %rsp, 8\n"
        "mov -8(%rsp), %rbp\n"
        "ret\n"
        ".cfi_endproc\n"
        ".size fp_jump, .-fp_jump\n"
        ".type save_rbp, @function\n"
        "save_rbp:\n"
        ".cfi_startproc\n"
        "push %rbp\n"
        ".cfi_def_cfa_offset 16\n"
        ".cfi_offset %rbp, -16\n"
        "xor %ebp, %ebp\n"
        "call *%rdi\n"
        "pop %rbp\n"
        ".cfi_def_cfa_offset 8\n"
        "ret\n"
        ".cfi_endproc\n"
        ".size save_rbp, .-save_rbp\n"
        ".type fake_a, @function\n"
        "fake_a:\n"
        ".cfi_startproc\n"
        "nop\n"
        "fake_a_site:\n"
        "nop\n"
        "ret\n"
        ".cfi_endproc\n"
        ".size fake_a, .-fake_a\n"
        ".type fake_b, @function\n"
        "fake_b:\n"
        ".cfi_startproc\n"
        "nop\n"
        "fake_b_site:\n"
        "nop\n"
        "ret\n"
        ".cfi_endproc\n"
        ".size fake_b, .-fake_b\n");
void fp_jump(void (*fn)(void *), uintptr_t rbp, void *arg);
void save_rbp(void (*fn)(void));
extern const char fake_a_site[], fake_b_site[];

#define RBP_MAX 4                        /* rbp_capture, its caller, fp_jump, the fake */
static uint32_t rbp_id;
static uintptr_t rbp_pcs[4];
static int rbp_npcs;

NO_IPA static void rbp_capture(void)
{
    rbp_id = crawl_depot_capture(RBP_MAX, 0);       /* (the depot's: its id kept with the memo) */
    rbp_npcs = crawl_backtrace(rbp_pcs, RBP_MAX, 0);  /* (the backtrace's: no id) */
    __asm__ volatile("" ::: "memory");
}

NO_IPA static void rbp_capture_direct(void *unused)
{
    (void)unused;
    rbp_capture();
    __asm__ volatile("" ::: "memory");   /* (no tail call: the frame stays) */
}

/* The walk from fp_jump's own registers as they are at its call (rbp the
 * record's address; every frame but fp_jump's saves rbp, so only here
 * is it the starting rbp that decides) */
static uint32_t rbp_from_id;

NO_IPA static void rbp_capture_from(void *unused)
{
    (void)unused;
    crawl_regs r = {0};
    uintptr_t *frame = __builtin_frame_address(0);
    r.ip = (uintptr_t)__builtin_return_address(0);
    r.sp = (uintptr_t)(frame + 2);
    r.fp = frame[0];
    rbp_from_id = crawl_depot_capture_from(&r, 1, 0);   /* fp_jump's frame, skipped: the fake */
    __asm__ volatile("" ::: "memory");
}

static void test_memo_minds_rbp(void **state)
{
    (void)state;
    /* each record: the saved rbp, the return address, then the return
     * address of fake_a's or fake_b's frame (code, so that the walk gets
     * past it: with 0 there the quick walk handed it on, and the memo was
     * not kept) */
    uintptr_t rec_a[4] = {0, (uintptr_t)fake_a_site, (uintptr_t)fake_a_site, 0};
    uintptr_t rec_b[4] = {0, (uintptr_t)fake_b_site, (uintptr_t)fake_b_site, 0};
    const uintptr_t *recs[] = {rec_a, rec_a, rec_a, rec_b, rec_b, rec_a, rec_b};
    const char *want[] = {"fake_a", "fake_a", "fake_a", "fake_b", "fake_b", "fake_a", "fake_b"};
    for (volatile unsigned i = 0; i < sizeof recs / sizeof recs[0]; i++) {
        fp_jump(rbp_capture_from, (uintptr_t)recs[i], NULL);
        const uintptr_t *w;
        assert_int_equal(crawl_depot_get(rbp_from_id, &w), 1);
        if (strcmp(function_at(rbp_from_id, 0), want[i]) != 0)
            fail_msg("from fp_jump's registers, walk %u: the depot's stack starts at %s, not %s",
                     i, function_at(rbp_from_id, 0), want[i]);
    }
    for (int saved = 0; saved < 2; saved++) {
        const char *mid = saved ? "save_rbp" : "rbp_capture_direct";
        for (volatile unsigned i = 0; i < sizeof recs / sizeof recs[0]; i++) {
            /* one call site: the same registers */
            if (saved)
                fp_jump((void (*)(void *))save_rbp, (uintptr_t)recs[i], (void *)rbp_capture);
            else
                fp_jump(rbp_capture_direct, (uintptr_t)recs[i], NULL);
            const uintptr_t *w;
            assert_int_equal(crawl_depot_get(rbp_id, &w), RBP_MAX);
            assert_string_equal(function_at(rbp_id, 0), "rbp_capture");
            assert_string_equal(function_at(rbp_id, 1), mid);
            assert_string_equal(function_at(rbp_id, 2), "fp_jump");
            if (strcmp(function_at(rbp_id, 3), want[i]) != 0)
                fail_msg("under %s, walk %u: the depot's stack has %s above fp_jump, not %s", mid,
                         i, function_at(rbp_id, 3), want[i]);
            assert_int_equal(rbp_npcs, RBP_MAX);
            crawl_symbol sym;
            char buf[256];
            assert_int_equal(crawl_symbolize(rbp_pcs[3] - 1, &sym, buf, sizeof buf), 0);
            if (strcmp(sym.function, want[i]) != 0)
                fail_msg("under %s, walk %u: the backtrace has %s above fp_jump, not %s", mid, i,
                         sym.function, want[i]);
        }
    }
}
#else
static void test_memo_minds_rbp(void **state) { skip(); }
#endif

/* ---- the byte budget (last: it leaves the depot full) --------------------------------- */

static char report_text[4096];
static void keep_report(const char *text, void *ctx)
{
    (void)ctx;
    snprintf(report_text, sizeof report_text, "%s", text);
}

static void test_budget(void **state)
{
    (void)state;
    uintptr_t kept[2] = {0x1234, 0x5678};
    uint32_t kept_id = crawl_depot_put(kept, 2);
    assert_int_equal(crawl_sanitizer_set_options("depot_budget_mb=1"), 0);
    crawl_depot_stats before, after;
    crawl_depot_get_stats(&before);
    unsigned stored = 0, refused = 0;
    for (unsigned i = 0; i < 20000; i++) {
        uintptr_t tr[32];
        for (int k = 0; k < 32; k++)
            tr[k] = 0x900000 + i * 32 + (unsigned)k;
        if (crawl_depot_put(tr, 32))
            stored++;
        else
            refused++;
    }
    crawl_depot_get_stats(&after);
    print_message("budget 1 MiB: %u stored, %u refused, %lu bytes used\n", stored, refused,
                  after.bytes);
    assert_true(refused > 0 && stored > 0);
    assert_true(after.bytes <= (1u << 20));
    assert_int_equal(after.drops - before.drops, refused);
    assert_int_equal(after.budget, 1u << 20);
    /* what was stored stays, and hits need no memory */
    assert_int_equal(crawl_depot_put(kept, 2), kept_id);
    const uintptr_t *w;
    assert_int_equal(crawl_depot_get(kept_id, &w), 2);
    /* a report's missing stack says the budget refused stacks, and how many */
    crawl_set_report_callback(keep_report, NULL);
    assert_int_equal(crawl_sanitizer_set_options("halt_on_error=0"), 0);
    crawl_report *r = crawl_report_begin();
    crawl_report_trace(r, 0);
    crawl_report_end(r);
    crawl_set_report_callback(NULL, NULL);
    char want[128];
    snprintf(want, sizeof want,
             "    <stack not recorded (the depot has refused %lu stacks: its budget, or no "
             "memory)>\n",
             after.drops);
    assert_non_null(strstr(report_text, want));
}

int main(void)
{
    crawl_thread_attach();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_small_depot_small_footprint),
        cmocka_unit_test(test_put_get),
        cmocka_unit_test(test_put_alternating_lookalikes),
        cmocka_unit_test(test_ids_stable_under_threads),
        cmocka_unit_test(test_capture_mixed_stack),
        cmocka_unit_test(test_print_made_up_activation),
        cmocka_unit_test(test_capture_memo_keeps_ids_apart),
        cmocka_unit_test(test_memo_minds_rbp),
        cmocka_unit_test(test_budget),
    };
    return cmocka_run_group_tests_name("depot", tests, NULL, NULL);
}
