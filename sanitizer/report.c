/* Reports: assembled in a fixed buffer (no malloc in this code; libdw
 * allocates inside symbolization), written with write(2) to stderr or to
 * log_path.PID (log_path itself for a device or a FIFO), handed to the report callback, then abort with
 * halt_on_error=1. */
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sanitizer/internal.h"

struct crawl_report {
    char text[1 << 16];
    size_t used;
};

/* Stacks stop short of the buffer's end by this much, so that the location,
 * SUMMARY line and shadow dump that follow them always fit. */
#define TAIL_RESERVE 8192
static const char cut_line[] = "    ... (more frames: report text limit reached)\n";

/* Room left for stack lines before the reserved tail. */
static size_t stack_room(const san_report *r)
{
    size_t end = sizeof r->text - TAIL_RESERVE;
    return r->used < end ? end - r->used : 0;
}

static pthread_mutex_t report_lock = PTHREAD_MUTEX_INITIALIZER;
static san_report the_report;
static void (*callback)(const char *, void *);
static void *callback_ctx;
static unsigned long reports;

void crawl_set_report_callback(void (*fn)(const char *report, void *ctx), void *ctx)
{
    crawl__lock(&report_lock);
    callback = fn;
    callback_ctx = ctx;
    crawl__unlock(&report_lock);
}

void san_report_fork(int lock)
{
    if (lock)
        crawl__lock(&report_lock);
    else
        crawl__unlock(&report_lock);
}

unsigned long crawl_sanitizer_report_count(void)
{
    return __atomic_load_n(&reports, __ATOMIC_RELAXED);
}

unsigned san_thread_id(void)
{
    crawl__thread *th = crawl__self();
    if (!th->attached)
        crawl_thread_attach();
    return th->seq;
}

san_report *san_report_begin(void)
{
    crawl__lock(&report_lock);
    the_report.used = 0;
    san_printf(&the_report, "=================================================================\n");
    return &the_report;
}

static void vprint(san_report *r, const char *fmt, va_list ap)
{
    if (r->used >= sizeof r->text - 1)
        return;
    int n = vsnprintf(r->text + r->used, sizeof r->text - r->used, fmt, ap);
    if (n > 0)
        r->used += (size_t)n < sizeof r->text - r->used ? (size_t)n : sizeof r->text - r->used - 1;
}

san_report *san_report_begin_plain(void)
{
    crawl__lock(&report_lock);
    the_report.used = 0;
    return &the_report;
}

void san_printf(san_report *r, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vprint(r, fmt, ap);
    va_end(ap);
}

void san_print_words(san_report *r, const uintptr_t *w, unsigned n)
{
    int cut = 1;
    size_t room = stack_room(r);
    if (room)
        r->used += san_format_trace(w, n, r->text + r->used, room, &cut);
    if (cut)
        san_printf(r, "%s", cut_line);
}

void san_print_depot_trace(san_report *r, uint32_t id)
{
    const uintptr_t *w;
    unsigned n = crawl_depot_get(id, &w);
    if (!n) {
        /* 0: nothing was recorded (stacks off, or refused by the depot's
         * budget or a failed mmap: said only when it has refused some);
         * any other id is not
         * one the depot gave */
        crawl_depot_stats st;
        crawl_depot_get_stats(&st);
        if (id)
            san_printf(r, "    <no stack with id %u in the depot>\n", id);
        else if (st.drops)
            san_printf(r,
                       "    <stack not recorded (the depot has refused %lu stacks: its "
                       "budget, or no memory)>\n",
                       st.drops);
        else
            san_printf(r, "    <stack not recorded>\n");
        return;
    }
    san_print_words(r, w, n);
}
static crawl_action print_frame(const crawl_cf *cf, void *ctx)
{
    san_report *r = ctx;
    char line[800];
    int n = crawl_cf_format(cf, line, sizeof line);
    if (n < 0 || (size_t)n + 2 > stack_room(r)) {
        san_printf(r, "%s", cut_line);
        return CRAWL_ABORT;
    }
    san_printf(r, "%s\n", line);
    return CRAWL_CONTINUE;
}

static crawl_action first_native(const crawl_cf *cf, void *ctx)
{
    if (crawl_cf_kind(cf) != CRAWL_CF_NATIVE && crawl_cf_kind(cf) != CRAWL_CF_JIT)
        return CRAWL_CONTINUE;
    *(crawl_regs *)ctx = *crawl_cf_regs(cf);
    return CRAWL_ABORT;
}

void san_first_frame(const crawl_regs *from, crawl_regs *out)
{
    memset(out, 0, sizeof *out);
    sw_walk(from, 0, 1, first_native, out, CRAWL_WALK_SKIP_FRAMES);
}

void san_print_stack_uc(san_report *r, const ucontext_t *uc)
{
    crawl_regs regs;
    sw_regs_from_ucontext(&regs, uc);
    sw_walk(&regs, 1, 0, print_frame, r, CRAWL_WALK_FUNCTIONS_ONLY | CRAWL_WALK_SIGNAL_SAFE);
}

void san_print_stack_at(san_report *r, const crawl_regs *from)
{
    sw_walk(from, 0, 1, print_frame, r, CRAWL_WALK_FUNCTIONS_ONLY);
}

/* A copy of stderr taken early, for reports made after the program closed
 * its own (coreutils close stderr in an atexit handler). */
static int kept_stderr = -1;

void san_keep_stderr(void)
{
    if (kept_stderr < 0)
        kept_stderr = fcntl(STDERR_FILENO, F_DUPFD_CLOEXEC, 100);
}

/* 1 when fd 2 is not the program's stderr any more: closed, or closed and
 * then taken by a file opened for reading (the lowest free descriptor: a
 * program that closes stderr at exit, as coreutils do, and then libdw
 * opening a module to symbolize the report's stacks, which lost the
 * report). A stderr the program itself pointed elsewhere for writing is
 * still its stderr. */
static int gone(int fd)
{
    int fl = fcntl(fd, F_GETFL);
    return fl < 0 || (fl & O_ACCMODE) == O_RDONLY;
}

/* Descriptor 1 or 2 while the program has it, else the copy of stderr
 * kept (a report on stdout goes to stderr rather than nowhere) */
static int standard(int fd) { return gone(fd) && kept_stderr >= 0 ? kept_stderr : fd; }

int san_stderr_fd(void) { return standard(STDERR_FILENO); }

/* 1 or 2 when path names stdout or stderr, through /dev or /proc too:
 * opened by name, those follow descriptor 1 or 2 to whatever file holds it
 * now (with stderr closed at exit, a module file crawl opened to
 * symbolize: the report was lost, and as root could be appended to it).
 * Repeated slashes and leading zeros are read as the kernel reads them. */
int san_names_standard(const char *path)
{
    char norm[128];
    size_t n = 0;
    for (const char *c = path; *c && n < sizeof norm - 1; c++)
        if (!(*c == '/' && n && norm[n - 1] == '/'))
            norm[n++] = *c;
    norm[n] = '\0';
    if (strcmp(norm, "stdout") == 0 || strcmp(norm, "/dev/stdout") == 0)
        return 1;
    if (strcmp(norm, "stderr") == 0 || strcmp(norm, "/dev/stderr") == 0)
        return 2;
    char self[32];
    snprintf(self, sizeof self, "/proc/%d/fd/", (int)getpid());
    static const char *const dirs[] = {"/dev/fd/", "/proc/self/fd/", "/proc/thread-self/fd/"};
    const char *num = NULL;
    for (size_t i = 0; i < sizeof dirs / sizeof dirs[0] && !num; i++)
        if (strncmp(norm, dirs[i], strlen(dirs[i])) == 0)
            num = norm + strlen(dirs[i]);
    if (!num && strncmp(norm, self, strlen(self)) == 0)
        num = norm + strlen(self);
    if (!num)
        return 0;
    while (*num == '0' && num[1])
        num++;
    return strcmp(num, "1") == 0 ? 1 : strcmp(num, "2") == 0 ? 2 : 0;
}

int san_standard_fd(int fd) { return gone(fd) ? -1 : fd; }

int san_log_open(int *opened)
{
    const san_options *o = san_opts();
    *opened = 0;
    if (!o->log_path[0])
        return standard(STDERR_FILENO);
    int fd = san_names_standard(o->log_path);
    if (fd)
        return standard(fd);
    /* A device or a pipe (/dev/null, a FIFO a tool reads), and anything
     * else under /dev or /proc (/proc/self/fd/5, whatever the file behind
     * it is), is written as named: PATH.PID would create a new
     * file beside it (in /dev, as root). Anything else gets the .PID
     * suffix, as ASan's. */
    struct stat st;
    char path[600];
    if (strncmp(o->log_path, "/dev/", 5) == 0 || strncmp(o->log_path, "/proc/", 6) == 0 ||
        (stat(o->log_path, &st) == 0 && (S_ISCHR(st.st_mode) || S_ISFIFO(st.st_mode))))
        snprintf(path, sizeof path, "%s", o->log_path);
    else
        snprintf(path, sizeof path, "%s.%d", o->log_path, (int)getpid());
    int lf = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (lf < 0)
        return standard(STDERR_FILENO);
    *opened = 1;
    return lf;
}

void san_log_write(const char *text, size_t n)
{
    int opened;
    int fd = san_log_open(&opened);
    int failed = crawl__write_all(fd, text, n) != 0;
    if (opened)
        failed |= close(fd) != 0;
    if (failed && opened)                /* log_path would not take it: stderr then */
        crawl__write_all(standard(STDERR_FILENO), text, n);
}

static void emit(san_report *r, int may_halt)
{
    const san_options *o = san_opts();
    if (may_halt && o->halt_on_error)
        san_printf(r, "==%d==ABORTING\n", (int)getpid());
    san_log_write(r->text, r->used);
    __atomic_add_fetch(&reports, 1, __ATOMIC_RELAXED);
    if (callback)
        callback(r->text, callback_ctx);
    int halt = may_halt && o->halt_on_error;
    crawl__unlock(&report_lock);
    if (halt)
        abort();
}

void san_report_end(san_report *r)
{
    emit(r, 1);
}

void san_report_emit(san_report *r)
{
    emit(r, 0);
}

/* ---- the public producer API: the same path for reports of other libraries ---- */

crawl_report *crawl_report_begin(void)
{
    return san_report_begin();
}

void crawl_report_printf(crawl_report *r, const char *fmt, ...)
{
    if (!r)
        return;
    va_list ap;
    va_start(ap, fmt);
    vprint(r, fmt, ap);
    va_end(ap);
}

void crawl_report_trace(crawl_report *r, uint32_t depot_id)
{
    if (r)
        san_print_depot_trace(r, depot_id);
}

typedef struct skipping {
    san_report *r;
    unsigned skip;                      /* native frames still to leave out */
    unsigned dropped;                   /* frames left out: #0 is the first printed */
} skipping;

static crawl_action print_after_skip(const crawl_cf *cf, void *ctx)
{
    skipping *s = ctx;
    if (s->skip) {
        if (crawl_cf_kind(cf) == CRAWL_CF_NATIVE)
            s->skip--;
        s->dropped++;
        return CRAWL_CONTINUE;
    }
    crawl_cf renumbered = *cf;
    renumbered.depth -= s->dropped;
    return print_frame(&renumbered, s->r);
}

void crawl_report_stack(crawl_report *r, unsigned skip)
{
    crawl_regs here;
    crawl_capture_regs(&here);
    if (r) {
        skipping s = {r, skip, 0};
        sw_walk(&here, 0, 1, print_after_skip, &s, CRAWL_WALK_FUNCTIONS_ONLY);
    }
    CRAWL__NO_TAIL(r);
}

void crawl_report_end(crawl_report *r)
{
    if (r)
        san_report_end(r);
}
