/* exit() called from a signal handler running on a sigaltstack made with
 * malloc. The check at exit scanned from the handler's frame up to the
 * thread's stack top, the whole address space between the heap and the
 * stack, page by page, and never ended; on a small alternate stack, libdw
 * then faulted symbolizing the report.
 * usage: preload_exit_altstack KIB: an alternate stack of KIB KiB.
 * Expected, 2048: the check ends, reports the 66 bytes leaked in the
 * handler, and not the 77 bytes main holds in a local (the interrupted
 * stack is scanned). 64: one line saying the check did not run. */
#define _GNU_SOURCE
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static volatile size_t leak_size = 66;   /* (read at run time: no clone of leak()) */

__attribute__((noinline)) static void leak(size_t n)
{
    char *volatile p = malloc(n);
    memset(p, 1, n);
    p = NULL;
}

__attribute__((noinline)) static void on_usr1(int sig)
{
    (void)sig;
    leak(leak_size);
    exit(0);
}

int main(int argc, char **argv)
{
    size_t size = (size_t)(argc > 1 ? atol(argv[1]) : 2048) << 10;
    stack_t alt = {.ss_sp = malloc(size), .ss_size = size};
    if (!alt.ss_sp || sigaltstack(&alt, NULL) != 0)
        return 2;
    struct sigaction sa = {.sa_handler = on_usr1, .sa_flags = SA_ONSTACK};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGUSR1, &sa, NULL);
    char *volatile held = malloc(77);
    memset(held, 2, 77);
    raise(SIGUSR1);
    return 3;
}
