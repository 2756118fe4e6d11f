/* A host as programs are built: plain -O2, no frame-pointer flags. It
 * leaks 77 bytes from a signal handler and 55 from outer(), then returns
 * from main: the check at exit must report both, with their stacks in
 * order (once, a stale copy of the second chunk's address in an unwritten
 * slot of crawl's own exit handler frame hid that leak). */
#define _GNU_SOURCE
#include <link.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

__attribute__((noinline)) void leak_in(size_t n)
{
    char *volatile p = malloc(n);
    memset(p, 1, n);
    p = 0;
}

__attribute__((noinline)) void on_usr1(int sig)
{
    (void)sig;
    leak_in(77);
    __asm__ volatile("");                /* (not a tail call) */
}

__attribute__((noinline)) void outer(void)
{
    leak_in(55);
    __asm__ volatile("");
}

/* (run with an argument: the same in the child of a fork made while
 * another thread is parked inside dl_iterate_phdr) */
static volatile int parked;

static int park(struct dl_phdr_info *info, size_t size, void *arg)
{
    (void)info, (void)size, (void)arg;
    parked = 1;
    sleep(100);
    return 1;
}

static void *holder(void *arg)
{
    (void)arg;
    dl_iterate_phdr(park, NULL);
    return NULL;
}

int main(int argc, char **argv)
{
    (void)argv;
    signal(SIGUSR1, on_usr1);
    if (argc > 1) {
        pthread_t t;
        pthread_create(&t, NULL, holder, NULL);
        while (!parked)
            usleep(1000);
        pid_t child = fork();
        if (child == 0) {
            alarm(20);
            raise(SIGUSR1);
            outer();
            exit(0);
        }
        int status;
        waitpid(child, &status, 0);
        _exit(WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
    }
    raise(SIGUSR1);
    outer();
    return 0;
}
