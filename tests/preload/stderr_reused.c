/* A program that leaks 24 bytes and, at exit, closes its stderr (as
 * coreutils do) and then opens a file for reading, which takes descriptor
 * 2: the leak report must still reach the stderr the program started with
 * (it was written to the read-only file and lost: in CI, sort's report
 * came out empty when libdw's opening of a module took descriptor 2). */
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void *volatile kept;

static int close_stdout;

static void close_stderr_then_read(void)
{
    if (close_stdout)
        close(STDOUT_FILENO);
    close(STDERR_FILENO);
    int fd = open("/proc/self/cmdline", O_RDONLY);   /* the lowest free: 2 (1) */
    if (fd != (close_stdout ? STDOUT_FILENO : STDERR_FILENO))
        _exit(3);                        /* the test's premise failed */
    if (close_stdout && open("/proc/self/cmdline", O_RDONLY) != STDERR_FILENO)
        _exit(3);
}

__attribute__((noinline)) static void leak(void)
{
    char *p = malloc(24);
    memset(p, 7, 24);
    kept = p;
    kept = NULL;
}

int main(int argc, char **argv)
{
    (void)argv;
    close_stdout = argc > 1;             /* "stdout": close descriptor 1 too */
    atexit(close_stderr_then_read);
    leak();
    return 0;
}
