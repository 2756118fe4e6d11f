/* A leak check in the child of a fork made while another thread was inside
 * dl_iterate_phdr: glibc's fork leaves the loader's lock held then, for
 * ever. Each of these once hung or killed such a child: the check's own
 * dl_iterate_phdr (modules' static data); the same when the program had
 * not called crawl before the fork (the atfork handler that notices was
 * registered on first use); the report's demangler lookup (a C++ name in
 * a stack, no C++ runtime loaded); and, in the fallback that reads the
 * modules' data from /proc/self/maps, a writable file mapping longer than
 * its file (SIGBUS past the end), and a chunk held by a global of a
 * library linked at a base other than 0 (its data went unscanned: a
 * false leak). Nothing of crawl runs before the fork. */
#define _GNU_SOURCE
#include <link.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include <crawl/heap_profile.h>

static atomic_int parked, released;

static int park(struct dl_phdr_info *info, size_t size, void *arg)
{
    (void)info, (void)size, (void)arg;
    atomic_store(&parked, 1);
    while (!atomic_load(&released))
        usleep(1000);
    return 1;
}

static void *holder(void *arg)
{
    (void)arg;
    dl_iterate_phdr(park, NULL);         /* holds the loader's lock until released */
    return NULL;
}

void fork_child_keep(void *p);           /* fork_child_base.c, linked at 0x200000 */
static void *volatile program_kept;

/* a chunk held by the library's global, one by the program's */
__attribute__((noinline)) static void keep_two(void)
{
    void *p = malloc(91);
    crawl_heap_profile_alloc(p, 91, 0);
    fork_child_keep(p);
    p = malloc(93);
    crawl_heap_profile_alloc(p, 93, 0);
    program_kept = p;
}

/* a C++ name, from C: the report asks for a demangler */
__attribute__((noinline)) void leak_mangled(void) __asm__("_Z12leak_mangledv");
__attribute__((noinline)) void leak_mangled(void)
{
    void *volatile p = malloc(77);
    crawl_heap_profile_alloc(p, 77, 0);
    p = NULL;
}

__attribute__((noinline)) static void scrub(void)
{
    volatile char junk[32768];
    for (size_t i = 0; i < sizeof junk; i++)
        junk[i] = 0;
}

/* The child: 0 when its check found the one leak, with its stack */
static int child(void)
{
    alarm(20);                           /* a hang ends as SIGALRM */
    FILE *file = tmpfile();
    if (!file || fputc('x', file) == EOF || fflush(file) != 0)
        return 2;
    int fd = fileno(file);
    /* 16 KiB writable over a 1-byte file: pages past the first raise SIGBUS */
    void *m = mmap(NULL, 16384, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
    if (m == MAP_FAILED || crawl_heap_profile_start() != 0)
        return 2;
    leak_mangled();
    keep_two();
    scrub();
    FILE *f = tmpfile();
    if (!f)
        return 2;
    long n = crawl_leak_check(fileno(f));
    static char report[1 << 16];
    rewind(f);
    size_t got = fread(report, 1, sizeof report - 1, f);
    report[got] = '\0';
    if (n != 1 || !strstr(report, "Direct leak of 77 byte(s) in 1 object(s)") ||
        !strstr(report, "leak_mangled")) {
        fputs(report, stderr);
        return 3;
    }
    return 0;
}

static void test_check_in_a_child_of_a_loader_walk(void **state)
{
    (void)state;
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, holder, NULL), 0);
    while (!atomic_load(&parked))
        usleep(1000);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0)
        _exit(child());
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    atomic_store(&released, 1);
    assert_int_equal(pthread_join(t, NULL), 0);
    if (WIFSIGNALED(status))
        print_message("child killed by signal %d\n", WTERMSIG(status));
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_check_in_a_child_of_a_loader_walk),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
