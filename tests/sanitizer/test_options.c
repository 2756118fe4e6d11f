/* Sanitizer options: defaults from crawl_default_options(), then
 * CRAWL_OPTIONS (set by ctest for this program), then the API; bad strings
 * warn once and change nothing. */
#define _GNU_SOURCE
#include "../support.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* The program's own defaults (the weak hook). */
const char *crawl_default_options(void)
{
    return "redzone=64:quarantine_size_mb=8:malloc_context_size=12";
}

static char opts[2048];
static const char *current(void)
{
    crawl_sanitizer_get_options(opts, sizeof opts);
    return opts;
}

/* Run set_options with stderr captured. */
static int set_quietly(const char *s, char *err, size_t len)
{
    FILE *tmp = tmpfile();
    int saved = dup(STDERR_FILENO);
    dup2(fileno(tmp), STDERR_FILENO);
    int rc = crawl_sanitizer_set_options(s);
    dup2(saved, STDERR_FILENO);
    close(saved);
    rewind(tmp);
    size_t n = fread(err, 1, len - 1, tmp);
    err[n] = '\0';
    fclose(tmp);
    return rc;
}

static void test_sources_in_order(void **state)
{
    (void)state;
    /* CRAWL_OPTIONS=malloc_context_size=5:halt_on_error=0 overrides the program's 12 */
    assert_string_equal(current(), "halt_on_error=0:log_path=stderr:malloc_context_size=5:"
                                   "quarantine_size_mb=8:redzone=64:fast_unwind_on_malloc=0:"
                                   "depot_budget_mb=256:gc_stress=0:gc_stress_transitions=0:"
                                   "gc_verify=0:"
                                   "gc_poison_collected=0:gc_alloc_stacks=0:gc_quarantine_mb=16:"
                                   "gpa_sample_rate=5000:gpa_max_allocations=16:"
                                   "gpa_perfectly_right_align=0:gpa_recoverable=0:"
                                   "gpa_install_signal_handlers=1:"
                                   "heap_profile=0:heap_profile_path=:heap_profile_signal=0:heap_stack_min_size=0:"
                                   "heap_sample_bytes=0:heap_stack_fast=0:heap_profile_mmap=0:leak_check=0:"
                                   "leak_check_exitcode=23:leak_check_reachable=0:perf_map=0");
    assert_int_equal(crawl_sanitizer_set_options("redzone=128::fast_unwind_on_malloc=1:"), 0);
    assert_non_null(strstr(current(), "redzone=128:fast_unwind_on_malloc=1"));
}

/* what heap_profile_signal's warning says it takes (the walk signal
 * SIGRTMIN+3, 37 in glibc) */
#define SIGNALS "1 .. 64 but 4-9, 11, 19, 27, 31, 32, 33 and crawl's walk signal, 37"

static void test_bad_strings(void **state)
{
    (void)state;
    static const struct {
        const char *s, *warning;
    } cases[] = {
        {"bogus=1", "crawl: unknown option 'bogus' in sanitizer options; none applied\n"},
        {"redzone=17", "crawl: bad value in 'redzone=17' in sanitizer options (takes a power of 2, 16 .. 2048); none applied\n"},
        {"redzone=4096", "crawl: bad value in 'redzone=4096' in sanitizer options (takes a power of 2, 16 .. 2048); none applied\n"},
        {"halt_on_error=yes", "crawl: bad value in 'halt_on_error=yes' in sanitizer options (takes 0 or 1); none applied\n"},
        {"halt_on_error", "crawl: malformed item (expected key=value) 'halt_on_error' in sanitizer options; none applied\n"},
        {"=3", "crawl: malformed item (expected key=value) '=3' in sanitizer options; none applied\n"},
        {"malloc_context_size=0", "crawl: bad value in 'malloc_context_size=0' in sanitizer options (takes 1 .. 256); none applied\n"},
        {"depot_budget_mb=12x", "crawl: bad value in 'depot_budget_mb=12x' in sanitizer options (takes 1 .. 65536, in MiB); none applied\n"},
        {"redzone= +32", "crawl: bad value in 'redzone= +32' in sanitizer options (takes a power of 2, 16 .. 2048); none applied\n"},
        {"halt_on_error=-0", "crawl: bad value in 'halt_on_error=-0' in sanitizer options (takes 0 or 1); none applied\n"},
        /* signals no handler can catch (accepted, then refused at start, before) */
        {"heap_profile_signal=9", "crawl: bad value in 'heap_profile_signal=9' in sanitizer options (takes " SIGNALS "); none applied\n"},
        /* a fault's signal: a crash wrote the profile and faulted again, for ever */
        {"heap_profile_signal=11", "crawl: bad value in 'heap_profile_signal=11' in sanitizer options (takes " SIGNALS "); none applied\n"},
        {"heap_profile_signal=8", "crawl: bad value in 'heap_profile_signal=8' in sanitizer options (takes " SIGNALS "); none applied\n"},
        {"heap_profile_signal=32", "crawl: bad value in 'heap_profile_signal=32' in sanitizer options (takes " SIGNALS "); none applied\n"},
        {"heap_profile_signal=33", "crawl: bad value in 'heap_profile_signal=33' in sanitizer options (takes " SIGNALS "); none applied\n"},
        /* crawl's own walk signal, SIGRTMIN+3 (37 in glibc) by default */
        {"heap_profile_signal=37", "crawl: bad value in 'heap_profile_signal=37' in sanitizer options (takes " SIGNALS "); none applied\n"},
        {"heap_profile=1:heap_profile_signal=19", "crawl: bad value in 'heap_profile_signal=19' in sanitizer options (takes " SIGNALS "); none applied\n"},
        /* a round 1 GiB is past the range: the line says the range */
        {"heap_sample_bytes=1073741824", "crawl: bad value in 'heap_sample_bytes=1073741824' in sanitizer options (takes 0 .. 1000000000); none applied\n"},
        /* a good item before a bad one is not applied either */
        {"redzone=32:nope=1", "crawl: unknown option 'nope' in sanitizer options; none applied\n"},
    };
    char before[2048], err[512];
    snprintf(before, sizeof before, "%s", current());
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        assert_int_equal(set_quietly(cases[i].s, err, sizeof err), -EINVAL);
        assert_string_equal(err, cases[i].warning);
        assert_string_equal(current(), before);                 /* nothing changed */
    }
    /* a path as long as the field: the item shown is cut at 200 bytes */
    char item[600];
    memcpy(item, "log_path=", 9);
    memset(item + 9, 'a', sizeof item - 10);
    item[sizeof item - 1] = '\0';
    assert_int_equal(set_quietly(item, err, sizeof err), -EINVAL);
    char want[512];
    snprintf(want, sizeof want,
             "crawl: bad value in '%.200s' in sanitizer options (takes a path shorter than 512 bytes); "
             "none applied\n",
             item);
    assert_string_equal(err, want);
    assert_int_equal(crawl_sanitizer_set_options(NULL), -EINVAL);
}

/* One option's value, for libraries that cache them (crawl-boehm). */
static void test_get_option_and_serial(void **state)
{
    (void)state;
    long v = -1;
    unsigned long serial = crawl_sanitizer_options_serial();
    assert_int_equal(crawl_sanitizer_set_options("gc_stress=7:gc_quarantine_mb=3"), 0);
    assert_true(crawl_sanitizer_options_serial() != serial);
    assert_int_equal(crawl_sanitizer_get_option("gc_stress", &v), 0);
    assert_int_equal(v, 7);
    assert_int_equal(crawl_sanitizer_get_option("gc_quarantine_mb", &v), 0);
    assert_int_equal(v, 3);                                  /* as given, not in bytes */
    assert_int_equal(crawl_sanitizer_get_option("redzone", &v), 0);
    assert_true(v >= 16);
    assert_int_equal(crawl_sanitizer_get_option("log_path", &v), -ENOENT);
    assert_int_equal(crawl_sanitizer_get_option("no_such", &v), -ENOENT);
    assert_int_equal(crawl_sanitizer_get_option(NULL, &v), -EINVAL);
    serial = crawl_sanitizer_options_serial();
    char err[512];
    assert_int_equal(set_quietly("gc_stress=x", err, sizeof err), -EINVAL);
    assert_int_equal(crawl_sanitizer_options_serial(), serial);   /* nothing applied */
    assert_int_equal(crawl_sanitizer_set_options("gc_stress=0:gc_quarantine_mb=16"), 0);
}

static void test_help(void **state)
{
    (void)state;
    char err[8192];
    assert_int_equal(set_quietly("help=1", err, sizeof err), 0);
    assert_non_null(strstr(err, "crawl sanitizer options (key=value, separated by ':'):"));
    assert_non_null(strstr(err, "  halt_on_error=1 "));
    assert_non_null(strstr(err, "  depot_budget_mb=256 "));
    /* every option get_options prints is listed, as "  key=" at a line start */
    char all[2048];
    snprintf(all, sizeof all, "%s", current());
    for (char *save = NULL, *item = strtok_r(all, ":", &save); item;
         item = strtok_r(NULL, ":", &save)) {
        char want[80];
        snprintf(want, sizeof want, "\n  %.*s=", (int)strcspn(item, "="), item);
        if (!strstr(err, want))
            fail_msg("help=1 does not list %s", want + 3);
    }
}

/* malloc_context_size bounds the stacks kept per chunk. */
static char report[1 << 16];
static void keep(const char *text, void *ctx)
{
    (void)ctx;
    snprintf(report, sizeof report, "%s", text);
}

NOINLINE static void *deep(int n)
{
    void *p = n ? deep(n - 1) : crawl_heap_malloc(8);
    __asm__ volatile("" ::: "memory");
    return p;
}

static void test_context_size_applies(void **state)
{
    (void)state;
    assert_int_equal(crawl_sanitizer_set_options("malloc_context_size=3:log_path=/dev/null"), 0);
    crawl_set_report_callback(keep, NULL);
    char *p = deep(10);
    crawl_heap_check(p + 8, 1, 0);
    const char *alloc = strstr(report, "allocated by thread T0 here:\n");
    assert_non_null(alloc);
    assert_non_null(strstr(alloc, "    #2 0x"));
    assert_null(strstr(alloc, "    #3 "));                     /* three frames kept */
    crawl_heap_free(p);
}

/* crawl_sanitizer_on_options_change: each listener called once after each
 * successful change (never after a refused one), registering twice is
 * once, also when two threads register the same one at once, NULL is
 * refused, and the ninth listener finds no room. Last: it fills the
 * table. */
static atomic_int calls[9];
#define LISTENER(k)                                                                            \
    static void listener##k(void) { atomic_fetch_add(&calls[k], 1); }
LISTENER(0) LISTENER(1) LISTENER(2) LISTENER(3) LISTENER(4) LISTENER(5) LISTENER(6)
LISTENER(7) LISTENER(8)
static void (*const listeners[9])(void) = {listener0, listener1, listener2, listener3, listener4,
                                           listener5, listener6, listener7, listener8};

static void *register_first(void *arg)
{
    (void)arg;
    return (void *)(intptr_t)crawl_sanitizer_on_options_change(listener0);
}

static void test_option_listeners(void **state)
{
    (void)state;
    assert_int_equal(crawl_sanitizer_on_options_change(NULL), -EINVAL);
    pthread_t t[4];
    for (int i = 0; i < 4; i++)
        assert_int_equal(pthread_create(&t[i], NULL, register_first, NULL), 0);
    for (int i = 0; i < 4; i++) {
        void *rc;
        assert_int_equal(pthread_join(t[i], &rc), 0);
        assert_int_equal((intptr_t)rc, 0);
    }
    for (int k = 1; k < 8; k++) {
        assert_int_equal(crawl_sanitizer_on_options_change(listeners[k]), 0);
        assert_int_equal(crawl_sanitizer_on_options_change(listeners[k]), 0);
    }
    assert_int_equal(crawl_sanitizer_on_options_change(listeners[8]), -ENOSPC);
    assert_int_equal(crawl_sanitizer_set_options("redzone=32"), 0);
    assert_int_equal(crawl_sanitizer_set_options("redzone=33"), -EINVAL);
    for (int k = 0; k < 8; k++)
        assert_int_equal(atomic_load(&calls[k]), 1);
    assert_int_equal(atomic_load(&calls[8]), 0);
}

int main(void)
{
    crawl_thread_attach();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sources_in_order),
        cmocka_unit_test(test_bad_strings),
        cmocka_unit_test(test_help),
        cmocka_unit_test(test_get_option_and_serial),
        cmocka_unit_test(test_context_size_applies),
        cmocka_unit_test(test_option_listeners),
    };
    return cmocka_run_group_tests_name("sanitizer-options", tests, NULL, NULL);
}
