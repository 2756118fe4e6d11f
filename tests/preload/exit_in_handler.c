/* A signal handler that calls exit (not async-signal-safe, and common:
 * a SIGINT handler that ends the program) while the thread it interrupted
 * was inside crawl's recording: in a record (its stack walk, the live
 * table) or in a free holding a shard's lock. The exit hook's profile and
 * leak check need those locks, and waited for ever (3 children in 40
 * hung). Now the hook says in one line that it wrote and checked nothing,
 * and the process ends.
 * usage: exit_in_handler          runs 44 children, prints the tally
 *        exit_in_handler child    one child: an idle thread (so the
 *                                 locks are real), allocations in a loop,
 *                                 SIGALRM's handler exits within 1-10 ms
 *                                 (EXIT_LATE: 50-250 ms; EXIT_IDLE: after
 *                                 100 allocations, waiting, at 300 ms) */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static void *volatile ring[2];

static void on_alarm(int sig)
{
    (void)sig;
    exit(3);
}

__attribute__((noinline)) static void *alloc_at(int depth, size_t n)
{
    void *p = depth ? alloc_at(depth - 1, n) : malloc(n);
    __asm__ volatile("" ::: "memory");
    return p;
}

static void *idle(void *unused)
{
    (void)unused;
    for (;;)
        pause();
    return NULL;
}

static int child(void)
{
    pthread_t t;
    if (pthread_create(&t, NULL, idle, NULL) != 0)
        return 2;
    signal(SIGALRM, on_alarm);
    /* (early: mostly inside the first stack walks' CFI compiles; late,
     * 50 to 250 ms: in the loop's steady state, its frees' shard locks
     * too) */
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    long us = getenv("EXIT_LATE") ? 50000 + (now.tv_nsec / 1000) % 200000
                                  : 1000 + (now.tv_nsec / 1000) % 9000;
    int idle = getenv("EXIT_IDLE") != NULL;
    if (idle)
        us = 300000;                     /* (long after its last allocation) */
    struct itimerval it = {{0, 0}, {0, us}};
    setitimer(ITIMER_REAL, &it, NULL);
    /* (one size, freed at once: glibc serves it from its per-thread cache
     * and takes no lock of its own, which an exit from the handler would
     * wait for inside malloc whatever crawl did; see the README's limits) */
    for (unsigned long i = 0;; i++) {
        ring[i % 2] = alloc_at((int)(i % 5), 64);
        free(ring[i % 2]);
        if (idle && i == 100)
            for (;;)
                pause();                 /* the exit comes outside crawl */
    }
}

/* What a child wrote to stderr (its first 16 KiB), read from fd */
static char said[16384];
static size_t said_len;

static void drain(int fd)
{
    ssize_t n;
    while (said_len < sizeof said - 1 &&
           (n = read(fd, said + said_len, sizeof said - 1 - said_len)) > 0)
        said_len += (size_t)n;
    char sink[4096];
    while (read(fd, sink, sizeof sink) > 0)
        ;
    said[said_len] = '\0';
}

/* 1 if pid ended within ms (its status in *status, its stderr read from
 * fd into said); else it is killed */
static int ended_within(pid_t pid, int fd, int ms, int *status)
{
    struct timespec tick = {0, 1000000};
    for (int i = 0; i < ms; i++) {
        drain(fd);
        pid_t r = waitpid(pid, status, WNOHANG);
        if (r == pid || (r < 0 && errno != EINTR)) {
            drain(fd);
            return 1;
        }
        nanosleep(&tick, NULL);
    }
    kill(pid, SIGKILL);
    waitpid(pid, status, 0);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "child") == 0)
        return child();
    /* half the children record every stack (the walk under the record's
     * flag), half no stack (the table's locks, most of a record's time) */
    static const char *opts[2] = {
        "heap_profile=1:leak_check=1",
        "heap_profile=1:leak_check=1:heap_stack_min_size=1000000"};
    /* and 4 more that wait, allocating nothing, when their exit comes:
     * those must run the check */
    int hung = 0, odd = 0, skipped = 0, checked = 0, runs = 40, idle = 4;
    for (int i = 0; i < runs + idle; i++) {
        int err[2];
        if (pipe2(err, O_CLOEXEC) != 0)
            return 2;
        fcntl(err[0], F_SETFL, O_NONBLOCK);
        said_len = 0;
        pid_t pid = fork();
        if (pid == 0) {
            dup2(err[1], STDERR_FILENO);
            setenv("CRAWL_OPTIONS", opts[i % 2], 1);
            if (i % 4 >= 2)
                setenv("EXIT_LATE", "1", 1);
            if (i >= runs)
                setenv("EXIT_IDLE", "1", 1);
            execl("/proc/self/exe", argv[0], "child", (char *)NULL);
            _exit(127);
        }
        close(err[1]);
        int status = 0;
        int ended = ended_within(pid, err[0], 5000, &status);
        close(err[0]);
        if (!ended) {
            printf("exit_in_handler: child %d (%s) still ran after 5 s\n", i, opts[i % 2]);
            hung++;
        } else if (!WIFEXITED(status) || (WEXITSTATUS(status) != 3 && WEXITSTATUS(status) != 23)) {
            printf("exit_in_handler: child %d (%s) ended with status 0x%x\n", i, opts[i % 2],
                   status);
            odd++;
        } else if (strstr(said, "crawl: the program exited inside crawl")) {
            if (i >= runs) {
                printf("exit_in_handler: child %d exited outside crawl, and was said to be "
                       "inside it\n", i);
                odd++;
            }
            skipped++;                   /* the hook wrote and checked nothing */
        } else if ((WEXITSTATUS(status) == 3) == !strstr(said, "LeakSanitizer")) {
            checked++;                   /* the hook ran its check (23: it reported a chunk
                                            whose only pointer the handler's exit lost) */
        } else {
            printf("exit_in_handler: child %d (%s) said: %s\n", i, opts[i % 2], said);
            odd++;
        }
    }
    /* which way each child went: both are right for the first 40 (27 to
     * 35 inside crawl in the dev, debug and clang builds) */
    printf("exit_in_handler: %d exited inside crawl (nothing checked), %d checked\n", skipped,
           checked);
    /* (a run with no exit inside crawl tested nothing) */
    if (!skipped)
        odd++;
    printf("exit_in_handler: %d runs, %d hung, %d ended otherwise\n", runs + idle, hung, odd);
    return hung || odd;
}
