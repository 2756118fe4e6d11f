/* What the headers promise about allocation: pushes, pops and walks with
 * CRAWL_WALK_SIGNAL_SAFE never call malloc, also from a signal handler.
 * malloc is interposed by this executable and counted. */
#define _GNU_SOURCE
#include "../support.h"

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
    }
    sigaction(SIGUSR1, &old, NULL);
#endif
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_no_allocation)};
    return cmocka_run_group_tests_name("signal-safety", tests, NULL, NULL);
}
