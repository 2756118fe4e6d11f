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

static void close_stderr_then_read(void)
{
    close(STDERR_FILENO);
    int fd = open("/proc/self/cmdline", O_RDONLY);   /* the lowest free: 2 */
    if (fd != STDERR_FILENO)
        _exit(3);                        /* the test's premise failed */
}

__attribute__((noinline)) static void leak(void)
{
    char *p = malloc(24);
    memset(p, 7, 24);
    kept = p;
    kept = NULL;
}

int main(void)
{
    atexit(close_stderr_then_read);
    leak();
    return 0;
}
