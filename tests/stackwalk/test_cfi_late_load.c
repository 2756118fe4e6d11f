/* libcrawl dlopen'ed after another dlopen'ed library: that library can
 * still be unloaded, so a signal-safe walk must not use its compiled rules
 * (it cannot tell whether the code at those addresses is still the code the
 * rules came from) and stops at its frame. libcrawl itself is linked
 * -z nodelete, so its own frames are safe to unwind. This program does not
 * link libcrawl; it loads PLUGIN_A first and libcrawl second, as a host
 * loading two plugins would. */
#define _GNU_SOURCE
#include <crawl/crawl.h>
#include <dlfcn.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>

#include <cmocka.h>

static crawl_walk_status (*walk)(crawl_walk_fn, void *, unsigned);
static void (*stats)(unsigned long *, unsigned long *, unsigned long *);
static int (*attach)(void);
static void (*plugin_call)(void (*)(void));

static crawl_action count(const crawl_cf *cf, void *ctx)
{
    (void)cf;
    ++*(unsigned *)ctx;
    return CRAWL_CONTINUE;
}

/* What the last walks did: frames, statuses, libunwind steps of the signal-safe one. */
static unsigned normal_frames, safe_frames;
static unsigned long safe_fallbacks;

__attribute__((noinline)) static void walk_twice(void)
{
    normal_frames = safe_frames = 0;
    /* a normal walk fills the rules of every frame on this stack */
    assert_int_equal(walk(count, &normal_frames, 0), CRAWL_WALK_DONE);
    unsigned long f0, f1;
    stats(NULL, NULL, &f0);
    assert_int_equal(walk(count, &safe_frames, CRAWL_WALK_SIGNAL_SAFE), CRAWL_WALK_DONE);
    stats(NULL, NULL, &f1);
    safe_fallbacks = f1 - f0;
    __asm__ volatile("" ::: "memory");   /* not a tail call: keep this frame */
}

static void test_late_loaded_rules_are_not_used_signal_safe(void **state)
{
    (void)state;
    assert_int_equal(attach(), 0);
    /* the same walk from this program's own code: libcrawl (nodelete) and
     * the program are safe to unwind in signal context ... */
    walk_twice();
    unsigned direct_frames = safe_frames;
    assert_int_equal(normal_frames, direct_frames);
    assert_int_equal(safe_fallbacks, 0);
    /* ... and with one frame of the plugin loaded before libcrawl between:
     * the signal-safe walk reports walk_twice and the plugin's frame, then
     * stops there (no libunwind, no stale rule) */
    plugin_call(walk_twice);
    print_message("frames: direct %u, through the plugin %u normal, %u signal-safe\n",
                  direct_frames, normal_frames, safe_frames);
    assert_int_equal(normal_frames, direct_frames + 1);
    assert_int_equal(safe_frames, 2);
    assert_int_equal(safe_fallbacks, 0);
}

int main(void)
{
    void *a = dlopen(PLUGIN_A, RTLD_NOW | RTLD_LOCAL);
    if (!a) {
        fprintf(stderr, "dlopen %s: %s\n", PLUGIN_A, dlerror());
        return 1;
    }
    void *crawl = dlopen(LIBCRAWL, RTLD_NOW | RTLD_LOCAL);
    if (!crawl) {
        fprintf(stderr, "dlopen %s: %s\n", LIBCRAWL, dlerror());
        return 1;
    }
    *(void **)&plugin_call = dlsym(a, "plugin_call");
    *(void **)&walk = dlsym(crawl, "crawl_walk");
    *(void **)&stats = dlsym(crawl, "crawl_cfi_cache_stats");
    *(void **)&attach = dlsym(crawl, "crawl_thread_attach");
    if (!plugin_call || !walk || !stats || !attach) {
        fprintf(stderr, "dlsym: a symbol is missing\n");
        return 1;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_late_loaded_rules_are_not_used_signal_safe),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
