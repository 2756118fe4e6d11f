/* The CFI cache serves signal-safe walks of code no normal-context walk has
 * visited (regression test for "hits 0, misses 1793, fallbacks 1793 after
 * crawl_cfi_cache_warm()").
 *
 * crawl_cfi_cache_warm() reads every loaded module's CFI ahead; a profiler
 * then walks, from a SIGPROF handler only, code that was never walked in
 * normal context: the frame-pointer-less host of nofp_host.c under qsort.
 * Signal-safe walks must be served by those tables (hits go up) and never
 * by libunwind (fallbacks stay put), and must still reach main. This test
 * runs in its own process so no other test's walk fills the cache first. */
#define _GNU_SOURCE
#include "../support.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/time.h>
#include <time.h>
#include <ucontext.h>

#include "nofp_host.h"
#include "prof_support.h"

int main(void);

/* CPU timers fire at the kernel's tick (often 250 Hz): 300 samples take
 * about 1.2 s of CPU there. */
#define SAMPLES_WANTED 300u
#define SAMPLES_MAX 360u
#define MAX_WALL_SECONDS 60 /* a bail-out for a starved machine, not a check */



NOINLINE void sigonly_round(int *v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        v[i] = (int)((i * 29) % n);
    host_sort(v, n);
    __asm__ volatile("" : : "r"(v) : "memory");
}

NOINLINE static void sigonly_round_64(void)
{
    int v[64];
    sigonly_round(v, 64);
}

static void test_signal_safe_walks_use_warmed_rules(void **state)
{
    (void)state;
    if (!crawl_walk_precise_available())
        skip();
    fn_range main_fn;
    assert_int_equal(fn_range_of((const void *)main, "main", &main_fn), 0);

    int modules = crawl_cfi_cache_warm();
    assert_true(modules > 0);
    unsigned long h0, m0, f0, h1, m1, f1;
    crawl_cfi_cache_stats(&h0, &m0, &f0);

    prof_run(sigonly_round_64, SAMPLES_WANTED, MAX_WALL_SECONDS);
    crawl_cfi_cache_stats(&h1, &m1, &f1);

    unsigned n = prof_the_sampler.n < SAMPLES_MAX ? prof_the_sampler.n : SAMPLES_MAX;
    unsigned done = 0, failed = 0, reached = 0, gaps = 0;
    int first_short = -1;
    for (unsigned i = 0; i < n; i++) {
        const prof_sample *s = &prof_the_sampler.samples[i];
        done += s->status == CRAWL_WALK_DONE;
        failed += s->status == CRAWL_WALK_FAILED;
        int m = prof_find_fn(s, &main_fn, 0);
        reached += m >= 0;
        if (m < 0 && first_short < 0)
            first_short = (int)i;
        for (unsigned k = 0; k < s->n; k++)
            if (s->r[k].flags & CRAWL_CF_AFTER_GAP) {
                gaps++;
                break;
            }
    }
    print_message("warm: %d modules; %u signal-safe samples: done %u, failed %u, reached main %u "
                  "(%.1f%%), with a gap %u\n",
                  modules, n, done, failed, reached, n ? 100.0 * reached / n : 0.0, gaps);
    print_message("cfi cache during the profile: hits +%lu, misses +%lu, fallbacks +%lu\n", h1 - h0,
                  m1 - m0, f1 - f0);
    if (first_short >= 0)
        prof_dump(&prof_the_sampler.samples[first_short], "first sample that does not reach main");

    assert_true(n >= SAMPLES_WANTED / 2);
    if (h1 <= h0)
        fail_msg("signal-safe walks got no CFI cache hit (hits +%lu, misses +%lu, fallbacks +%lu)",
                 h1 - h0, m1 - m0, f1 - f0);
    if (f1 != f0)
        fail_msg("signal-safe walks used libunwind %lu times (must be never)", f1 - f0);
    if (reached * 100 < n * 95)
        fail_msg("only %u of %u signal-safe walks reach main (want >= 95%%)", reached, n);
    if (done * 1000 < n * 995)
        fail_msg("only %u of %u signal-safe walks DONE (want >= 99.5%%)", done, n);
}

int main(void)
{
    crawl_thread_attach();
    prof_the_sampler.max = SAMPLES_MAX;
    prof_the_sampler.flags = CRAWL_WALK_SIGNAL_SAFE;
    prof_the_sampler.samples = mmap(NULL, SAMPLES_MAX * sizeof(prof_sample), PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (prof_the_sampler.samples == MAP_FAILED)
        return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_signal_safe_walks_use_warmed_rules),
    };
    int rc = cmocka_run_group_tests_name("cfi-signal", tests, NULL, NULL);
    munmap(prof_the_sampler.samples, SAMPLES_MAX * sizeof(prof_sample));
    return rc;
}
