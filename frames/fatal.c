/* One clear line, then abort: how crawl reports misuse it cannot recover from. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "frames/internal.h"

_Noreturn void crawl__fatal(const char *fmt, ...)
{
    char buf[512];
    int n = snprintf(buf, sizeof buf, "crawl: fatal: ");
    va_list ap;
    va_start(ap, fmt);
    n += vsnprintf(buf + n, sizeof buf - (size_t)n - 1, fmt, ap);
    va_end(ap);
    if (n > (int)sizeof buf - 2)
        n = (int)sizeof buf - 2;
    buf[n++] = '\n';
    crawl__write_all(STDERR_FILENO, buf, (size_t)n);
    abort();
}
