/* Symbolization and the ASan-shaped trace printer. */
#define _GNU_SOURCE
#include "../support.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <regex.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static void assert_matches(const char *text, const char *pattern)
{
    regex_t re;
    assert_int_equal(regcomp(&re, pattern, REG_EXTENDED | REG_NOSUB | REG_NEWLINE), 0);
    int rc = regexec(&re, text, 0, NULL, 0);
    regfree(&re);
    if (rc != 0)
        fail_msg("\"%s\" does not match /%s/", text, pattern);
}

NOINLINE static int known_function(int x)
{
    __asm__ volatile("" ::: "memory");
    return x * 3 + 1;
}

static void test_symbolize(void **state)
{
    (void)state;
    assert_int_equal(known_function(1), 4);
    char buf[1024];
    crawl_symbol s;
    assert_int_equal(crawl_symbolize((uintptr_t)known_function + 1, &s, buf, sizeof buf), 0);
    assert_string_equal(s.function, "known_function");
    assert_non_null(s.file);
    assert_non_null(strstr(s.file, "test_print.c"));
    assert_true(s.line > 0);
    assert_non_null(strstr(s.module, "test_print"));
    /* a libc function: name and module, whatever the debug info */
    assert_int_equal(crawl_symbolize((uintptr_t)getpid + 1, &s, buf, sizeof buf), 0);
    assert_non_null(strstr(s.module, "libc.so"));
    assert_true(s.module_offset > 0);
    assert_int_equal(crawl_symbolize(0x10, &s, buf, sizeof buf), -ENOENT);
    /* addresses in no module: the stack, an anonymous mapping, far past libc */
    int local = 0;
    assert_int_equal(crawl_symbolize((uintptr_t)&local, &s, buf, sizeof buf), -ENOENT);
    void *anon = mmap(NULL, 4096, PROT_READ | PROT_EXEC, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    assert_true(anon != MAP_FAILED);
    assert_int_equal(crawl_symbolize((uintptr_t)anon + 16, &s, buf, sizeof buf), -ENOENT);
    munmap(anon, 4096);
    assert_int_equal(crawl_symbolize((uintptr_t)getpid + ((uintptr_t)1 << 40), &s, buf, sizeof buf),
                     -ENOENT);
    assert_null(s.module);
    char tiny[4];
    assert_int_equal(crawl_symbolize((uintptr_t)known_function + 1, &s, tiny, sizeof tiny), -ENOSPC);
    /* debug info comes from this machine only: symbolizing loaded no
     * debuginfod client (it loaded libdebuginfod, libcurl and OpenSSL,
     * whose exit handler then killed a thread dump's helper thread, and it
     * fetches over the network when DEBUGINFOD_URLS names a server) */
    /* (cmocka's library has no separate debug file on this machine) */
    assert_int_equal(crawl_symbolize((uintptr_t)_cmocka_run_group_tests + 1, &s, buf, sizeof buf),
                     0);
    assert_non_null(strstr(s.module, "libcmocka"));
    FILE *maps = fopen("/proc/self/maps", "re");
    assert_non_null(maps);
    char line[512];
    while (fgets(line, sizeof line, maps))
        if (strstr(line, "libdebuginfod") || strstr(line, "libcurl"))
            fail_msg("loaded: %s", line);
    fclose(maps);
}

NOINLINE static void printer(int fd, unsigned flags, crawl_walk_status *st)
{
    *st = crawl_print_trace(fd, flags);
    __asm__ volatile("" ::: "memory");
}

NOINLINE static void print_with_frames(char *out, size_t len, unsigned flags, crawl_walk_status *st)
{
    int p[2];
    assert_int_equal(pipe(p), 0);
    label_frame l = {.label = "script_fn demo.script:12"};
    crawl_frame_push(&l.frame, &t_label_type);
    printer(p[1], flags, st);
    crawl_frame_pop(&l.frame);
    close(p[1]);
    ssize_t n = read(p[0], out, len - 1);
    out[n > 0 ? n : 0] = '\0';
    close(p[0]);
}

static void test_print_trace_shape(void **state)
{
    (void)state;
    static const unsigned modes[2] = {0, CRAWL_WALK_FAST};
    for (int m = 0; m < 2; m++) {
        char out[8192];
        crawl_walk_status st;
        print_with_frames(out, sizeof out, modes[m], &st);
        assert_int_equal(st, CRAWL_WALK_DONE);
        char *l1 = strchr(out, '\n');
        assert_non_null(l1);
        *l1 = '\0';
        assert_matches(out, "^    #0 0x[0-9a-f]+ in printer .*test_print\\.c:[0-9]+$");
        char *l2 = strchr(l1 + 1, '\n');
        *l2 = '\0';
        assert_string_equal(l1 + 1, "    #1 in script_fn demo.script:12");
        char *l3 = strchr(l2 + 1, '\n');
        *l3 = '\0';
        assert_matches(l2 + 1, "^    #2 0x[0-9a-f]+ in print_with_frames .*test_print\\.c:[0-9]+$");
    }
}

static char sig_out[8192];
static crawl_walk_status sig_st;

static void on_sigusr2(int sig, siginfo_t *si, void *uc)
{
    (void)sig;
    (void)si;
    int p[2];
    if (pipe(p) != 0)
        return;
    sig_st = crawl_print_trace_context(uc, p[1], 0);
    close(p[1]);
    ssize_t n = read(p[0], sig_out, sizeof sig_out - 1);
    sig_out[n > 0 ? n : 0] = '\0';
    close(p[0]);
}

static void test_print_trace_context(void **state)
{
    (void)state;
    struct sigaction sa = {.sa_sigaction = on_sigusr2, .sa_flags = SA_SIGINFO}, old;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGUSR2, &sa, &old);
    raise(SIGUSR2);
    sigaction(SIGUSR2, &old, NULL);
    assert_int_equal(sig_st, CRAWL_WALK_DONE);
    /* starts in libc's raise machinery, exact pc, reaches this test */
    assert_matches(sig_out, "^    #0 0x[0-9a-f]+ in ");
    assert_non_null(strstr(sig_out, " in test_print_trace_context "));
    assert_null(strstr(sig_out, "on_sigusr2"));
}

/* Descriptors open when main started (the harness's): not crawl's */
static char open_at_start[1024];

static void note_open_fds(char *open)
{
    DIR *d = opendir("/proc/self/fd");
    assert_non_null(d);
    for (struct dirent *e; (e = readdir(d));) {
        int fd = atoi(e->d_name);
        if (e->d_name[0] != '.' && fd >= 0 && fd < 1024)
            open[fd] = 1;
    }
    closedir(d);
}

/* Every descriptor crawl keeps open after symbolizing (libdwfl's module
 * and debug files) is close-on-exec: a program that exec'ed passed them
 * on (ls under the preload had libc and the program itself open). */
static void test_kept_fds_close_on_exec(void **state)
{
    (void)state;
    int fd = open("/dev/null", O_WRONLY | O_CLOEXEC);
    assert_true(fd >= 0);
    assert_int_equal(crawl_print_trace(fd, 0), CRAWL_WALK_DONE);
    close(fd);
    char now[1024] = {0};
    note_open_fds(now);
    int kept = 0;
    for (int i = 3; i < 1024; i++)
        if (now[i] && !open_at_start[i]) {
            int flags = fcntl(i, F_GETFD);
            if (flags < 0)
                continue;                /* (the directory stream's own, closed since) */
            kept++;
            if (!(flags & FD_CLOEXEC)) {
                char link[64], target[512] = "";
                snprintf(link, sizeof link, "/proc/self/fd/%d", i);
                ssize_t n = readlink(link, target, sizeof target - 1);
                target[n > 0 ? n : 0] = 0;
                fail_msg("fd %d (%s) is not close-on-exec", i, target);
            }
        }
    /* (none kept would prove nothing: libdwfl keeps the module files it
     * symbolized from, the test program's at least) */
    if (kept == 0)
        fail_msg("libdwfl kept no descriptor after a symbolized trace: the test tells nothing");
    print_message("%d descriptors kept, all close-on-exec\n", kept);
}

int main(void)
{
    note_open_fds(open_at_start);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_symbolize),
        cmocka_unit_test(test_print_trace_shape),
        cmocka_unit_test(test_print_trace_context),
        cmocka_unit_test(test_kept_fds_close_on_exec),
    };
    return cmocka_run_group_tests_name("print", tests, NULL, NULL);
}
