/* The compiled CFI cache returns exactly the frames (pc and sp) that
 * libunwind's unw_step does: through libc, libffi, a signal frame, code
 * built without frame pointers, and dlopen'ed code replaced by other code
 * at the same address. */
#define _GNU_SOURCE
#include "../support.h"

#include <crawl/ffi.h>
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct frames {
    uintptr_t ip[256], sp[256];
    unsigned n;
    crawl_walk_status st;
} frames;

static crawl_action keep(const crawl_cf *cf, void *ctx)
{
    frames *f = ctx;
    if (crawl_cf_kind(cf) != CRAWL_CF_NATIVE)
        return CRAWL_CONTINUE;
    f->ip[f->n] = crawl_cf_ip(cf);
    f->sp[f->n] = crawl_cf_sp(cf);
    return ++f->n < 256 ? CRAWL_CONTINUE : CRAWL_ABORT;
}

static frames cached, plain;
static int compared;

/* crawl_backtrace of the same stack (its quick loop where it applies, the
 * walk's batch loop from where it cannot go on), and cut at each length. */
static uintptr_t bt[256], bt_cut[256];
static unsigned bt_n;
static int bt_bad_cut;                   /* a length whose pcs differ from bt's, or 0 */

NOINLINE static void backtrace_all(void)
{
    bt_bad_cut = 0;
    for (unsigned k = 0;; k++) {         /* ([0], the call site, may differ) */
        int n = crawl_backtrace(k ? bt_cut : bt, k ? (int)k : 256, 0);
        if (!k) {
            bt_n = (unsigned)n;
        } else if ((unsigned)n != (k < bt_n ? k : bt_n) ||
                   (n > 1 && memcmp(bt_cut + 1, bt + 1, (size_t)(n - 1) * sizeof bt[0]) != 0)) {
            bt_bad_cut = (int)k;
            break;
        }
        if (k > bt_n || k > 80)
            break;
    }
    __asm__ volatile("" ::: "memory");
}

/* The walks start here, so the lists start in this function (at different
 * call sites): compare from the caller on. */
NOINLINE static void walk_both(void)
{
    memset(&cached, 0, sizeof cached);
    memset(&plain, 0, sizeof plain);
    cached.st = crawl_walk(keep, &cached, 0);
    plain.st = crawl_walk(keep, &plain, CRAWL_WALK_NO_CFI_CACHE);
    backtrace_all();
    __asm__ volatile("" ::: "memory");
}

static void expect_same(const char *what)
{
    compared++;
    int same = cached.st == plain.st && cached.n == plain.n && cached.n > 3;
    for (unsigned i = 1; same && i < cached.n; i++)
        same = cached.ip[i] == plain.ip[i] && cached.sp[i] == plain.sp[i];
    if (!same) {
        fprintf(stderr, "%s: cached %u frames (status %d), libunwind %u (status %d)\n", what,
                cached.n, cached.st, plain.n, plain.st);
        for (unsigned i = 0; i < cached.n || i < plain.n; i++)
            fprintf(stderr, "  #%u  %#lx/%#lx   %#lx/%#lx\n", i, (unsigned long)cached.ip[i],
                    (unsigned long)cached.sp[i], (unsigned long)plain.ip[i],
                    (unsigned long)plain.sp[i]);
        fail_msg("%s: the cached walk differs from libunwind's", what);
    }
    /* backtrace_all's pcs: [0] in backtrace_all, [1] its call in walk_both,
     * then libunwind's from its [1] on */
    int bt_same = bt_n == plain.n + 1 && bt_bad_cut == 0;
    for (unsigned i = 1; bt_same && i < plain.n; i++)
        bt_same = bt[i + 1] == plain.ip[i];
    if (!bt_same) {
        fprintf(stderr, "%s: crawl_backtrace %u pcs (first bad cut %d), libunwind %u frames\n", what,
                bt_n, bt_bad_cut, plain.n);
        for (unsigned i = 0; i < bt_n || i < cached.n; i++)
            fprintf(stderr, "  #%u  %#lx   %#lx\n", i, (unsigned long)bt[i],
                    (unsigned long)plain.ip[i]);
        fail_msg("%s: crawl_backtrace differs from the walk", what);
    }
}

/* ---- through libc ----------------------------------------------------------------- */

static int cmp_walk(const void *a, const void *b)
{
    static int once;
    if (!once++)
        walk_both();
    return (*(const int *)a > *(const int *)b) - (*(const int *)a < *(const int *)b);
}

static void test_libc(void **state)
{
    (void)state;
    int v[32];
    for (int round = 0; round < 2; round++) {   /* cold, then warm */
        for (int i = 0; i < 32; i++)
            v[i] = (i * 7) % 32;
        *(volatile int *)&v[0] = v[0];
        qsort(v, 32, sizeof v[0], cmp_walk);
        expect_same(round ? "qsort (warm)" : "qsort (cold)");
        int key = 9;
        walk_both();                             /* bsearch calls back too */
        int *hit = bsearch(&key, v, 32, sizeof v[0], cmp_walk);
        assert_non_null(hit);
    }
    unsigned long hits, misses, fallbacks;
    crawl_cfi_cache_stats(&hits, &misses, &fallbacks);
    assert_true(hits > 0 && misses > 0);
}

static int bsearch_walked;
static int cmp_walk_every(const void *a, const void *b)
{
    if (!bsearch_walked++)
        walk_both();
    return (*(const int *)a > *(const int *)b) - (*(const int *)a < *(const int *)b);
}

static void test_bsearch(void **state)
{
    (void)state;
    int v[64], key = 41;
    for (int i = 0; i < 64; i++)
        v[i] = i;
    bsearch_walked = 0;
    assert_non_null(bsearch(&key, v, 64, sizeof v[0], cmp_walk_every));
    expect_same("bsearch");
}

/* ---- through libffi's trampolines -------------------------------------------------- */

static void ffi_handler(const crawl_ffi_closure *c, crawl_ffi_value *ret,
                        const crawl_ffi_value *args, void *user)
{
    (void)c, (void)args, (void)user;
    walk_both();
    ret->i = 0;
}

static void test_libffi(void **state)
{
    (void)state;
    char err[256];
    crawl_ffi_closure *cl = crawl_ffi_closure_new("i(pp)", ffi_handler, NULL, NULL, err, sizeof err);
    assert_non_null(cl);
    crawl_ffi_fn *qs = crawl_ffi_open(NULL, "qsort", "v(pzzp)", err, sizeof err);
    assert_non_null(qs);
    int v[2] = {2, 1};
    crawl_ffi_value args[4] = {{.p = v}, {.z = 2}, {.z = sizeof(int)}, {.p = crawl_ffi_closure_code(cl)}};
    crawl_ffi_call(qs, NULL, args);
    expect_same("libffi closure called by qsort through ffi_call");
    crawl_ffi_free(qs);
    crawl_ffi_closure_free(cl);
}

/* ---- through a signal frame --------------------------------------------------------- */

static void on_usr1(int sig)
{
    (void)sig;
    walk_both();                         /* crosses the kernel's signal trampoline */
}

NOINLINE static void raise_here(void)
{
    raise(SIGUSR1);
    __asm__ volatile("" ::: "memory");
}

static void test_signal_frame(void **state)
{
    (void)state;
    struct sigaction sa = {.sa_handler = on_usr1}, old;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGUSR1, &sa, &old);
    for (int i = 0; i < 2; i++) {
        raise_here();
        expect_same("signal handler");
    }
    sigaction(SIGUSR1, &old, NULL);
}

/* ---- code without frame pointers, randomly mixed ------------------------------------- */

typedef void (*step_fn)(unsigned depth);
void nofp_small(unsigned depth);
void nofp_big(unsigned depth);
void nofp_rbp_busy(unsigned depth);

NOINLINE static void fp_small(unsigned depth);
NOINLINE static void fp_big(unsigned depth);

static unsigned rng;
static step_fn choice[64];
static void (*at_bottom)(void) = walk_both;

NOINLINE static void bottom(unsigned depth)
{
    (void)depth;
    at_bottom();
    __asm__ volatile("" ::: "memory");
}

step_fn cfi_pick(unsigned depth)
{
    return depth == 0 ? bottom : choice[depth % 64];
}

NOINLINE static void fp_small(unsigned depth)
{
    cfi_pick(depth)(depth - 1);
    __asm__ volatile("" ::: "memory");
}

NOINLINE static void fp_big(unsigned depth)
{
    volatile char pad[120];
    pad[0] = (char)depth;
    cfi_pick(depth)(depth - 1);
    __asm__ volatile("" : : "r"(pad) : "memory");
}

static void test_random_chains(void **state)
{
    (void)state;
    static const step_fn kinds[5] = {nofp_small, nofp_big, nofp_rbp_busy, fp_small, fp_big};
    rng = 2026;
    for (int chain = 0; chain < 300; chain++) {
        for (int i = 0; i < 64; i++) {
            rng = rng * 1103515245u + 12345u;
            choice[i] = kinds[(rng >> 16) % 5];
        }
        unsigned depth = 5 + (rng >> 8) % 60;
        cfi_pick(depth + 1)(depth);
        char what[64];
        snprintf(what, sizeof what, "random chain %d (depth %u)", chain, depth);
        expect_same(what);
    }
}

/* ---- the walk memo: stacks that share their outer part ---------------------------- */

/* Chains that keep their outer levels and change only the innermost ones:
 * a backtrace at the bottom reaches frames of the last walk's memo (the
 * same pc at the same sp) and may take the rest from it, checked word by
 * word. Each backtrace must be libunwind's walk. */
static uintptr_t chain_bt[64];
static int chain_n;

NOINLINE static void backtrace_chain(void)
{
    memset(&plain, 0, sizeof plain);
    plain.st = crawl_walk(keep, &plain, CRAWL_WALK_NO_CFI_CACHE);
    chain_n = crawl_backtrace(chain_bt, 60, 0);
    __asm__ volatile("" ::: "memory");
}

static void test_memo_shared_outer_frames(void **state)
{
    (void)state;
    static const step_fn kinds[5] = {nofp_small, nofp_big, nofp_rbp_busy, fp_small, fp_big};
    at_bottom = backtrace_chain;
    rng = 77;
    unsigned depth = 0;
    for (int chain = 0; chain < 400; chain++) {
        /* every 8th chain anew; the others change levels 1 to 3 only */
        for (int i = 0; i < 64; i++) {
            rng = rng * 1103515245u + 12345u;
            if (chain % 8 == 0 || (i >= 1 && i <= 3 && (rng >> 12) % 2))
                choice[i] = kinds[(rng >> 16) % 5];
        }
        if (chain % 8 == 0)
            depth = 5 + (rng >> 8) % 35;
        cfi_pick(depth + 1)(depth);
        assert_true(plain.n > depth && plain.n <= 60);
        if (chain_n != (int)plain.n)
            fail_msg("chain %d: crawl_backtrace %d pcs, libunwind %u", chain, chain_n, plain.n);
        for (unsigned i = 1; i < plain.n; i++)
            if (chain_bt[i] != plain.ip[i])
                fail_msg("chain %d (depth %u): pc %u is %#lx, libunwind's %#lx", chain, depth, i,
                         (unsigned long)chain_bt[i], (unsigned long)plain.ip[i]);
    }
    at_bottom = walk_both;
}

/* ---- the walk memo: a stack that is the same but for one word ------------------- */

/* memo_from_x and memo_from_y have the same frame, at the same depth: the
 * stacks below them are the same to the byte but for the return address
 * into each, so a backtrace from memo_leaf starts from the same registers
 * both times, and the memo of one must not answer for the other. */

static uintptr_t memo_bt[2][64];
static int memo_n[2];
static frames memo_ref[2];

NO_IPA static void memo_leaf(int which)
{
    memo_n[which] = crawl_backtrace(memo_bt[which], 60, 0);
    memset(&memo_ref[which], 0, sizeof memo_ref[which]);
    memo_ref[which].st = crawl_walk(keep, &memo_ref[which], CRAWL_WALK_NO_CFI_CACHE);
    __asm__ volatile("" ::: "memory");
}

NO_IPA static void memo_mid(int which)
{
    memo_leaf(which);
    __asm__ volatile("" ::: "memory");
}

NO_IPA static void memo_from_x(void)
{
    memo_mid(0);
    __asm__ volatile("" ::: "memory");
}

NO_IPA static void memo_from_y(void)
{
    memo_mid(1);
    __asm__ volatile("" ::: "memory");
}

static void test_memo_one_word_apart(void **state)
{
    (void)state;
    for (int round = 0; round < 4; round++) {
        if (round % 2)
            memo_from_y(), memo_from_x();
        else
            memo_from_x(), memo_from_y();
        for (int w = 0; w < 2; w++) {
            assert_true(memo_ref[w].n > 4);
            assert_int_equal(memo_n[w], (int)memo_ref[w].n);
            for (unsigned i = 1; i < memo_ref[w].n; i++)
                assert_int_equal(memo_bt[w][i], memo_ref[w].ip[i]);
        }
        /* the same registers below, a different caller above */
        for (unsigned i = 0; i < 3; i++)
            assert_int_equal(memo_ref[0].sp[i], memo_ref[1].sp[i]);
        assert_int_equal(memo_ref[0].ip[1], memo_ref[1].ip[1]);
        assert_true(memo_bt[0][3] != memo_bt[1][3]);
        assert_int_equal(memo_bt[0][4], memo_bt[1][4]);   /* both called from this test */
    }
}

/* ---- dlopen'ed code, unloaded and replaced ------------------------------------------ */

static void test_dlopen_replaced(void **state)
{
    (void)state;
    uintptr_t first_at = 0;
    for (int round = 0; round < 4; round++) {
        const char *lib = round % 2 ? PLUGIN_B : PLUGIN_A;
        void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
        assert_non_null(h);
        void (*call)(void (*)(void)) = (void (*)(void (*)(void)))dlsym(h, "plugin_call");
        assert_non_null(call);
        if (!first_at)
            first_at = (uintptr_t)call;
        print_message("round %d: %s at %p%s\n", round, round % 2 ? "B" : "A", (void *)call,
                      (uintptr_t)call == first_at ? " (the same address)" : "");
        call(walk_both);
        char what[64];
        snprintf(what, sizeof what, "plugin %s, round %d", round % 2 ? "B" : "A", round);
        expect_same(what);
        dlclose(h);
    }
}

/* ---- signal-safe walks: only rules that cannot go stale ------------------------- */

/* The signal-safe walk (compiled rules only, never libunwind) against a
 * normal-context libunwind walk of the same stack; a test may do that in a
 * handler it raised itself. */
static unsigned long fb_signal_safe;     /* libunwind steps during the signal-safe walk */

static uintptr_t ss_bt[256];              /* crawl_backtrace, signal-safe, of the same stack */
static int ss_bt_n;

/* The signal-safe backtrace is the signal-safe walk's natives. */
static void expect_ss_backtrace(const char *what)
{
    int same = ss_bt_n == (int)cached.n;
    for (unsigned i = 1; same && i < cached.n; i++)
        same = ss_bt[i] == cached.ip[i];
    if (!same)
        fail_msg("%s: the signal-safe crawl_backtrace (%d pcs) differs from the signal-safe "
                 "walk (%u frames)", what, ss_bt_n, cached.n);
}

NOINLINE static void walk_both_signal_safe(void)
{
    memset(&cached, 0, sizeof cached);
    memset(&plain, 0, sizeof plain);
    unsigned long fb0, fb1;
    crawl_cfi_cache_stats(NULL, NULL, &fb0);
    cached.st = crawl_walk(keep, &cached, CRAWL_WALK_SIGNAL_SAFE);
    crawl_cfi_cache_stats(NULL, NULL, &fb1);
    fb_signal_safe = fb1 - fb0;
    ss_bt_n = crawl_backtrace(ss_bt, 256, CRAWL_WALK_SIGNAL_SAFE);
    plain.st = crawl_walk(keep, &plain, CRAWL_WALK_NO_CFI_CACHE);
    backtrace_all();
    __asm__ volatile("" ::: "memory");
}

static void (*in_handler)(void);
static void on_usr2(int sig)
{
    (void)sig;
    in_handler();
}

static void plugin_target(void)
{
    raise(SIGUSR2);
}

static void test_signal_safe_walks(void **state)
{
    (void)state;
    struct sigaction sa = {.sa_handler = on_usr2}, old;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGUSR2, &sa, &old);
    in_handler = walk_both_signal_safe;
    /* through the signal trampoline, libc and this program, with rules no
     * normal-context walk of this stack filled */
    unsigned long hits0, hits1;
    crawl_cfi_cache_stats(&hits0, NULL, NULL);
    raise(SIGUSR2);
    crawl_cfi_cache_stats(&hits1, NULL, NULL);
    expect_same("signal-safe walk in a handler");
    expect_ss_backtrace("a handler");
    assert_int_equal(fb_signal_safe, 0);
    raise(SIGUSR2);
    crawl_cfi_cache_stats(&hits1, NULL, NULL);
    expect_same("signal-safe walk in a handler (again)");
    assert_true(hits1 > hits0);           /* served from the rule cache */
    assert_int_equal(fb_signal_safe, 0);

    /* a dlopen'ed module may be unloaded and replaced at any time, which a
     * handler cannot check: a signal-safe walk stops at its frame */
    void *h = dlopen(PLUGIN_A, RTLD_NOW | RTLD_LOCAL);
    void (*call)(void (*)(void)) = (void (*)(void (*)(void)))dlsym(h, "plugin_call");
    call(walk_both);                      /* a normal walk sees the module (and compiles it) */
    call(plugin_target);
    expect_ss_backtrace("a handler through an unpinned plugin");
    assert_int_equal(cached.st, CRAWL_WALK_DONE);
    assert_int_equal(fb_signal_safe, 0);
    assert_true(cached.n > 3 && cached.n < plain.n);
    for (unsigned i = 1; i < cached.n; i++) {
        assert_int_equal(cached.ip[i], plain.ip[i]);
        assert_int_equal(cached.sp[i], plain.sp[i]);
    }
    Dl_info info;
    assert_true(dladdr((void *)(cached.ip[cached.n - 1] - 1), &info) && info.dli_fname);
    assert_non_null(strstr(info.dli_fname, "plugin"));   /* the last frame is the plugin's */

    /* pinned, it can never be unloaded: signal-safe walks go through it */
    int local;
    assert_int_equal(crawl_module_pin(&local), -ENOENT);
    assert_int_equal(crawl_module_pin((void *)call), 0);
    call(walk_both);                      /* compiles nothing new: the rules stay */
    call(plugin_target);
    expect_same("signal-safe walk through a pinned plugin");
    expect_ss_backtrace("a handler through a pinned plugin");
    assert_int_equal(fb_signal_safe, 0);
    dlclose(h);                           /* stays mapped */
    assert_true(dladdr((void *)call, &info) && info.dli_fname);
    call(plugin_target);
    expect_same("signal-safe walk through a pinned plugin after dlclose");
    sigaction(SIGUSR2, &old, NULL);
}

/* ---- the hits of threads that have exited stay counted --------------------- */

static crawl_action count_frames(const crawl_cf *cf, void *ctx)
{
    (void)cf;
    ++*(unsigned *)ctx;
    return CRAWL_CONTINUE;
}

static void *walk_then_exit(void *arg)
{
    (void)arg;
    for (int i = 0; i < 100; i++) {
        unsigned n = 0;
        crawl_walk(count_frames, &n, 0);
    }
    return NULL;
}

static void test_exited_threads_hits(void **state)
{
    (void)state;
    unsigned long h0, h1;
    crawl_cfi_cache_stats(&h0, NULL, NULL);
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, walk_then_exit, NULL), 0);
    assert_int_equal(pthread_join(t, NULL), 0);
    crawl_cfi_cache_stats(&h1, NULL, NULL);
    print_message("hits: %lu before the thread, %lu after it exited\n", h0, h1);
    assert_true(h1 >= h0 + 100);           /* 100 walks of several frames each */
}

int main(void)
{
    crawl_thread_attach();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_libc),
        cmocka_unit_test(test_bsearch),
        cmocka_unit_test(test_libffi),
        cmocka_unit_test(test_signal_frame),
        cmocka_unit_test(test_random_chains),
        cmocka_unit_test(test_memo_one_word_apart),
        cmocka_unit_test(test_memo_shared_outer_frames),
        cmocka_unit_test(test_dlopen_replaced),
        cmocka_unit_test(test_signal_safe_walks),
        cmocka_unit_test(test_exited_threads_hits),
    };
    int rc = cmocka_run_group_tests_name("cfi-cache", tests, NULL, NULL);
    print_message("compared %d walks with libunwind's\n", compared);
    return rc;
}
