/* Linking crawl must not change what the embedder's backtrace() and
 * _Unwind_Backtrace resolve to (Debian's libunwind.so.8 exports both).
 * Built three ways: against the shared and the static libcrawl (expect
 * glibc and libgcc), and as a control linked with -lunwind directly
 * (run with --expect-hijack: shows the check can tell the difference). */
#define _GNU_SOURCE
#include "../support.h"

#include <dlfcn.h>
#include <execinfo.h>
#include <string.h>
#include <unwind.h>

static int expect_hijack;

/* AddressSanitizer intercepts backtrace() and _Unwind_RaiseException itself. */
#if defined(__SANITIZE_ADDRESS__)
#define SANITIZED 1
#else
#define SANITIZED 0
#endif

static void assert_from(const char *module, const char *expected)
{
    if (strstr(module, expected) || (SANITIZED && strstr(module, "libasan")))
        return;
    fail_msg("resolved to %s, expected %s", module, expected);
}

static const char *module_of(void *fn)
{
    Dl_info di;
    return (fn && dladdr(fn, &di) && di.dli_fname) ? di.dli_fname : "";
}

static _Unwind_Reason_Code count_frame(struct _Unwind_Context *ctx, void *arg)
{
    (void)ctx;
    ++*(int *)arg;
    return _URC_NO_REASON;
}

static crawl_action count(const crawl_cf *cf, void *ctx)
{
    (void)cf;
    ++*(int *)ctx;
    return CRAWL_CONTINUE;
}

static void test_resolution(void **state)
{
    (void)state;
    /* crawl is loaded and has opened libunwind for a precise walk */
    int n = 0;
    assert_int_equal(crawl_walk(count, &n, 0), CRAWL_WALK_DONE);
    assert_true(n > 2);

    void *frames[64];
    assert_true(backtrace(frames, 64) > 2);
    int m = 0;
    _Unwind_Backtrace(count_frame, &m);
    assert_true(m > 2);

    const char *bt = module_of((void *)backtrace);
    const char *bt_dyn = module_of(dlsym(RTLD_DEFAULT, "backtrace"));
    const char *ub = module_of((void *)_Unwind_Backtrace);
    const char *ub_dyn = module_of(dlsym(RTLD_DEFAULT, "_Unwind_Backtrace"));
    const char *re = module_of(dlsym(RTLD_DEFAULT, "_Unwind_RaiseException"));
    print_message("backtrace -> %s\n_Unwind_Backtrace -> %s\n_Unwind_RaiseException -> %s\n", bt,
                  ub, re);
    if (expect_hijack) {
        if (!SANITIZED)
            assert_non_null(strstr(bt, "libunwind"));
        assert_non_null(strstr(ub, "libunwind"));
        return;
    }
    assert_from(bt, "libc.so");
    assert_from(bt_dyn, "libc.so");
    assert_from(ub, "libgcc_s");
    assert_from(ub_dyn, "libgcc_s");
    assert_from(re, "libgcc_s");
}

int main(int argc, char **argv)
{
    expect_hijack = argc > 1 && strcmp(argv[1], "--expect-hijack") == 0;
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_resolution)};
    return cmocka_run_group_tests_name(expect_hijack ? "interpose-control" : "interpose", tests,
                                       NULL, NULL);
}
