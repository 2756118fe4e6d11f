/* Private to the sanitizer layer. */
#ifndef CRAWL_SANITIZER_INTERNAL_H
#define CRAWL_SANITIZER_INTERNAL_H

#include <crawl/sanitizer.h>

#include "stackwalk/internal.h"

/* options.c: the fields come from options.def */
#define SAN_FIELD_FLAG(field) int field;
#define SAN_FIELD_UINT(field) unsigned field;
#define SAN_FIELD_POW2(field) unsigned field;
#define SAN_FIELD_MB(field) size_t field;
#define SAN_FIELD_PATH(field) char field[512];
#define SAN_FIELD_FILE(field) char field[512];
typedef struct san_options {
#define SAN_OPTION(key, kind, field, def, lo, hi, help) SAN_FIELD_##kind(field)
#include "sanitizer/options.def"
#undef SAN_OPTION
} san_options;

const san_options *san_opts(void);     /* initialized on first use */
/* gpa_sample_rate as the options are now, read or not yet (no init). */
unsigned san_gpa_rate_now(void);
/* Set crawl__hook_kind from the heap profile's mode, the options and the
 * pool. Lock-free, async-signal-safe. */
void san_hook_kind_update(void);
/* Set bits of crawl__free_kind (and of the preload's copy of it).
 * Lock-free, async-signal-safe. */
void san_free_kind_or(int bits);
/* bits taken off crawl__free_kind and the preload's copies (FREE_ALL, once
 * the filter is counted again: filter_rebuild) */
void san_free_kind_clear(int bits);

/* depot.c */
void san_depot_set_budget(size_t bytes);

/* capture.c: the mixed stack above the frame whose registers are `from`
 * (a public entry point captures its own: inlining below it cannot shift
 * the first frame), into the depot. Normal-context captures read the CFI
 * of a module one pc at a time until it has been needed at SW_SINGLES_MAX
 * pcs (SW_WALK_SPARSE_CFI): a process that captures a few stacks does not
 * compile all of libc's. */
uint32_t san_capture_at(const crawl_regs *from, unsigned max, unsigned flags);
/* A capture flag: compile the CFI of every module the walk meets (no
 * reading pc by pc), for stacks whose modules a signal-safe walk needs
 * later: a pool allocation's, whose fault report walks from the fault in a
 * signal handler (only compiled modules serve it). */
#define SAN_CAPTURE_COMPILE (1u << 30)
/* The stack of a signal context, the interrupted frame first (exact pc). */
uint32_t san_capture_uc(const ucontext_t *uc, unsigned max, unsigned flags);
/* The same trace's words into out[0..cap) instead of the depot: their count. */
unsigned san_capture_words(const crawl_regs *from, unsigned max, unsigned flags,
                           uintptr_t *out, unsigned cap);
/* One line per frame of a stored trace, in the ASan frame shape, into buf:
 * whole lines only, NUL-terminated; *cut is set when one did not fit.
 * Returns the bytes written. */
size_t san_format_trace(const uintptr_t *frames, unsigned n, char *buf, size_t len, int *cut);

/* report.c */
typedef struct crawl_report san_report; /* a report being built (fixed buffer) */
san_report *san_report_begin(void);    /* takes the report lock */
san_report *san_report_begin_plain(void);   /* the same without the "=====" rule */
/* A stored trace's words (as the depot keeps them), one line a frame. */
void san_print_words(san_report *r, const uintptr_t *w, unsigned n);
/* The stack of a signal context (the faulting frame first), signal-safe walk. */
void san_print_stack_uc(san_report *r, const ucontext_t *uc);
void san_printf(san_report *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void san_print_depot_trace(san_report *r, uint32_t id);
/* The registers of the first native frame above `from` (the user's pc, bp,
 * sp for a report's first line). */
void san_first_frame(const crawl_regs *from, crawl_regs *out);
/* The calling thread's stack above the frame whose registers are `from`. */
void san_print_stack_at(san_report *r, const crawl_regs *from);
/* Emit (write, callback), release the lock; abort with halt_on_error. */
void san_report_end(san_report *r);
/* The same without the halt (the caller decides: a fault handler hands the
 * signal on). */
void san_report_emit(san_report *r);
unsigned san_thread_id(void);
/* The descriptor log_path names (stderr by default); *opened: close it after. */
int san_log_open(int *opened);
/* text[0..n) written there (opened and closed around it). */
void san_log_write(const char *text, size_t n);
/* Keep a copy of stderr now, used when the program has closed its own. */
void san_keep_stderr(void);
/* stderr, or the copy kept when the program has closed its own. */
int san_stderr_fd(void);
/* 1 or 2 when path names stdout or stderr ("stdout", /dev/stderr,
 * /dev/fd/2, /proc/self/fd/1, /proc/PID/fd/2...), else 0. */
int san_names_standard(const char *path);
/* fd (1 or 2) while the program still has it open for writing, else -1. */
int san_standard_fd(int fd);

/* fork(): each file's locks, taken before fork and released after it in
 * both processes. options.c registers them once, in one order: options,
 * reports, heap (reports and heap each take stackwalk's and frames' locks
 * inside theirs, so the sanitizer's handlers, registered after libcrawl's
 * constructors, lock first). */
void san_options_fork(int lock);
void san_report_fork(int lock);
void san_heap_fork(int lock);
void san_gpa_fork(int lock);
void san_gpa_rate_changed(void);    /* gpa_sample_rate changed: this thread draws again */
/* The guarded pool's slot table [*lo, *hi) (0, 0 before the pool): it
 * holds every live slot's address, so the leak check must not take it for
 * a root. (The pool itself is left out by crawl_gpa_owns.) */
void san_gpa_meta(uintptr_t *lo, uintptr_t *hi);
void san_hp_fork(int lock);
void san_hp_fork_child(void);
void san_leak_fork_child(void);
/* crawl_leak_check from crawl's exit handler: the calling thread's stack
 * is scanned from stack_from (above the handler's own frame) up, and regs
 * (the registers the handler found), instead of from the check's frame. */
long san_leak_check_at_exit(int fd, uintptr_t stack_from, const crawl_regs *regs);

#endif
