/* Tracebacks and fatal signals. */
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "vm/trace.h"
#include "vm/value.h"
#include "vm/vm.h"

/* ---- tracebacks -------------------------------------------------------------- */

typedef struct tb {
    int fd;
    int skip_to_vm;                     /* drop the C frames of crawlvm's own error/trace code */
    char last[800];                     /* the last line printed, and how often it came again */
    unsigned repeats;
    unsigned printed, omitted;          /* lines written; frames past the limit */
} tb;

#define MAX_TRACEBACK_LINES 100         /* then "[... N more frames not shown]" */

#define MAX_NAME_SHOWN 256              /* bytes of a function's name in a line */
#define MAX_FILE_SHOWN 400              /* and of its file's path (its end) */

#define REPEATS_SHOWN 3                 /* then "[previous line repeated N more times]" */

static void flush_repeats(tb *t)
{
    if (t->repeats > REPEATS_SHOWN) {
        char note[96];
        int n = snprintf(note, sizeof note, "  [previous line repeated %u more times]\n",
                         t->repeats - REPEATS_SHOWN);
        vm_write_all(t->fd, note, (size_t)n);
    }
    t->repeats = 0;
}

/* Print a traceback line, collapsing runs of the same line (deep recursion). */
static void emit_line(tb *t, const char *line, size_t n)
{
    if (strcmp(line, t->last) == 0) {
        if (++t->repeats <= REPEATS_SHOWN && t->printed < MAX_TRACEBACK_LINES) {
            t->printed++;
            vm_write_all(t->fd, line, n);
        }
        return;
    }
    flush_repeats(t);
    snprintf(t->last, sizeof t->last, "%s", line);
    if (t->printed >= MAX_TRACEBACK_LINES) {
        t->omitted++;
        return;
    }
    t->printed++;
    vm_write_all(t->fd, line, n);
}

static void finish_traceback(tb *t)
{
    flush_repeats(t);
    if (t->omitted) {
        char note[96];
        int n = snprintf(note, sizeof note, "  [... %u more frames not shown]\n", t->omitted);
        vm_write_all(t->fd, note, (size_t)n);
    }
}

static crawl_action tb_frame(const crawl_cf *cf, void *ctx)
{
    tb *t = ctx;
    char text[700], line[800];
    int n;
    if (t->skip_to_vm && crawl_cf_kind(cf) != CRAWL_CF_VM)
        return CRAWL_CONTINUE;
    t->skip_to_vm = 0;
    if (crawl_cf_kind(cf) == CRAWL_CF_VM) {
        /* a name or a path too long for the line is cut ("..."), so that
         * the line always ends with where the frame is */
        const proto *p = crawl_cf_method(cf);
        size_t file_len = strlen(p->file);
        int name_cut = strlen(p->name) > MAX_NAME_SHOWN, file_cut = file_len > MAX_FILE_SHOWN;
        n = snprintf(line, sizeof line, "  %.*s%s at %s%s:%d\n", MAX_NAME_SHOWN, p->name,
                     name_cut ? "..." : "", file_cut ? "..." : "",
                     p->file + (file_cut ? file_len - MAX_FILE_SHOWN : 0),
                     vm_proto_line(p, (uint32_t)crawl_cf_ip(cf)));
    } else {
        crawl_cf_describe(cf, text, sizeof text);
        n = snprintf(line, sizeof line, "  [C] %s\n", text);
    }
    if (n > 0)
        emit_line(t, line, (size_t)n < sizeof line ? (size_t)n : sizeof line - 1);
    return CRAWL_CONTINUE;
}

static unsigned traceback_flags(const vm_state *v)
{
    return v->native_traces ? v->walk_flags
                            : v->walk_flags | CRAWL_WALK_SKIP_NATIVE | CRAWL_WALK_FUNCTIONS_ONLY;
}

void vm_print_traceback(vm_state *v, int fd, const char *title)
{
    vm_write_all(fd, title, strlen(title));
    vm_write_all(fd, "\n", 1);
    tb t = {.fd = fd, .skip_to_vm = 1};
    crawl_walk(tb_frame, &t, traceback_flags(v));
    finish_traceback(&t);
}

/* ---- fatal signals in native code ---------------------------------------------- */

static vm_state *fatal_vm;

static void on_fatal(int sig, siginfo_t *si, void *uc)
{
    char head[160];
    int n = snprintf(head, sizeof head, "crawlvm: fatal signal %d (%s) at address %p\n", sig,
                     strsignal(sig), si->si_addr);
    vm_write_all(STDERR_FILENO, head, (size_t)n);
    vm_write_all(STDERR_FILENO, "Traceback (most recent call first):\n", 36);
    /* Symbolizing allocates: not async-signal-safe, but the process is
     * dying and this is the report it exists to give. */
    tb t = {.fd = STDERR_FILENO};       /* here the top C frames are the crash */
    crawl_walk_context(uc, tb_frame, &t, fatal_vm ? fatal_vm->walk_flags : 0);
    finish_traceback(&t);
    signal(sig, SIG_DFL);
    raise(sig);                          /* delivered when the handler returns */
}

void vm_install_fatal_handlers(vm_state *v)
{
    static char altstack[256 * 1024];
    fatal_vm = v;
    stack_t ss = {.ss_sp = altstack, .ss_size = sizeof altstack};
    sigaltstack(&ss, NULL);
    struct sigaction sa = {.sa_sigaction = on_fatal, .sa_flags = SA_SIGINFO | SA_ONSTACK};
    sigemptyset(&sa.sa_mask);
    /* not SIGABRT: an abort follows a report (crawl's or the sanitizer's)
     * that already says what happened */
    const int sigs[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL};
    for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++)
        sigaction(sigs[i], &sa, NULL);
}
