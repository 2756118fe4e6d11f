/* The one loop that writes a whole buffer with write(2): fatal lines,
 * reports and trace printers all end here. */
#include <fcntl.h>
#include <unistd.h>

#include "frames/internal.h"

int crawl__write_all(int fd, const void *s, size_t n)
{
    const char *p = s;
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w <= 0)
            return -1;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

int crawl__fd_above_std(int fd)
{
    if (fd < 0 || fd > 2)
        return fd;
    int moved = fcntl(fd, F_DUPFD_CLOEXEC, 3);
    close(fd);
    return moved;
}
