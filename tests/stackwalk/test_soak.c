/* Signal-safe precise walks on every thread while another thread loads and
 * unloads code (regression test for "signal-safe precise walks deadlock
 * across threads").
 *
 * Three workers push Frames in nested calls (some through libc's qsort and
 * the frame-pointer-less host of nofp_host.c) and work; a fourth thread
 * dlopen()s, calls and dlclose()s the test plugins in a loop. The main
 * thread sends SIGPROF to all four at about 2 kHz (tgkill fan-out: real
 * time, not the kernel's CPU-timer tick) and watches their progress
 * counters: one that stalls for STALL_SECONDS means a deadlock, reported
 * by name, and the process aborts (the CTest TIMEOUT is a second net).
 *
 * Every handler walks its own interrupted context with
 * CRAWL_WALK_SIGNAL_SAFE (precise) and checks, still in the handler, the
 * order docs/design.md promises: the Frames reported are the thread's chain in
 * order, native sps strictly increase, and each Frame comes right before
 * the native frame that contains it. Signal-safe walks take no lock and
 * never call libunwind: crawl_cfi_cache_stats' fallback count must not
 * move while only signal handlers walk.
 *
 * CRAWL_SOAK_SECONDS sets the duration (default 5; the acceptance
 * run is 60). */
#define _GNU_SOURCE
#include "../support.h"

#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <ucontext.h>
#include <unistd.h>

#include "nofp_host.h"
#include "prof_support.h"

#define NWORKERS 3
#define NTHREADS (NWORKERS + 1) /* the workers and the loader */
#define STALL_SECONDS 10
#define TICK_NSEC 500000L /* 2 kHz per thread */

typedef struct thread_state {
    char name[16];
    pid_t tid;
    pthread_t thread;
    atomic_int ready, exited;
    atomic_ulong progress; /* loop iterations */
    atomic_int in_handler;
    /* written by this thread's handler only */
    unsigned long samples, done, failed, aborted, violations, with_gap, truncated, with_frames;
    prof_sample cur;       /* the handler's scratch */
    prof_sample first_bad; /* the first sample out of order */
    const crawl_frame *first_bad_top;
    const char *first_bad_why;
    int have_bad;
} thread_state;

static thread_state ts[NTHREADS];
static __thread thread_state *self;
static atomic_int stop;

/* ---- the order a sample must keep ------------------------------------------------ */

/* NULL if s keeps the merge rule for a thread whose newest Frame is top;
 * else what is wrong. Async-signal-safe (reads the live chain: the
 * interrupted frames are still there). */
static const char *order_violation(const prof_sample *s, const crawl_frame *top)
{
    const crawl_frame *expect = top;
    uintptr_t last_sp = 0;
    int gap = 0;
    for (unsigned i = 0; i < s->n; i++)
        gap |= (s->r[i].flags & CRAWL_CF_AFTER_GAP) != 0;
    for (unsigned i = 0; i < s->n; i++) {
        const prof_report *r = &s->r[i];
        if (prof_is_native(r)) {
            if (last_sp && r->sp <= last_sp)
                return "native sp does not increase";
            last_sp = r->sp;
            continue;
        }
        if (r->kind != CRAWL_CF_FRAME)
            continue;
        if (r->frame != expect)
            return "Frames not reported in chain order";
        expect = expect->next;
        uintptr_t f = (uintptr_t)r->frame;
        if (last_sp && f < last_sp)
            return "Frame reported after a newer native frame";
        if (gap)
            continue; /* Frames of skipped frames come before the resumed one */
        /* B: the next native frame must contain f: sp_B <= f < cfa_B = sp_C */
        int b = -1, c = -1;
        for (unsigned k = i + 1; k < s->n && c < 0; k++)
            if (prof_is_native(&s->r[k])) {
                if (b < 0)
                    b = (int)k;
                else
                    c = (int)k;
            }
        if (b >= 0 && f < s->r[b].sp)
            return "Frame reported after the native frame that contains it";
        if (c >= 0 && f >= s->r[c].sp)
            return "Frame reported before a native frame newer than it";
    }
    if (s->status == CRAWL_WALK_DONE && !s->truncated && expect)
        return "a Frame of the chain was not reported";
    return NULL;
}

static void on_sigprof(int sig, siginfo_t *si, void *ucv)
{
    (void)sig, (void)si;
    thread_state *t = self;
    if (!t)
        return;
    int saved_errno = errno;
    atomic_store_explicit(&t->in_handler, 1, memory_order_relaxed);
    const ucontext_t *uc = ucv;
    prof_sample *s = &t->cur;
    s->pc = (uintptr_t)uc->uc_mcontext.gregs[REG_RIP];
    s->sp = (uintptr_t)uc->uc_mcontext.gregs[REG_RSP];
    s->n = s->truncated = 0;
    const crawl_frame *top = crawl_frame_top();
    s->status = crawl_walk_context(uc, prof_record, s, CRAWL_WALK_SIGNAL_SAFE);
    t->samples++;
    t->done += s->status == CRAWL_WALK_DONE;
    t->failed += s->status == CRAWL_WALK_FAILED;
    t->aborted += s->status == CRAWL_WALK_ABORTED;
    t->truncated += s->truncated != 0;
    int gap = 0, frames = 0;
    for (unsigned i = 0; i < s->n; i++) {
        gap |= (s->r[i].flags & CRAWL_CF_AFTER_GAP) != 0;
        frames |= s->r[i].kind == CRAWL_CF_FRAME;
    }
    t->with_gap += gap;
    t->with_frames += frames;
    const char *why = order_violation(s, top);
    if (why) {
        t->violations++;
        if (!t->have_bad) {
            t->first_bad = *s;
            t->first_bad_top = top;
            t->first_bad_why = why;
            t->have_bad = 1;
        }
    }
    atomic_store_explicit(&t->in_handler, 0, memory_order_relaxed);
    errno = saved_errno;
}

/* ---- the workers -------------------------------------------------------------------- */

typedef struct depth_frame {
    crawl_frame frame;
    unsigned depth;
} depth_frame;

static const crawl_frame_type nest_type = {.name = "nest"};
static const crawl_frame_type loader_type = {.name = "loader"};

static _Thread_local volatile unsigned long sink;   /* per thread: no race */

NOINLINE void soak_work(unsigned n)
{
    unsigned long x = n;
    for (unsigned i = 0; i < n; i++) {
        x = x * 2862933555777941757ul + i;
        __asm__ volatile("" : "+r"(x));
    }
    sink += x;
}

NOINLINE void soak_nest(unsigned depth, unsigned seed)
{
    depth_frame f = {.depth = depth};
    crawl_frame_push(&f.frame, &nest_type);
    if (depth == 0) {
        soak_work(500 + seed % 1500);
    } else if (seed % 5 == 0) {
        int v[16];
        for (int i = 0; i < 16; i++)
            v[i] = (int)((seed + (unsigned)i * 7) % 16);
        crawl_transition t; /* "VM code" calling native code */
        crawl_transition_push(&t, NULL);
        host_sort(v, 16); /* qsort -> c_cmp (a Frame) -> burn */
        crawl_frame_pop(&t.frame);
        soak_nest(depth - 1, seed / 5 + 1);
    } else {
        soak_work(seed % 300);
        soak_nest(depth - 1, seed * 1103515245u + 12345u);
    }
    crawl_frame_pop(&f.frame);
    __asm__ volatile("" : : "r"(&f) : "memory");
}

static void enter(thread_state *t)
{
    crawl_thread_attach();
    t->tid = gettid();
    self = t;
    atomic_store(&t->ready, 1);
}

static void *worker(void *arg)
{
    thread_state *t = arg;
    enter(t);
    unsigned seed = (unsigned)(t - ts) * 7919u + 1;
    while (!atomic_load_explicit(&stop, memory_order_relaxed)) {
        seed = seed * 1103515245u + 12345u;
        soak_nest(1 + (seed >> 16) % 12, seed);
        atomic_fetch_add_explicit(&t->progress, 1, memory_order_relaxed);
    }
    self = NULL; /* a late signal finds nothing to walk */
    atomic_store(&t->exited, 1);
    return NULL;
}

/* ---- the loader ------------------------------------------------------------------- */

NOINLINE void soak_loader_callback(void)
{
    depth_frame f = {.depth = 0};
    crawl_frame_push(&f.frame, &loader_type);
    soak_work(2000);
    crawl_frame_pop(&f.frame);
    __asm__ volatile("" : : "r"(&f) : "memory");
}

static void *loader(void *arg)
{
    thread_state *t = arg;
    enter(t);
    for (unsigned round = 0; !atomic_load_explicit(&stop, memory_order_relaxed); round++) {
        void *h = dlopen(round % 2 ? PLUGIN_B : PLUGIN_A, RTLD_NOW | RTLD_LOCAL);
        if (!h) {
            fprintf(stderr, "soak: dlopen: %s\n", dlerror());
            abort();
        }
        void (*call)(void (*)(void)) = (void (*)(void (*)(void)))dlsym(h, "plugin_call");
        crawl_transition tr; /* a walk that cannot unwind the plugin resumes here */
        crawl_transition_push(&tr, NULL);
        if (call)
            call(soak_loader_callback);
        crawl_frame_pop(&tr.frame);
        dlclose(h);
        atomic_fetch_add_explicit(&t->progress, 1, memory_order_relaxed);
    }
    self = NULL;
    atomic_store(&t->exited, 1);
    return NULL;
}

/* ---- the main thread: fan-out ticker and watchdog ------------------------------------ */

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static void stalled(const thread_state *t, double seconds, double since)
{
    fprintf(stderr,
            "soak: DEADLOCK? thread %s (tid %d) made no progress for %.1f s, since %.1f s into "
            "the soak (progress %lu, %s its SIGPROF handler's walk, %lu walks finished)\n",
            t->name, (int)t->tid, seconds, since, atomic_load(&t->progress),
            atomic_load(&t->in_handler) ? "inside" : "not in", t->samples);
    signal(SIGABRT, SIG_DFL); /* not cmocka's handler: it would wait for the threads */
    abort();
}

/* Stop with a message if a thread that has not exited made no progress
 * for STALL_SECONDS. */
static void watch(unsigned long *last, double *last_change, double start, double t)
{
    for (int i = 0; i < NTHREADS; i++) {
        unsigned long p = atomic_load(&ts[i].progress);
        if (p != last[i]) {
            last[i] = p;
            last_change[i] = t;
        } else if (!atomic_load(&ts[i].exited) && t - last_change[i] >= STALL_SECONDS) {
            stalled(&ts[i], t - last_change[i], last_change[i] - start);
        }
    }
}

static unsigned soak_seconds(void)
{
    const char *e = getenv("CRAWL_SOAK_SECONDS");
    long v = e ? strtol(e, NULL, 10) : 0;
    return v > 0 ? (unsigned)v : 5;
}

static void test_soak(void **state)
{
    (void)state;
    if (!crawl_walk_precise_available())
        skip();
    unsigned seconds = soak_seconds();
    nofp_burn_iterations = 300;
    assert_true(crawl_cfi_cache_warm() > 0);
    unsigned long f0, f1, h0, h1, m0, m1;
    crawl_cfi_cache_stats(&h0, &m0, &f0);

    struct sigaction sa = {.sa_sigaction = on_sigprof, .sa_flags = SA_SIGINFO | SA_RESTART}, old;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGPROF, &sa, &old);
    for (int i = 0; i < NTHREADS; i++) {
        if (i < NWORKERS)
            snprintf(ts[i].name, sizeof ts[i].name, "worker-%d", i);
        else
            snprintf(ts[i].name, sizeof ts[i].name, "loader");
        assert_int_equal(
            pthread_create(&ts[i].thread, NULL, i < NWORKERS ? worker : loader, &ts[i]), 0);
    }
    for (int i = 0; i < NTHREADS; i++)
        while (!atomic_load(&ts[i].ready))
            usleep(1000);

    unsigned long last[NTHREADS];
    double last_change[NTHREADS], start = now(), t = start, next_check = start;
    for (int i = 0; i < NTHREADS; i++) {
        last[i] = atomic_load(&ts[i].progress);
        last_change[i] = start;
    }
    unsigned long ticks = 0;
    pid_t pid = getpid();
    while ((t = now()) - start < seconds) {
        for (int i = 0; i < NTHREADS; i++)
            tgkill(pid, ts[i].tid, SIGPROF);
        ticks++;
        struct timespec d = {0, TICK_NSEC};
        nanosleep(&d, NULL);
        if (t >= next_check) {
            next_check = t + 0.1;
            watch(last, last_change, start, t);
        }
    }
    atomic_store(&stop, 1);
    for (int i = 0; i < NTHREADS; i++) {
        while (!atomic_load(&ts[i].exited)) {
            watch(last, last_change, start, now());
            usleep(1000);
        }
        pthread_join(ts[i].thread, NULL);
    }
    sigaction(SIGPROF, &old, NULL);
    crawl_cfi_cache_stats(&h1, &m1, &f1);

    unsigned long samples = 0, done = 0, failed = 0, aborted = 0, violations = 0;
    for (int i = 0; i < NTHREADS; i++) {
        thread_state *s = &ts[i];
        print_message("%-9s %7lu iterations, %6lu samples: done %lu, failed %lu, aborted %lu; "
                      "order violations %lu; with Frames %lu, after a gap %lu, truncated %lu\n",
                      s->name, atomic_load(&s->progress), s->samples, s->done, s->failed,
                      s->aborted, s->violations, s->with_frames, s->with_gap, s->truncated);
        samples += s->samples;
        done += s->done;
        failed += s->failed;
        aborted += s->aborted;
        violations += s->violations;
    }
    print_message("soak: %u s, %lu ticks sent, %lu samples (done %lu, failed %lu, aborted %lu), "
                  "%lu order violations; cfi cache: hits +%lu, misses +%lu, fallbacks +%lu\n",
                  seconds, ticks, samples, done, failed, aborted, violations, h1 - h0, m1 - m0,
                  f1 - f0);
    for (int i = 0; i < NTHREADS; i++)
        if (ts[i].have_bad) {
            char title[160];
            snprintf(title, sizeof title, "%.15s: first sample out of order: %.100s", ts[i].name,
                     ts[i].first_bad_why);
            prof_dump(&ts[i].first_bad, title);
            fprintf(stderr, "   (the chain's top Frame was %p)\n", (void *)ts[i].first_bad_top);
        }

    for (int i = 0; i < NTHREADS; i++)
        if (ts[i].samples < 50)
            fail_msg("%s took only %lu samples: the soak tested nothing", ts[i].name,
                     ts[i].samples);
    if (violations)
        fail_msg("%lu of %lu samples broke the merge order", violations, samples);
    if (f1 != f0)
        fail_msg("signal-safe walks used libunwind %lu times (must be never)", f1 - f0);
}

int main(void)
{
    crawl_thread_attach();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_soak),
    };
    return cmocka_run_group_tests_name("soak", tests, NULL, NULL);
}
