/* An opt-in trace of the unwinder's decisions (as libunwind's Debug() and
 * UNW_DEBUG_LEVEL): with CRAWL_DEBUG=unwind in the environment, every walk
 * writes one line to stderr where it starts, where it stops (how, and why
 * the step that ended it could not go on), where it resumes at a
 * transition Frame, and how it ends. "Why did the walk stop here" then has
 * an answer without a debugger.
 *
 * The variable is read once, when libcrawl is loaded (a set-uid program
 * ignores it). Lines are formatted with vsnprintf into a stack buffer and
 * written with one write(2): no malloc, no lock, so tracing also works in
 * signal-safe walks. Off, it costs one predictable branch on the slow path
 * and none in the batch loop. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <unistd.h>

#include "stackwalk/internal.h"

int sw_debug_on;

__attribute__((constructor)) static void debug_init(void)
{
    if (getauxval(AT_SECURE))
        return;
    const char *v = getenv("CRAWL_DEBUG");
    sw_debug_on = v && (strstr(v, "unwind") || strcmp(v, "1") == 0 || strcmp(v, "all") == 0);
}

void sw_debug_print(const char *fmt, ...)
{
    char buf[256];
    int n = snprintf(buf, sizeof buf, "crawl[unwind] ");
    va_list ap;
    va_start(ap, fmt);
    n += vsnprintf(buf + n, sizeof buf - (size_t)n - 1, fmt, ap);
    va_end(ap);
    if (n > (int)sizeof buf - 2)
        n = (int)sizeof buf - 2;
    buf[n++] = '\n';
    crawl__write_all(STDERR_FILENO, buf, (size_t)n);
}

const char *sw_status_name(int st)
{
    switch (st) {
    case SW_OK: return "ok";
    case SW_END: return "end of stack";
    case SW_STOP: return "stop";
    case SW_CORRUPT: return "corrupt";
    default: return "undecided";
    }
}
