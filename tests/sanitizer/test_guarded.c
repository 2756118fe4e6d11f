/* The guarded pool (GWP-ASan's design): sampling, each error kind with its
 * offset and three stacks, recoverable mode, signal chaining, fork. Every
 * erroneous access runs in a child process. */
#define _GNU_SOURCE
#include "../support.h"

#include <crawl/guarded.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

/* Children start with the default SIGSEGV action (cmocka installs its own
 * handlers, and crawl hands pool faults on to the previous handler). */
static void options(const char *extra)
{
    signal(SIGSEGV, SIG_DFL);
    signal(SIGBUS, SIG_DFL);
    char o[300];
    snprintf(o, sizeof o, "gpa_sample_rate=1:gpa_perfectly_right_align=1:halt_on_error=0%s%s",
             extra ? ":" : "", extra ? extra : "");
    if (crawl_sanitizer_set_options(o) != 0)
        _exit(90);
}

/* A 16-byte pool allocation against the right (or the left) guard. */
NOINLINE static char *alloc_it(int right)
{
    for (int i = 0; i < 64; i++) {
        char *p = crawl_gpa_allocate(16, 0);
        if (!p)
            _exit(91);
        int is_left = ((uintptr_t)p & 4095) == 0;
        if (is_left != right)
            return p;
        crawl_gpa_deallocate(p);
    }
    _exit(92);
}

NOINLINE static void free_it(char *p) { crawl_gpa_deallocate(p); T_NO_TAIL(); }

NOINLINE static char touch(volatile char *p) { return *p; }

static void uaf_child(void)
{
    options(NULL);
    char *p = alloc_it(1);
    free_it(p);
    touch(p);
    _exit(0);                            /* not reached */
}

static void overflow_child(void)
{
    options(NULL);
    char *p = alloc_it(1);
    touch(p + 16);                       /* one byte past the end */
    _exit(0);
}

static void underflow_child(void)
{
    options(NULL);
    char *p = alloc_it(0);
    touch(p - 1);                        /* one byte before the start */
    _exit(0);
}

static void double_free_child(void)
{
    options(NULL);
    char *p = alloc_it(1);
    free_it(p);
    free_it(p);
    _exit(0);
}

static void invalid_free_child(void)
{
    options(NULL);
    char *p = alloc_it(1);
    free_it(p + 1);
    _exit(0);
}

static void expect_report(void (*child)(void), int sig, const char *headline, int freed,
                          const char *access_fn)
{
    char out[1 << 15];
    int st = t_run_child(child, out, sizeof out);
    if (!WIFSIGNALED(st) || WTERMSIG(st) != sig)
        fail_msg("status %#x (wanted signal %d):\n%s", st, sig, out);
    char access[200];
    snprintf(access, sizeof access, "^    #0 0x[0-9a-f]+ in %s .*test_guarded.c:[0-9]+$", access_fn);
    const char *const with_free[] = {
        "^\\*\\*\\* GWP-ASan detected a memory error \\*\\*\\*$", headline, access,
        "^0x[0-9a-f]+ was deallocated by thread T0 here:$",
        "^    #[0-9]+ 0x[0-9a-f]+ in free_it .*test_guarded.c:[0-9]+$",
        "^0x[0-9a-f]+ was allocated by thread T0 here:$",
        "^    #[0-9]+ 0x[0-9a-f]+ in alloc_it .*test_guarded.c:[0-9]+$",
        "^\\*\\*\\* End GWP-ASan report \\*\\*\\*$", NULL};
    const char *const without_free[] = {
        "^\\*\\*\\* GWP-ASan detected a memory error \\*\\*\\*$", headline, access,
        "^0x[0-9a-f]+ was allocated by thread T0 here:$",
        "^    #[0-9]+ 0x[0-9a-f]+ in alloc_it .*test_guarded.c:[0-9]+$",
        "^\\*\\*\\* End GWP-ASan report \\*\\*\\*$", NULL};
    t_expect_lines(out, freed ? with_free : without_free);
}

static void test_use_after_free(void **state)
{
    (void)state;
    expect_report(uaf_child, SIGSEGV,
                  "^Use After Free at 0x[0-9a-f]+ \\(0 bytes into a 16-byte allocation at "
                  "0x[0-9a-f]+\\) by thread T0 here:$",
                  1, "touch");
}

static void test_overflow_by_one(void **state)
{
    (void)state;
    expect_report(overflow_child, SIGSEGV,
                  "^Buffer Overflow at 0x[0-9a-f]+ \\(0 bytes to the right of a 16-byte allocation "
                  "at 0x[0-9a-f]+\\) by thread T0 here:$",
                  0, "touch");
}

static void test_underflow_by_one(void **state)
{
    (void)state;
    expect_report(underflow_child, SIGSEGV,
                  "^Buffer Underflow at 0x[0-9a-f]+ \\(1 byte to the left of a 16-byte allocation "
                  "at 0x[0-9a-f]+\\) by thread T0 here:$",
                  0, "touch");
}

static void test_double_free(void **state)
{
    (void)state;
    expect_report(double_free_child, SIGABRT,
                  "^Double Free at 0x[0-9a-f]+ \\(a 16-byte allocation\\) by thread T0 here:$", 1,
                  "free_it");
}

static void test_invalid_free(void **state)
{
    (void)state;
    expect_report(invalid_free_child, SIGABRT,
                  "^Invalid \\(Wild\\) Free at 0x[0-9a-f]+ \\(1 byte into a 16-byte allocation at "
                  "0x[0-9a-f]+\\) by thread T0 here:$",
                  0, "free_it");
}

/* gpa_recoverable=1: each slot reported once, the program goes on. */
static void recover_child(void)
{
    options("gpa_recoverable=1");
    char *p = alloc_it(1);
    free_it(p);
    touch(p);
    touch(p + 1);                        /* the same slot: no second report */
    char *q = alloc_it(1);
    touch(q + 16);                       /* another slot: its own report */
    dprintf(STDERR_FILENO, "finished, %lu reports\n", crawl_sanitizer_report_count());
    _exit(0);
}

static void test_recoverable(void **state)
{
    (void)state;
    char out[1 << 15];
    int st = t_run_child(recover_child, out, sizeof out);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
        fail_msg("status %#x:\n%s", st, out);
    t_expect_lines(out, (const char *const[]){"^Use After Free at ", "^Buffer Overflow at ",
                                              "^finished, 2 reports$", NULL});
}

/* A host handler installed before crawl's still gets the faults outside
 * the pool. */
static void host_handler(int sig, siginfo_t *si, void *uc)
{
    (void)sig, (void)si, (void)uc;
    static const char msg[] = "host handler\n";
    ssize_t w = write(STDERR_FILENO, msg, sizeof msg - 1);
    (void)w;
    _exit(42);
}

static void chain_child(void)
{
    options(NULL);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = host_handler;
    sa.sa_flags = SA_SIGINFO;
    sigaction(SIGSEGV, &sa, NULL);       /* before the pool comes up */
    (void)crawl_gpa_allocate(8, 0);      /* the pool (and crawl's handler) come up */
    touch((volatile char *)16);          /* not the pool */
    _exit(0);
}

static void test_signal_chaining(void **state)
{
    (void)state;
    char out[4096];
    int st = t_run_child(chain_child, out, sizeof out);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 42);
    assert_non_null(strstr(out, "host handler"));
    assert_null(strstr(out, "GWP-ASan"));
}

/* A host handler installed after crawl's, which chains to it, sees the
 * pool fault first; crawl then reports it. */
static struct sigaction crawl_sa;

static void chaining_host(int sig, siginfo_t *si, void *uc)
{
    static const char msg[] = "host saw the fault first\n";
    ssize_t w = write(STDERR_FILENO, msg, sizeof msg - 1);
    (void)w;
    crawl_sa.sa_sigaction(sig, si, uc);
}

static void chain_after_child(void)
{
    options(NULL);
    char *p = alloc_it(1);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = chaining_host;
    sa.sa_flags = SA_SIGINFO;
    sigaction(SIGSEGV, &sa, &crawl_sa);
    touch(p + 16);
    _exit(0);
}

static void test_chaining_host_after_crawl(void **state)
{
    (void)state;
    char out[1 << 15];
    int st = t_run_child(chain_after_child, out, sizeof out);
    if (!WIFSIGNALED(st) || WTERMSIG(st) != SIGSEGV)
        fail_msg("status %#x:\n%s", st, out);
    t_expect_lines(out, (const char *const[]){"^host saw the fault first$",
                                              "^Buffer Overflow at ", NULL});
}

/* The pool after fork, in the child; sizes and ownership. */
static void test_fork_and_queries(void **state)
{
    (void)state;
    options(NULL);
    char *p = crawl_gpa_allocate(24, 8);
    assert_non_null(p);
    assert_true(crawl_gpa_owns(p));
    assert_int_equal(crawl_gpa_size(p), 24);
    assert_int_equal(crawl_gpa_size(p + 8), 0);              /* not its start */
    assert_int_equal(crawl__gpa_slot_size(p + 8), 24);       /* its slot's, from anywhere in it */
    int local;
    assert_false(crawl_gpa_owns(&local));
    assert_int_equal(crawl_gpa_size(&local), 0);
    assert_int_equal(crawl__gpa_slot_size(&local), 0);
    assert_null(crawl_gpa_allocate(1 << 20, 0));          /* more than a page: not pooled */
    pid_t pid = fork();
    if (pid == 0) {
        char *q = crawl_gpa_allocate(32, 0);
        int ok = q && crawl_gpa_size(q) == 32;
        crawl_gpa_deallocate(q);
        _exit(ok && crawl_gpa_size(q) == 0 ? 0 : 1);
    }
    int st;
    waitpid(pid, &st, 0);
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    crawl_gpa_deallocate(p);
    assert_int_equal(crawl_gpa_size(p), 0);
}

/* gpa_perfectly_right_align=1 gives up malloc's 16-byte alignment only:
 * an alignment asked for (memalign, valloc, aligned new) is kept. Half of
 * the right-placed chunks broke it before (valloc: 0x...f9c). */
static void test_alignment_kept(void **state)
{
    (void)state;
    options(NULL);
    int unaligned_13 = 0;
    for (int i = 0; i < 64; i++) {
        char *a = crawl_gpa_allocate(100, 64), *b = crawl_gpa_allocate(100, 4096);
        char *c = crawl_gpa_allocate(13, 0);
        assert_true(a && b && c);
        assert_int_equal((uintptr_t)a % 64, 0);
        assert_int_equal((uintptr_t)b % 4096, 0);
        unaligned_13 += (uintptr_t)c % 16 != 0;   /* right against the guard, to the byte */
        crawl_gpa_deallocate(a);
        crawl_gpa_deallocate(b);
        crawl_gpa_deallocate(c);
    }
    assert_true(unaligned_13 > 0);
}

/* mprotect, as libcrawl calls it: this program's own, which can refuse to
 * make pages accessible as the kernel does past vm.max_map_count */
static int refuse_rw;

int mprotect(void *addr, size_t len, int prot)
{
    if (refuse_rw && prot == (PROT_READ | PROT_WRITE)) {
        errno = ENOMEM;
        return -1;
    }
    return (int)syscall(SYS_mprotect, addr, len, prot);
}

/* A slot the kernel refuses to make accessible is not handed out (the
 * allocation is left to malloc) and goes back to the pool: it used to be
 * returned still PROT_NONE, and its first access reported as a use after
 * free (perl with gpa_max_allocations=40000: 32,700 live slots reach the
 * kernel's 65,530 mappings). Then the pool's size is the limit: its 16
 * slots (gpa_max_allocations' default, fixed when this process first made
 * the pool), the refused one among them, and no more. */
static void test_slot_not_made_accessible(void **state)
{
    (void)state;
    options(NULL);
    char *p = crawl_gpa_allocate(16, 0);    /* (the pool is made) */
    assert_non_null(p);
    crawl_gpa_deallocate(p);
    refuse_rw = 1;
    char *q = crawl_gpa_allocate(16, 0);
    refuse_rw = 0;
    assert_null(q);
    char *all[64];
    int n = 0;
    while (n < 64 && (all[n] = crawl_gpa_allocate(16, 0)) != NULL)
        all[n++][0] = 1;                 /* each accessible */
    assert_int_equal(n, 16);
    while (n)
        crawl_gpa_deallocate(all[--n]);
}

/* 1 in N, a thread's first call never samples, 0 disables. */
static void test_sampling(void **state)
{
    (void)state;
    assert_int_equal(crawl_sanitizer_set_options("gpa_sample_rate=4"), 0);
    int hits = 0;
    for (int i = 0; i < 100000; i++)
        hits += crawl_gpa_should_sample();
    assert_true(hits > 20000 && hits < 30000);
    assert_int_equal(crawl_sanitizer_set_options("gpa_sample_rate=0"), 0);
    hits = 0;
    for (int i = 0; i < 1000; i++)
        hits += crawl_gpa_should_sample();
    assert_int_equal(hits, 0);
    /* a change of rate applies to this thread's next call (the countdown
     * of the old rate, 0's million calls included, did not) */
    assert_int_equal(crawl_sanitizer_set_options("gpa_sample_rate=1"), 0);
    assert_int_equal(crawl_gpa_should_sample(), 1);
    assert_int_equal(crawl_gpa_should_sample(), 1);
    assert_int_equal(crawl_sanitizer_set_options("gpa_sample_rate=1000000"), 0);
    (void)crawl_gpa_should_sample();     /* (a countdown of up to 2M calls) */
    assert_int_equal(crawl_sanitizer_set_options("gpa_sample_rate=1"), 0);
    assert_int_equal(crawl_gpa_should_sample(), 1);
    assert_int_equal(crawl_sanitizer_set_options("gpa_sample_rate=0"), 0);
}

int main(void)
{
    crawl_thread_attach();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_use_after_free),    cmocka_unit_test(test_overflow_by_one),
        cmocka_unit_test(test_underflow_by_one),  cmocka_unit_test(test_double_free),
        cmocka_unit_test(test_invalid_free),      cmocka_unit_test(test_recoverable),
        cmocka_unit_test(test_signal_chaining),   cmocka_unit_test(test_chaining_host_after_crawl),
        cmocka_unit_test(test_fork_and_queries),
        cmocka_unit_test(test_alignment_kept),
        cmocka_unit_test(test_slot_not_made_accessible),
        cmocka_unit_test(test_sampling),
    };
    return cmocka_run_group_tests_name("guarded", tests, NULL, NULL);
}
