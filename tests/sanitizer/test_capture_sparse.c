/* The sanitizer's stack captures read a module's CFI one pc at a time
 * before compiling it whole (SW_WALK_SPARSE_CFI): in a process where no
 * walk has run yet, a capture gives exactly libunwind's frames, and leaves
 * the modules uncompiled, so that a signal-safe walk through pcs the
 * capture never met stops, as crawl/stackwalk.h says, until
 * crawl_cfi_cache_warm(). The first test must run first: nothing may walk
 * before it. */
#define _GNU_SOURCE
#include "../support.h"

#include <string.h>

#define MAX 64

static uint32_t captured;
static uintptr_t ref[MAX];
static unsigned nref;

static crawl_action keep(const crawl_cf *cf, void *ctx)
{
    (void)ctx;
    if (crawl_cf_kind(cf) == CRAWL_CF_NATIVE && nref < MAX)
        ref[nref++] = crawl_cf_ip(cf);
    return CRAWL_CONTINUE;
}

NOINLINE static void capture_leaf(void)
{
    captured = crawl_depot_capture(MAX, 0);
    /* libunwind alone, after the capture: it compiles nothing either way */
    nref = 0;
    assert_int_equal(crawl_walk(keep, NULL, CRAWL_WALK_NO_CFI_CACHE), CRAWL_WALK_DONE);
    __asm__ volatile("" ::: "memory");
}

NOINLINE static void capture_mid(void)
{
    capture_leaf();
    __asm__ volatile("" ::: "memory");
}

static void test_first_capture_matches_libunwind(void **state)
{
    (void)state;
    unsigned long m0, m1;
    crawl_cfi_cache_stats(NULL, &m0, NULL);
    capture_mid();
    crawl_cfi_cache_stats(NULL, &m1, NULL);
    assert_true(m1 > m0);                /* the rules were looked up, not in the cache */
    const uintptr_t *w;
    unsigned n = crawl_depot_get(captured, &w);
    /* frame 0 is capture_leaf at two call sites; every caller is the same */
    assert_true(n >= 4);
    assert_int_equal(n, nref);
    for (unsigned i = 1; i < n; i++) {
        if (w[i] != ref[i])
            print_message("frame %u: capture %#lx, libunwind %#lx\n", i, (unsigned long)w[i],
                          (unsigned long)ref[i]);
        assert_true(w[i] == ref[i]);
    }
}

static int safe_n, normal_n;

NOINLINE static void backtrace_both(void)
{
    uintptr_t pcs[MAX];
    safe_n = crawl_backtrace(pcs, MAX, CRAWL_WALK_SIGNAL_SAFE);
    normal_n = crawl_backtrace(pcs, MAX, 0);
    __asm__ volatile("" ::: "memory");
}

NOINLINE static void elsewhere(void)
{
    backtrace_both();
    __asm__ volatile("" ::: "memory");
}

static void test_capture_compiles_no_module(void **state)
{
    (void)state;
    /* pcs no capture met: libcrawl's crawl_backtrace, these two functions */
    elsewhere();
    assert_true(normal_n >= 4);
    assert_true(safe_n < normal_n);
    /* (the normal walk compiled the modules it went through) */
    elsewhere();
    assert_int_equal(safe_n, normal_n);
    assert_true(crawl_cfi_cache_warm() > 0);
    elsewhere();
    assert_int_equal(safe_n, normal_n);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_first_capture_matches_libunwind),
        cmocka_unit_test(test_capture_compiles_no_module),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
