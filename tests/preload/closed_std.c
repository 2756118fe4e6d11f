/* Started with descriptors 0, 1 and 2 closed, under libcrawl-preload.so:
 * they are still closed in main (libunwind's pipe, opened as libcrawl
 * loaded, took them: sort >&- died of SIGPIPE, cat <&- read "Resource
 * temporarily unavailable"). Writes what it finds to the file argv[1]. */
#include <fcntl.h>
#include <stdio.h>

int main(int argc, char **argv)
{
    if (argc < 2)
        return 2;
    int open_fds = 0;
    for (int fd = 0; fd < 3; fd++)
        if (fcntl(fd, F_GETFD) >= 0)
            open_fds |= 1 << fd;
    int out = open(argv[1], O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (out < 0)
        return 1;
    dprintf(out, "open among 0-2: %d\n", open_fds);
    return 0;
}
