/* Helpers for the profiling regression tests (test_order_nofp, test_junk_fp,
 * test_soak, test_cfi_signal, test_jit_gap): where a function starts and
 * ends, which addresses are executable code, and a signal-safe recorder
 * for walks taken in a handler (no allocation: every buffer is made ahead).
 *
 * Function extents come from the dynamic symbol table, so the test
 * executables are linked with ENABLE_EXPORTS (-rdynamic) and the functions
 * they classify by are global. */
#ifndef CRAWL_TEST_PROF_SUPPORT_H
#define CRAWL_TEST_PROF_SUPPORT_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <crawl/crawl.h>
#include <signal.h>
#include <sys/time.h>
#include <time.h>
#include <ucontext.h>
#include <dlfcn.h>
#include <link.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

/* ---- function extents ------------------------------------------------------- */

typedef struct fn_range {
    uintptr_t lo, hi; /* [lo, hi) */
    const char *name;
} fn_range;

/* The extent of the global function fn; 0, or -1 if the dynamic symbol
 * table does not have it (the executable was not linked with -rdynamic). */
static inline int fn_range_of(const void *fn, const char *name, fn_range *out)
{
    Dl_info di;
    const ElfW(Sym) *sym = NULL;
    memset(out, 0, sizeof *out);
    out->name = name;
    if (!dladdr1(fn, &di, (void **)&sym, RTLD_DL_SYMENT) || !sym || !di.dli_saddr ||
        (uintptr_t)di.dli_saddr != (uintptr_t)fn || sym->st_size == 0)
        return -1;
    out->lo = (uintptr_t)di.dli_saddr;
    out->hi = out->lo + sym->st_size;
    return 0;
}

static inline int fn_has(const fn_range *r, uintptr_t pc)
{
    return pc - r->lo < r->hi - r->lo;
}

/* The pc a reported ip stands for: a return address points after its call
 * (which may be a function's last instruction). */
static inline uintptr_t cf_pc(uintptr_t ip, unsigned cf_flags)
{
    return (cf_flags & CRAWL_CF_EXACT_IP) ? ip : ip - 1;
}

/* ---- executable mappings (read /proc/self/maps in normal context) ---------- */

typedef struct exec_maps {
    uintptr_t lo[512], hi[512];
    unsigned n;
} exec_maps;

static inline int exec_maps_read(exec_maps *m)
{
    m->n = 0;
    FILE *f = fopen("/proc/self/maps", "r");
    if (!f)
        return -1;
    char line[512];
    while (m->n < 512 && fgets(line, sizeof line, f)) {
        unsigned long lo, hi;
        char perms[8];
        if (sscanf(line, "%lx-%lx %7s", &lo, &hi, perms) == 3 && perms[2] == 'x') {
            m->lo[m->n] = lo;
            m->hi[m->n] = hi;
            m->n++;
        }
    }
    fclose(f);
    return 0;
}

static inline int exec_maps_has(const exec_maps *m, uintptr_t pc)
{
    for (unsigned i = 0; i < m->n; i++)
        if (pc - m->lo[i] < m->hi[i] - m->lo[i])
            return 1;
    return 0;
}

/* ---- recording a walk inside a signal handler ------------------------------ */

#define PROF_MAX_REPORTS 96

typedef struct prof_report {
    unsigned kind, flags;
    uintptr_t ip, sp;
    const crawl_frame *frame;
    const crawl_frame_type *type; /* read during the walk: the Frame may be gone later */
} prof_report;

typedef struct prof_sample {
    uintptr_t pc, sp;   /* the interrupted pc and sp, from the ucontext */
    int status;         /* crawl_walk_status */
    unsigned n;         /* reports kept (at most PROF_MAX_REPORTS) */
    unsigned truncated; /* reports dropped beyond that */
    prof_report r[PROF_MAX_REPORTS];
} prof_sample;

/* A walk callback: keep every report in the prof_sample ctx. Never aborts
 * (a long stack is truncated, not cut short), so the status stays the
 * walk's own. Async-signal-safe. */
static inline crawl_action prof_record(const crawl_cf *cf, void *ctx)
{
    prof_sample *s = ctx;
    if (s->n >= PROF_MAX_REPORTS) {
        s->truncated++;
        return CRAWL_CONTINUE;
    }
    prof_report *r = &s->r[s->n++];
    r->kind = crawl_cf_kind(cf);
    r->flags = crawl_cf_flags(cf);
    r->ip = crawl_cf_ip(cf);
    r->sp = crawl_cf_sp(cf);
    r->frame = crawl_cf_frame(cf);
    r->type = r->frame ? r->frame->type : NULL;
    return CRAWL_CONTINUE;
}

static inline int prof_is_native(const prof_report *r)
{
    return r->kind == CRAWL_CF_NATIVE || r->kind == CRAWL_CF_JIT;
}

/* Index of the first native report whose pc lies in fn, at or after from; -1. */
static inline int prof_find_fn(const prof_sample *s, const fn_range *fn, unsigned from)
{
    for (unsigned i = from; i < s->n; i++)
        if (prof_is_native(&s->r[i]) && fn_has(fn, cf_pc(s->r[i].ip, s->r[i].flags)))
            return (int)i;
    return -1;
}

/* Print one sample, symbolized (normal context only). */
static inline void prof_dump(const prof_sample *s, const char *title)
{
    static const char *kinds[] = {"native", "Frame", "vm", "jit"};
    fprintf(stderr, "-- %s: interrupted at pc=%#lx, %u reports (+%u dropped), status %d\n", title,
            (unsigned long)s->pc, s->n, s->truncated, s->status);
    for (unsigned i = 0; i < s->n; i++) {
        const prof_report *r = &s->r[i];
        char buf[512];
        const char *what = "";
        crawl_symbol sym;
        if (prof_is_native(r)) {
            what =
                crawl_symbolize(cf_pc(r->ip, r->flags), &sym, buf, sizeof buf) == 0 && sym.function
                    ? sym.function
                    : "<unknown>";
        } else if (r->type && r->type->name) {
            what = r->type->name;
        }
        fprintf(stderr, "  #%-2u %-6s ip=%#lx sp=%#lx flags=%x %s\n", i,
                kinds[r->kind < 4 ? r->kind : 0], (unsigned long)r->ip, (unsigned long)r->sp,
                r->flags, what);
    }
}

/* ---- an ITIMER_PROF sampler into a preallocated array ------------------------- */

typedef struct prof_sampler {
    prof_sample *samples;
    unsigned max;
    volatile unsigned n;
    unsigned flags;                      /* crawl_walk_context flags */
} prof_sampler;

static prof_sampler prof_the_sampler;

/* The SIGPROF handler: walk the interrupted context into the next sample. */
static inline void prof_on_sigprof(int sig, siginfo_t *si, void *ucv)
{
    (void)sig, (void)si;
    const ucontext_t *uc = ucv;
    prof_sampler *p = &prof_the_sampler;
    unsigned i = p->n;
    if (i >= p->max)
        return;
    prof_sample *s = &p->samples[i];
    s->pc = (uintptr_t)uc->uc_mcontext.gregs[REG_RIP];
    s->sp = (uintptr_t)uc->uc_mcontext.gregs[REG_RSP];
    s->n = s->truncated = 0;
    s->status = crawl_walk_context(uc, prof_record, s, p->flags);
    p->n = i + 1;
}

/* ITIMER_PROF every usec microseconds of CPU time; 0 stops it. */
static inline void prof_set_timer(long usec)
{
    struct itimerval it = {.it_interval = {0, usec}, .it_value = {0, usec}};
    setitimer(ITIMER_PROF, &it, NULL);
}

/* Run work() under ITIMER_PROF at 1 kHz of CPU time until `want` samples
 * (or max_seconds of wall time: a bail-out for a starved machine, not a
 * check), with prof_on_sigprof installed for SIGPROF. */
static inline void prof_run(void (*work)(void), unsigned want, int max_seconds)
{
    struct sigaction sa = {.sa_sigaction = prof_on_sigprof, .sa_flags = SA_SIGINFO | SA_RESTART},
                     old;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGPROF, &sa, &old);
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    prof_set_timer(1000);
    do {
        work();
        clock_gettime(CLOCK_MONOTONIC, &t);
    } while (prof_the_sampler.n < want && t.tv_sec - t0.tv_sec < max_seconds);
    prof_set_timer(0);
    signal(SIGPROF, SIG_IGN);            /* drops a tick still pending (valgrind delays them) */
    sigaction(SIGPROF, &old, NULL);
}

#endif
