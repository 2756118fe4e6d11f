/* What the headers promise about allocation: pushes, pops and walks with
 * CRAWL_WALK_SIGNAL_SAFE never call malloc, also from a signal handler,
 * nor dl_iterate_phdr (the loader's lock: the README says signal-safe
 * walks never take it). Both are interposed by this executable and
 * counted. */
#define _GNU_SOURCE
#include "../support.h"

#include <dlfcn.h>
#include <link.h>
#include <signal.h>
#include <string.h>
#include <ucontext.h>

#if defined(__SANITIZE_ADDRESS__)
#define HAVE_COUNTING_MALLOC 0      /* ASan owns malloc */
#else
#define HAVE_COUNTING_MALLOC 1
extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void *__libc_memalign(size_t, size_t);
extern void __libc_free(void *);

static volatile int counting;
static volatile int allocations;

void *malloc(size_t n)
{
    if (counting)
        allocations++;
    return __libc_malloc(n);
}
void *calloc(size_t n, size_t m)
{
    if (counting)
        allocations++;
    return __libc_calloc(n, m);
}
void *realloc(void *p, size_t n)
{
    if (counting)
        allocations++;
    return __libc_realloc(p, n);
}
void *memalign(size_t a, size_t n)
{
    if (counting)
        allocations++;
    return __libc_memalign(a, n);
}
int posix_memalign(void **out, size_t a, size_t n)
{
    if (counting)
        allocations++;
    *out = __libc_memalign(a, n);
    return *out ? 0 : 12;
}
void *aligned_alloc(size_t a, size_t n)
{
    return memalign(a, n);
}
void free(void *p)
{
    __libc_free(p);
}

static volatile int phdr_walks;
typedef int (*phdr_fn)(struct dl_phdr_info *, size_t, void *);
int dl_iterate_phdr(phdr_fn fn, void *data)
{
    static int (*real)(phdr_fn, void *);
    if (counting)
        phdr_walks++;
    if (!real)
        *(void **)&real = dlsym(RTLD_NEXT, "dl_iterate_phdr");
    return real(fn, data);
}

static int frames_seen;
static crawl_action count(const crawl_cf *cf, void *ctx)
{
    (void)cf;
    (void)ctx;
    frames_seen++;
    return CRAWL_CONTINUE;
}

static unsigned handler_flags;
static crawl_walk_status handler_status;

static void on_sigusr1(int sig, siginfo_t *si, void *uc)
{
    (void)sig;
    (void)si;
    handler_status = crawl_walk_context(uc, count, NULL, handler_flags);
    crawl_walk_status st2 = crawl_walk(count, NULL, handler_flags);
    if (st2 != CRAWL_WALK_DONE)
        handler_status = st2;
}

#endif

static void test_no_allocation(void **state)
{
    (void)state;
    if (!HAVE_COUNTING_MALLOC)
        skip();
#if HAVE_COUNTING_MALLOC
    struct sigaction sa = {.sa_sigaction = on_sigusr1, .sa_flags = SA_SIGINFO}, old;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGUSR1, &sa, &old);
    label_frame l = {.label = "x"};
    crawl_transition t;
    /* warm-up: attach, and let libunwind and libc set up what they cache */
    crawl_thread_attach();
    phdr_walks = 0;
    counting = 1;                        /* (libcrawl's own calls reach the counter: pinning */
    crawl_module_pin((const void *)count);   /* rebuilds the module list through it) */
    counting = 0;
    assert_true(phdr_walks > 0);
    for (int i = 0; i < 2; i++) {
        crawl_frame_push(&l.frame, &t_label_type);
        crawl_walk(count, NULL, 0);
        handler_flags = CRAWL_WALK_SIGNAL_SAFE;
        raise(SIGUSR1);
        crawl_frame_pop(&l.frame);
    }
    static const unsigned flags[2] = {CRAWL_WALK_SIGNAL_SAFE,
                                      CRAWL_WALK_SIGNAL_SAFE | CRAWL_WALK_FAST};
    for (int m = 0; m < 2; m++) {
        frames_seen = 0;
        allocations = 0;
        phdr_walks = 0;
        counting = 1;
        crawl_frame_push(&l.frame, &t_label_type);
        crawl_transition_push(&t, NULL);
        crawl_walk_status st = crawl_walk(count, NULL, flags[m]);
        handler_flags = flags[m];
        raise(SIGUSR1);
        crawl_frame_pop(&t.frame);
        crawl_frame_pop(&l.frame);
        counting = 0;
        assert_int_equal(st, CRAWL_WALK_DONE);
        assert_int_equal(handler_status, CRAWL_WALK_DONE);
        assert_true(frames_seen > 6);
        assert_int_equal(allocations, 0);
        assert_int_equal(phdr_walks, 0);
    }
    sigaction(SIGUSR1, &old, NULL);
#endif
}

#if HAVE_COUNTING_MALLOC
/* The depot from a signal handler: capture and put allocate nothing and
 * interleave with the interrupted thread's own puts. */
static volatile uint32_t handler_ids[64];
static volatile int handler_runs;

static void on_sigusr2(int sig)
{
    (void)sig;
    uintptr_t tr[4] = {0xabc000, 0xabc100, (uintptr_t)handler_runs, 0xabc300};
    uint32_t a = crawl_depot_put(tr, 4);
    uint32_t b = crawl_depot_capture(32, CRAWL_WALK_FAST | CRAWL_WALK_SIGNAL_SAFE);
    handler_ids[handler_runs % 64] = a && b ? a : 0;
    handler_runs++;
}
#endif

static void test_depot_in_signal_handler(void **state)
{
    (void)state;
    if (!HAVE_COUNTING_MALLOC)
        skip();
#if HAVE_COUNTING_MALLOC
    struct sigaction sa = {.sa_handler = on_sigusr2}, old;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGUSR2, &sa, &old);
    crawl_depot_capture(32, CRAWL_WALK_FAST);        /* warm-up: arenas and id pages */
    allocations = 0;
    counting = 1;
    uint32_t mine[64];
    for (int i = 0; i < 64; i++) {
        uintptr_t tr[4] = {0xdef000, (uintptr_t)i, 0xdef200, 0xdef300};
        mine[i] = crawl_depot_put(tr, 4);
        raise(SIGUSR2);
    }
    counting = 0;
    sigaction(SIGUSR2, &old, NULL);
    assert_int_equal(allocations, 0);
    assert_int_equal(handler_runs, 64);
    for (int i = 0; i < 64; i++) {
        assert_true(mine[i] != 0 && handler_ids[i] != 0);
        const uintptr_t *w;
        assert_int_equal(crawl_depot_get(handler_ids[i], &w), 4);
        assert_int_equal(w[2], (uintptr_t)i);
        assert_int_equal(crawl_depot_get(mine[i], &w), 4);
        assert_int_equal(w[1], (uintptr_t)i);
    }
#endif
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_no_allocation),
                                       cmocka_unit_test(test_depot_in_signal_handler)};
    return cmocka_run_group_tests_name("signal-safety", tests, NULL, NULL);
}
