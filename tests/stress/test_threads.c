/* Thread stress: everything crawl shares between threads, at once, bounded
 * in time (about 2 s) with no timing assertion. Built in every preset;
 * the tsan preset runs it under ThreadSanitizer.
 *   - walkers: fast and precise walks through their own Frames, checking
 *     the Frames come back in order
 *   - depot: threads intern the same traces and must get the same ids
 *   - code ranges: added and removed while walks look them up
 *   - loader: dlopen/dlclose of a plugin (module snapshots rebuilt and
 *     retired under walks, its CFI compiled)
 *   - registry: threads attach, walk and detach while the CFI statistics
 *     read every thread's counters */
#define _GNU_SOURCE
#include "../support.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* CRAWL_STRESS_SECONDS lengthens a run (a soak); 2 s by default. */
static long run_ns(void)
{
    const char *e = getenv("CRAWL_STRESS_SECONDS");
    long s = e ? strtol(e, NULL, 10) : 0;
    return s > 0 ? s * 1000000000L : 2000000000L;
}

static atomic_int stop;
static atomic_long problems;

static void problem(const char *what)
{
    if (atomic_fetch_add(&problems, 1) < 5)
        fprintf(stderr, "stress: %s\n", what);
}

/* ---- walkers ---------------------------------------------------------------- */

typedef struct seen {
    crawl_frame *frames[64];
    unsigned n;
} seen;

static crawl_action collect(const crawl_cf *cf, void *ctx)
{
    seen *s = ctx;
    if (crawl_cf_kind(cf) == CRAWL_CF_FRAME && s->n < 64)
        s->frames[s->n++] = crawl_cf_frame(cf);
    return CRAWL_CONTINUE;
}

static const crawl_frame_type stress_type = {.name = "stress"};

NOINLINE static void nest(unsigned depth, unsigned flags)
{
    crawl_frame f;
    crawl_frame_push(&f, &stress_type);
    if (depth) {
        nest(depth - 1, flags);
    } else {
        seen s = {.n = 0};
        crawl_walk_status st = crawl_walk(collect, &s, flags);
        if (st != CRAWL_WALK_DONE)
            problem("a walk did not finish");
        /* newest first: each Frame's next is the one after it */
        for (unsigned i = 0; i + 1 < s.n; i++)
            if (s.frames[i]->next != s.frames[i + 1])
                problem("Frames out of order");
        if (s.n < 5)
            problem("Frames missing");
    }
    crawl_frame_pop(&f);
}

static void *walker(void *arg)
{
    unsigned flags = (unsigned)(uintptr_t)arg;
    for (unsigned i = 0; !atomic_load(&stop); i++)
        nest(4 + i % 8, flags);
    return NULL;
}

/* ---- the depot ---------------------------------------------------------------- */

static uint32_t expected_ids[16];

static void *depot_user(void *arg)
{
    (void)arg;
    uintptr_t words[4];
    for (unsigned i = 0; !atomic_load(&stop); i++) {
        unsigned k = i % 16;
        words[0] = 0x1000 + k, words[1] = 0x2000 + k, words[2] = 0x3000, words[3] = 0x4000 + k;
        uint32_t id = crawl_depot_put(words, 4);
        if (id != expected_ids[k])
            problem("the depot gave one trace two ids");
        const uintptr_t *got;
        if (crawl_depot_get(id, &got) != 4 || memcmp(got, words, sizeof words) != 0)
            problem("the depot returned another trace");
        if (i % 64 == 0 && crawl_depot_capture(16, 0) == 0)
            problem("a capture failed");
    }
    return NULL;
}

/* ---- code ranges ------------------------------------------------------------- */

static void *range_churn(void *arg)
{
    (void)arg;
    crawl_unwind_rule fp = {.kind = CRAWL_UNWIND_FRAME_POINTER};
    for (unsigned i = 0; !atomic_load(&stop); i++) {
        uintptr_t base = 0x500000 + (uintptr_t)(i % 16) * 0x1000;
        if (crawl_code_range_add(base, base + 0x800, (void *)base, &fp, "stress-jit") == 0) {
            crawl_code_range range;
            if (!crawl_code_range_find(base + 0x10, &range) || range.start != base)
                problem("a code range vanished before its removal");
            crawl_code_range_remove(base);
        }
    }
    return NULL;
}

/* ---- the loader ---------------------------------------------------------------- */

static void *loader(void *arg)
{
    (void)arg;
    while (!atomic_load(&stop)) {
        void *h = dlopen(PLUGIN_A, RTLD_NOW | RTLD_LOCAL);
        if (!h) {
            problem("dlopen failed");
            break;
        }
        void (*call)(void (*)(void)) = (void (*)(void (*)(void)))dlsym(h, "plugin_call");
        if (call)
            call((void (*)(void))crawl_cfi_cache_warm);   /* compile under other walks */
        dlclose(h);
    }
    return NULL;
}

/* ---- attach / detach ------------------------------------------------------------ */

static void *short_lived(void *arg)
{
    (void)arg;
    nest(4, 0);
    crawl_thread_detach();
    return NULL;
}

static void *registry_churn(void *arg)
{
    (void)arg;
    while (!atomic_load(&stop)) {
        pthread_t t;
        if (pthread_create(&t, NULL, short_lived, NULL) == 0)
            pthread_join(t, NULL);
        unsigned long hits;
        crawl_cfi_cache_stats(&hits, NULL, NULL);
    }
    return NULL;
}

static void test_everything_at_once(void **state)
{
    (void)state;
    uintptr_t words[4];
    for (unsigned k = 0; k < 16; k++) {
        words[0] = 0x1000 + k, words[1] = 0x2000 + k, words[2] = 0x3000, words[3] = 0x4000 + k;
        expected_ids[k] = crawl_depot_put(words, 4);
        assert_int_not_equal(expected_ids[k], 0);
    }
    struct {
        void *(*fn)(void *);
        void *arg;
    } roles[] = {
        {walker, (void *)(uintptr_t)CRAWL_WALK_FAST}, {walker, (void *)(uintptr_t)0},
        {walker, (void *)(uintptr_t)CRAWL_WALK_SIGNAL_SAFE}, {depot_user, NULL},
        {depot_user, NULL}, {range_churn, NULL}, {loader, NULL}, {registry_churn, NULL},
    };
    enum { NROLES = sizeof roles / sizeof roles[0] };
    pthread_t t[NROLES];
    atomic_store(&stop, 0);
    for (unsigned i = 0; i < NROLES; i++)
        assert_int_equal(pthread_create(&t[i], NULL, roles[i].fn, roles[i].arg), 0);
    long ns = run_ns();
    struct timespec d = {ns / 1000000000L, ns % 1000000000L};
    nanosleep(&d, NULL);
    atomic_store(&stop, 1);
    for (unsigned i = 0; i < NROLES; i++)
        pthread_join(t[i], NULL);
    print_message("stress: %ld problems\n", atomic_load(&problems));
    assert_int_equal(atomic_load(&problems), 0);
}

int main(void)
{
    crawl_thread_attach();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_everything_at_once),
    };
    return cmocka_run_group_tests_name("stress", tests, NULL, NULL);
}
