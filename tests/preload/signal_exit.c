/* heap_profile_signal, then exit while crawl's helper thread writes the
 * profile: the write is finished first, and no temporary file stays beside
 * the path (the process ended the write half way and left
 * PATH.tmp.PID.TID; found by an outside test). Many live chunks from many
 * stacks, so that the SVG takes a while to write.
 * usage: signal_exit SIGNAL [once|quick|storm|fork|dump|writer] [WRITER_PATH]
 *   once   raise the signal, exit 2 ms later
 *   quick  raise it, exit 20 us later (the helper has not begun)
 *   storm  a thread sends it every 0.5 ms until the process exits (a
 *          signal taken during the exit hook began a write exit cut off)
 *   fork   raise it, then fork: the child exits at once (it waited 5 s
 *          for its parent's writer, which it does not have)
 *   dump   a thread dump on SIGQUIT (to /dev/null) with four threads that
 *          block every signal, then exit: the exit hook does not wait for
 *          the dump (it waited up to 5 s, a second a blocked thread)
 *   writer a thread writes the profile to WRITER_PATH (the third
 *          argument) in a loop, through the API, as main exits: a write
 *          it started after the exit hook had looked left its temporary
 *          file (found by an outside review, 5 runs of 6) */
#include <crawl/frames.h>
#include <crawl/heap_profile.h>
#include <crawl/stackwalk.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static void *volatile keep[60000];
static int sig;

__attribute__((noinline)) static void *alloc_at(int depth, size_t n)
{
    void *p = depth ? alloc_at(depth - 1, n) : malloc(n);
    __asm__ volatile("" ::: "memory");
    return p;
}

static void *pester(void *unused)
{
    (void)unused;
    struct timespec t = {0, 500000};
    for (;;) {
        kill(getpid(), sig);
        nanosleep(&t, NULL);
    }
    return NULL;
}

static const char *writer_path;

static void *writer(void *unused)
{
    (void)unused;
    for (;;)
        crawl_heap_profile_write(writer_path);   /* (-ECANCELED once the exit hook runs) */
    return NULL;
}

static void *blocked(void *unused)
{
    (void)unused;
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, NULL);
    crawl_thread_attach();
    for (;;)
        pause();
    return NULL;
}

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
    sig = argc > 1 ? atoi(argv[1]) : SIGUSR2;
    const char *mode = argc > 2 ? argv[2] : "once";
    for (int i = 0; i < 60000; i++)
        keep[i] = alloc_at(i % 40, 16 + (size_t)(i % 64));
    if (strcmp(mode, "writer") == 0) {
        writer_path = argc > 3 ? argv[3] : NULL;
        pthread_t t;
        if (!writer_path || pthread_create(&t, NULL, writer, NULL) != 0)
            return 2;
        struct timespec t200 = {0, 200000000};
        nanosleep(&t200, NULL);
    } else if (strcmp(mode, "dump") == 0) {
        int fd = open("/dev/null", O_WRONLY | O_CLOEXEC);
        if (fd < 0 || crawl_install_thread_dump(SIGQUIT, fd) != 0)
            return 2;
        for (int i = 0; i < 4; i++) {
            pthread_t t;
            if (pthread_create(&t, NULL, blocked, NULL) != 0)
                return 2;
        }
        struct timespec t50 = {0, 50000000};
        nanosleep(&t50, NULL);
        raise(SIGQUIT);
        struct timespec t10 = {0, 10000000};
        nanosleep(&t10, NULL);
    } else if (strcmp(mode, "storm") == 0) {
        pthread_t t;
        if (pthread_create(&t, NULL, pester, NULL) != 0)
            return 2;
        struct timespec t100 = {0, 100000000};
        nanosleep(&t100, NULL);
    } else if (strcmp(mode, "quick") == 0) {
        raise(sig);
        struct timespec t = {0, 20000};      /* 20 us: about to write */
        nanosleep(&t, NULL);
    } else {
        raise(sig);
        struct timespec t = {0, 2000000};    /* 2 ms: the helper is writing */
        nanosleep(&t, NULL);
    }
    if (strcmp(mode, "fork") == 0) {
        double t0 = now();
        pid_t c = fork();
        if (c == 0)
            exit(0);                         /* (its exit hook runs) */
        int st;
        waitpid(c, &st, 0);
        printf("signal_exit: the child took %.1f s to exit\n", now() - t0);
    }
    puts("signal_exit: exiting");
    fflush(stdout);
    return 0;
}
