/* A profiler's view of a host built without frame pointers (regression
 * test for "fast mode misorders Frames around frameless code").
 *
 *   main -> ... -> profile_round -> host_sort -> qsort (libc) -> c_cmp -> burn
 *
 * host_sort, c_cmp and burn are built -O2 -fomit-frame-pointer
 * (nofp_host.c); c_cmp keeps a Frame "cmp" in its own stack frame and burn
 * is a frameless leaf. SIGPROF at 1 kHz; the handler walks the interrupted
 * context signal-safely into preallocated buffers. For every sample
 * interrupted in burn, the merge rule (docs/design.md) fixes the first three
 * reports: burn, then the Frame "cmp" (it lies in c_cmp's frame), then
 * c_cmp. Counts, not time, decide: a sample either is right or is not. */
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

/* The kernel checks CPU timers at its tick (often 250 Hz), whatever the
 * interval asked for: 400 samples take 1.6 s of CPU per mode there. */
#define SAMPLES_WANTED 400u
#define SAMPLES_MAX 480u    /* room for samples taken while stopping */
#define MAX_WALL_SECONDS 60 /* a bail-out for a starved machine, not a check */



NOINLINE void profile_round(int *v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        v[i] = (int)((i * 37) % n);
    host_sort(v, n);
    __asm__ volatile("" : : "r"(v) : "memory");
}

NOINLINE static void profile_round_64(void)
{
    int v[64];
    profile_round(v, 64);
}

/* Sample host_sort with the given walk flags until SAMPLES_WANTED samples. */
NOINLINE static void profile(unsigned flags)
{
    memset(prof_the_sampler.samples, 0, SAMPLES_MAX * sizeof(prof_sample));
    prof_the_sampler.n = 0;
    prof_the_sampler.flags = flags;
    prof_run(profile_round_64, SAMPLES_WANTED, MAX_WALL_SECONDS);
}

typedef struct tally {
    unsigned samples, in_burn, in_c_cmp, elsewhere;
    unsigned done, failed, aborted;
    unsigned burn_first, frame_second, ccmp_third, ordered; /* among samples in burn */
    unsigned ccmp_present, frame_before_burn, main_reached;
    int first_bad; /* a sample in burn that is not ordered */
} tally;

static tally count(const fn_range *burn_fn, const fn_range *ccmp_fn, const fn_range *main_fn)
{
    tally c = {.first_bad = -1};
    c.samples = prof_the_sampler.n < SAMPLES_MAX ? prof_the_sampler.n : SAMPLES_MAX;
    for (unsigned i = 0; i < c.samples; i++) {
        const prof_sample *s = &prof_the_sampler.samples[i];
        c.done += s->status == CRAWL_WALK_DONE;
        c.failed += s->status == CRAWL_WALK_FAILED;
        c.aborted += s->status == CRAWL_WALK_ABORTED;
        if (fn_has(ccmp_fn, s->pc))
            c.in_c_cmp++;
        if (!fn_has(burn_fn, s->pc)) {
            c.elsewhere += !fn_has(ccmp_fn, s->pc);
            continue;
        }
        c.in_burn++;
        const prof_report *r = s->r;
        int first = s->n > 0 && prof_is_native(&r[0]) && r[0].ip == s->pc;
        int second = s->n > 1 && r[1].kind == CRAWL_CF_FRAME && r[1].type == &nofp_cmp_type;
        int third =
            s->n > 2 && prof_is_native(&r[2]) && fn_has(ccmp_fn, cf_pc(r[2].ip, r[2].flags));
        c.burn_first += first;
        c.frame_second += second;
        c.ccmp_third += third;
        c.ordered += first && second && third;
        if (!(first && second && third) && c.first_bad < 0)
            c.first_bad = (int)i;
        c.ccmp_present += prof_find_fn(s, ccmp_fn, 0) >= 0;
        int b = prof_find_fn(s, burn_fn, 0);
        for (int k = 0; k < b; k++)
            if (s->r[k].kind == CRAWL_CF_FRAME && s->r[k].type == &nofp_cmp_type) {
                c.frame_before_burn++;
                break;
            }
        c.main_reached += prof_find_fn(s, main_fn, 0) >= 0;
    }
    return c;
}

static void check_profile(unsigned flags, const char *mode)
{
    fn_range burn_fn, ccmp_fn, main_fn;
    assert_int_equal(fn_range_of((const void *)burn, "burn", &burn_fn), 0);
    assert_int_equal(fn_range_of((const void *)c_cmp, "c_cmp", &ccmp_fn), 0);
    assert_int_equal(fn_range_of((const void *)main, "main", &main_fn), 0);

    assert_true(crawl_cfi_cache_warm() > 0);
    profile(flags);
    tally c = count(&burn_fn, &ccmp_fn, &main_fn);
    print_message("%s: %u samples: %u in burn, %u in c_cmp, %u elsewhere; status done %u, "
                  "failed %u, aborted %u\n",
                  mode, c.samples, c.in_burn, c.in_c_cmp, c.elsewhere, c.done, c.failed, c.aborted);
    print_message("%s: of %u in burn: burn first %u, Frame \"cmp\" second %u, c_cmp third %u, "
                  "all three in order %u (%.1f%%); c_cmp present %u, [F] cmp before burn %u, "
                  "main reached %u (%.1f%%)\n",
                  mode, c.in_burn, c.burn_first, c.frame_second, c.ccmp_third, c.ordered,
                  c.in_burn ? 100.0 * c.ordered / c.in_burn : 0.0, c.ccmp_present,
                  c.frame_before_burn, c.main_reached,
                  c.in_burn ? 100.0 * c.main_reached / c.in_burn : 0.0);
    if (c.first_bad >= 0)
        prof_dump(&prof_the_sampler.samples[c.first_bad], "first sample in burn out of order");

    /* enough samples to judge, most of them in burn (the workload is burn) */
    assert_true(c.samples >= SAMPLES_WANTED / 2);
    assert_true(c.in_burn * 2 >= c.samples);
    /* >= 95% of samples in burn: burn, [F] cmp, c_cmp */
    if (c.ordered * 100 < c.in_burn * 95)
        fail_msg("%s: only %u of %u samples in burn report burn, Frame \"cmp\", c_cmp in this "
                 "order (want >= 95%%)",
                 mode, c.ordered, c.in_burn);
    if (c.ccmp_present * 100 < c.in_burn * 95)
        fail_msg("%s: c_cmp missing in %u of %u samples in burn", mode, c.in_burn - c.ccmp_present,
                 c.in_burn);
    /* >= 99.5% of all samples: DONE */
    if (c.done * 1000 < c.samples * 995)
        fail_msg("%s: only %u of %u walks DONE (failed %u, aborted %u; want >= 99.5%%)", mode,
                 c.done, c.samples, c.failed, c.aborted);
    if (!(flags & CRAWL_WALK_FAST) && c.main_reached * 100 < c.in_burn * 95)
        fail_msg("%s: only %u of %u samples in burn reach main (want >= 95%%)", mode,
                 c.main_reached, c.in_burn);
}

static void test_fast_signal_safe(void **state)
{
    (void)state;
    check_profile(CRAWL_WALK_FAST | CRAWL_WALK_SIGNAL_SAFE, "fast|signal-safe");
}

static void test_precise_signal_safe(void **state)
{
    (void)state;
    if (!crawl_walk_precise_available())
        skip();
    check_profile(CRAWL_WALK_SIGNAL_SAFE, "precise|signal-safe");
}

int main(void)
{
    crawl_thread_attach();
    prof_the_sampler.max = SAMPLES_MAX;
    prof_the_sampler.samples = mmap(NULL, SAMPLES_MAX * sizeof(prof_sample), PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (prof_the_sampler.samples == MAP_FAILED)
        return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fast_signal_safe),
        cmocka_unit_test(test_precise_signal_safe),
    };
    int rc = cmocka_run_group_tests_name("order-nofp", tests, NULL, NULL);
    munmap(prof_the_sampler.samples, SAMPLES_MAX * sizeof(prof_sample));
    return rc;
}
