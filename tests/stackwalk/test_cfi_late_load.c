/* libcrawl dlopen'ed after another dlopen'ed library: that library can
 * still be unloaded, so a signal-safe walk must not use its cached rules
 * (it cannot tell whether the code at those addresses is still the code the
 * rules came from). This program does not link libcrawl; it loads
 * PLUGIN_A first and libcrawl second, as a host loading two plugins would. */
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

/* What the last signal-safe walk did: frames, and rule look-ups that missed. */
static unsigned normal_frames, safe_frames;
static unsigned long safe_misses;

__attribute__((noinline)) static void walk_twice(void)
{
    normal_frames = safe_frames = 0;
    /* a normal walk fills the rules of every frame on this stack */
    assert_int_equal(walk(count, &normal_frames, 0), CRAWL_WALK_DONE);
    unsigned long m0, m1;
    stats(NULL, &m0, NULL);
    assert_int_equal(walk(count, &safe_frames, CRAWL_WALK_SIGNAL_SAFE), CRAWL_WALK_DONE);
    stats(NULL, &m1, NULL);
    safe_misses = m1 - m0;
    __asm__ volatile("" ::: "memory");   /* not a tail call: keep this frame */
}

static void test_late_loaded_rules_are_not_used_signal_safe(void **state)
{
    (void)state;
    assert_int_equal(attach(), 0);
    /* the same walk from this program's own code ... */
    walk_twice();
    unsigned long direct_misses = safe_misses;
    unsigned direct_frames = safe_frames;
    assert_int_equal(normal_frames, direct_frames);
    /* ... and with one frame of the plugin loaded before libcrawl between */
    plugin_call(walk_twice);
    print_message("signal-safe misses: direct %lu, through the plugin %lu\n", direct_misses,
                  safe_misses);
    assert_int_equal(safe_frames, direct_frames + 1);
    assert_int_equal(normal_frames, safe_frames);
    /* the plugin's frame is handed to libunwind, not to its cached rule */
    assert_int_equal(safe_misses, direct_misses + 1);
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
