/* heap_profile_signal, then exit while crawl's helper thread writes the
 * profile: the write is finished first, and no temporary file stays beside
 * the path (the process ended the write half way and left
 * PATH.tmp.PID.TID; found by an outside test). Many live chunks from many
 * stacks, so that the SVG takes a while to write.
 * usage: signal_exit [SIGNAL] */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static void *volatile keep[60000];

__attribute__((noinline)) static void *alloc_at(int depth, size_t n)
{
    void *p = depth ? alloc_at(depth - 1, n) : malloc(n);
    __asm__ volatile("" ::: "memory");
    return p;
}

int main(int argc, char **argv)
{
    int sig = argc > 1 ? atoi(argv[1]) : SIGUSR2;
    for (int i = 0; i < 60000; i++)
        keep[i] = alloc_at(i % 40, 16 + (size_t)(i % 64));
    raise(sig);
    struct timespec t = {0, 2000000};    /* 2 ms: the helper is writing */
    nanosleep(&t, NULL);
    puts("signal_exit: exiting");
    return 0;
}
