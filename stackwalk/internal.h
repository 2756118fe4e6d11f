/* Private to the stackwalk layer and the layers above it. */
#ifndef CRAWL_STACKWALK_INTERNAL_H
#define CRAWL_STACKWALK_INTERNAL_H

#define UNW_LOCAL_ONLY
#include <libunwind.h>
#include <stdatomic.h>

#include <crawl/stackwalk.h>

#include "frames/internal.h"

/* stackwalk's slots in crawl__thread.counts: precise steps the CFI rule
 * cache served (crawl_cfi_cache_stats' hits). */
enum { SW_COUNT_CFI_HITS = 0 };
_Static_assert(SW_COUNT_CFI_HITS < CRAWL__THREAD_COUNTS, "frames keeps too few counts");

/* ---- code ranges (code_range.c) ----------------------------------------- */
typedef struct sw_range_table {
    size_t n;
    crawl_code_range r[];                /* sorted by start, disjoint */
} sw_range_table;

/* Readers bracket their use of the table; a writer frees a replaced table
 * only when no reader is inside. Both calls are lock-free. enter returns
 * NULL (and registers nothing) when no range is registered; pass its
 * result to exit. */
const sw_range_table *sw_ranges_enter(void);
void sw_ranges_exit(const sw_range_table *t);
const crawl_code_range *sw_range_lookup(const sw_range_table *t, uintptr_t ip);

/* ---- libunwind, loaded with dlopen(RTLD_LOCAL) (unwind_dwarf.c) --------- */
typedef struct sw_unw_api {
    int (*init_local2)(unw_cursor_t *, unw_context_t *, int);
    int (*step)(unw_cursor_t *);
    int (*get_reg)(unw_cursor_t *, unw_regnum_t, unw_word_t *);
    int (*is_signal_frame)(unw_cursor_t *);
} sw_unw_api;

/* The API, or NULL if libunwind could not be loaded. */
const sw_unw_api *sw_unw(void);

/* ---- loaded modules (modules.c) and their compiled CFI (cfi_cache.c) ---- */
#include "stackwalk/cfi_rule.h"

/* One module's CFI compiled to a sorted table: rule[i] applies to the pcs
 * from bias + off[i] up to bias + off[i+1]. Immutable once published. */
typedef struct sw_rules {
    size_t n;
    uint32_t *off;
    uint64_t *rule;
} sw_rules;

typedef struct sw_module {
    struct sw_module *next;             /* modules.c's list, under its lock */
    uintptr_t bias;                     /* dlpi_addr */
    uintptr_t eh_frame_hdr;             /* PT_GNU_EH_FRAME in memory, or 0 */
    atomic_int permanent;               /* can never be unloaded (a pin may set it later) */
    atomic_int compiled;                /* sw_rules_compile ran (set under modules.c's lock) */
    atomic_uint singles;                /* rules read one pc at a time before compiling */
    int seen;
    _Atomic(const sw_rules *) rules;    /* NULL: not compiled (yet), or no CFI */
    char name[];
} sw_module;

typedef struct sw_seg {
    uintptr_t lo, hi;                   /* an executable PT_LOAD segment */
    sw_module *mod;
} sw_seg;

/* The rule cache: direct-mapped, keyed by pc (or return address - 1),
 * filled lock-free by any walk, signal handlers included. A writer claims
 * a slot by swapping its key to SW_SLOT_BUSY, stores the rule, then the
 * key; a reader re-reads the key after the rule. */
typedef struct sw_cfi_slot {
    _Atomic uintptr_t key;
    _Atomic uint64_t rule;
} sw_cfi_slot;
#define SW_CFI_SLOT_BITS 16
#define SW_CFI_SLOTS (1u << SW_CFI_SLOT_BITS)
#define SW_SLOT_BUSY ((uintptr_t)1)

typedef struct sw_snapshot {
    unsigned long adds, subs;           /* dl_iterate_phdr's counters when built */
    sw_cfi_slot *cache;                 /* rules of pcs in these modules */
    size_t n;
    sw_seg seg[];                       /* sorted by lo, disjoint */
} sw_snapshot;

/* Bracket every use of a snapshot on the attached thread th (lock-free,
 * async-signal-safe, no shared write). The snapshot stays valid until the
 * matching exit, even if replaced. NULL only if crawl could not build one
 * at start-up. */
const sw_snapshot *sw_snap_enter(crawl__thread *th);
void sw_snap_exit(crawl__thread *th);
/* The current snapshot, rebuilt first if modules were loaded or unloaded
 * since. Normal context only (the loader's lock). Call between enter and
 * exit. */
const sw_snapshot *sw_snap_refresh(void);
/* m's rules, compiling them now if needed. Normal context only. */
const sw_rules *sw_module_rules(sw_module *m);
/* Compile the modules that hold pcs[0..n) (those not compiled yet), so that
 * a signal-safe walk through any of their code finds its rules: whatever
 * the walk that found the pcs read (single rules, the CFI cache, a memo).
 * Normal context; pcs in no module are skipped. */
void sw_modules_compile_at(const uintptr_t *pcs, unsigned n);
/* threads.c: the signal crawl_walk_thread sends (or will send by default). */
int sw_walk_signal_now(void);
/* threads.c: inside a crawl_walk_thread callback, the stopped thread's
 * general-purpose registers as its signal found them (rax...r15, rsp,
 * rip: SW_GPRS values, in that order) into out; 0, or -1 outside one. */
#define SW_GPRS 17
int sw_walk_thread_gprs(uintptr_t out[SW_GPRS]);
/* th's walk memos, [*lo, *hi) (0, 0: none yet). They keep stack words a
 * walk read, register values among them: the leak check leaves them out. */
void sw_memo_range(const crawl__thread *th, uintptr_t *lo, uintptr_t *hi);
/* Compile every loaded module; the number with CFI, or a negative errno. */
int sw_modules_warm(void);
/* cfi_cache.c: read a module's CFI into a table (normal context, under
 * modules.c's lock); NULL if it has none. */
sw_rules *sw_rules_compile(const sw_module *m);
/* The rule for one pc of m, read from its CFI through libdw: what the
 * compiled table would say there; 0 when libdwfl has no CFI for the module
 * (the caller compiles it instead). Normal context (allocates, takes the
 * libdwfl lock). */
uint64_t sw_rule_single(const sw_module *m, uintptr_t pc);
/* How many pcs of a module are read one at a time before the module is
 * compiled whole: a walk through a few pcs of a large library (libc: 60M
 * instructions to compile) then costs a few libdw lookups; a module walked
 * through many pcs is compiled as before. */
#define SW_SINGLES_MAX 256
void sw_rules_free(sw_rules *r);

/* ---- the libdwfl session (dwfl.c), for symbolize.c and cfi_cache.c ------ */
typedef struct Dwfl_Module Dwfl_Module;
/* Hold the lock across every use of the session and what it returns. */
void sw_dwfl_lock(void);
void sw_dwfl_unlock(void);
/* The module whose mapped range holds pc (the session is built, or rebuilt
 * once, as needed), or NULL. Under the lock. */
Dwfl_Module *sw_dwfl_module(uintptr_t pc);
/* The loaded modules changed: end the session (takes the lock). */
void sw_dwfl_forget(void);
/* fork: phase 0 takes the lock (after modules.c's), 1 releases it. */
void sw_dwfl_fork(int phase);

static inline const sw_seg *sw_seg_find(const sw_snapshot *s, uintptr_t pc)
{
    if (!s || s->n == 0 || pc < s->seg[0].lo)
        return NULL;
    size_t lo = 0, hi = s->n;            /* last segment with lo <= pc */
    while (hi - lo > 1) {
        size_t mid = lo + (hi - lo) / 2;
        if (s->seg[mid].lo <= pc)
            lo = mid;
        else
            hi = mid;
    }
    return pc < s->seg[lo].hi ? &s->seg[lo] : NULL;
}

/* The rule for key after a cache miss: from the module's table (compiled
 * now in normal context), cached. 0 if key is in no module. In signal-safe
 * walks a module not compiled yet gives SW_RULE_OTHER. Lock-free when
 * signal_safe. sparse (normal context): a module not compiled yet gives
 * the rule for key alone (sw_rule_single) for its first SW_SINGLES_MAX
 * lookups. */
uint64_t sw_rule_lookup(const sw_snapshot *s, uintptr_t key, int signal_safe, int sparse);
void sw_cfi_count_fallback(void);

/* ---- the native cursor (cursor.c, step.c, unwind_dwarf.c) -------------- */
/* SW_ASK: the inline steps cannot decide; sw_step (the slow path) will. */
enum { SW_OK = 0, SW_END = 1, SW_STOP = 2, SW_CORRUPT = 3, SW_ASK = 4 };

/* ---- the decision trace, CRAWL_DEBUG=unwind (debug.c) -------------------- */
extern int sw_debug_on;
void sw_debug_print(const char *fmt, ...) __attribute__((format(printf, 1, 2), cold));
const char *sw_status_name(int st);
#define SW_DEBUG(...)                                                                          \
    do {                                                                                       \
        if (__builtin_expect(sw_debug_on, 0))                                                  \
            sw_debug_print(__VA_ARGS__);                                                       \
    } while (0)

/* libunwind's state: large (about 2 KiB), so kept apart from sw_cursor and
 * never zero-filled; only precise walks in normal context touch it. */
typedef struct sw_dwarf {
    unw_cursor_t unw;
    ucontext_t uctx;                    /* register source for libunwind */
} sw_dwarf;

/* A segment known to be code, kept by value so a loop holds it in registers. */
typedef struct sw_hint {
    uintptr_t lo, len;
} sw_hint;

typedef struct sw_cursor {
    crawl_regs regs;                    /* the current frame */
    unsigned exact;                     /* regs.ip is an exact pc */
    unsigned need_init;                 /* precise: libunwind not yet positioned at regs */
    unsigned from_signal;               /* precise: regs came from a signal context */
    uintptr_t lo, hi;                   /* the thread's stack */
    uintptr_t alo, ahi;                 /* the signal stack in use, or 0, 0 */
    const sw_range_table *ranges;
    sw_dwarf *dwarf;                    /* NULL: fast (frame-pointer) mode */
    const sw_snapshot *snap;            /* loaded modules and the rule cache */
    sw_hint hint;                       /* the segment of the last pc found to be code */
    unsigned precise;
    unsigned cfi;                       /* precise: use compiled rules (else libunwind only) */
    unsigned signal_safe;
    unsigned sparse;                    /* SW_WALK_SPARSE_CFI */
    unsigned refreshed;                 /* normal context: snap checked against the loader */
    unsigned long hits;                 /* steps served by the rule cache */
    const char *why;                    /* the slow path's reason for its last answer */
    uintptr_t tlo, tlen;                /* sw_sigtramp_lo/len when the walk started */
} sw_cursor;

/* Where signal trampolines are (libc's __restore_rt, and any other code
 * whose CFI marks a signal frame): one range that holds every one found,
 * [sw_sigtramp_lo, + sw_sigtramp_len), empty until one is. Fast walks step
 * out of a frame in it by the slow path (the ucontext), not by the frame
 * pointer, which would skip the interrupted frames: a handler's saved rbp
 * is whatever rbp the interrupted code had. Found in libc and the vDSO as
 * modules.c meets them, and in any module whose CFI is read. */
extern _Atomic uintptr_t sw_sigtramp_lo, sw_sigtramp_len;
/* Widen the range to hold [lo, hi). Async-signal-safe (CAS loops). */
void sw_sigtramp_note(uintptr_t lo, uintptr_t hi);
/* Note m's signal trampolines: its FDEs whose CIE has the 'S' augmentation,
 * from its .eh_frame_hdr (normal context: reads the module's CFI). */
void sw_sigtramp_scan(const sw_module *m);

void sw_cursor_init(sw_cursor *c, const crawl__thread *th, const crawl_regs *regs,
                    unsigned exact, sw_dwarf *dwarf, const sw_range_table *ranges);
/* Reposition c at regs (resuming from a transition Frame). */
void sw_cursor_reset(sw_cursor *c, const crawl_regs *regs, unsigned exact);
/* Move to the caller, by every means the mode allows. SW_OK: c->regs is the
 * caller. SW_END: the stack ends here. SW_STOP: unwinding cannot go on
 * (no rule, the caller would not be code). SW_CORRUPT: the stack is
 * inconsistent. */
int sw_step(sw_cursor *c);
int sw_step_dwarf(sw_cursor *c);
int sw_step_range(sw_cursor *c, const crawl_code_range *r);

/* [a, a+size) inside the thread's stack or the signal stack in use. One
 * unsigned comparison per region: a below lo wraps to a huge offset. */
static inline int sw_in_stack(const sw_cursor *c, uintptr_t a, size_t size)
{
    if (a - c->lo <= c->hi - c->lo - size)
        return 1;
    return c->ahi && a - c->alo <= c->ahi - c->alo - size;
}

/* Stack addresses in walk order. With a signal stack in use, everything on
 * it is newer than anything on the thread's stack, wherever the two lie in
 * memory; within one stack, lower is newer. Without one, the identity. */
static inline uintptr_t sw_key(const sw_cursor *c, uintptr_t a)
{
    if (!c->ahi)
        return a;
    if (a - c->alo < c->ahi - c->alo)
        return a - c->alo;
    return a - c->lo + (c->ahi - c->alo);
}

/* sp may only move towards the stack base, or once from the signal stack
 * to the thread's stack. */
static inline int sw_progress(const sw_cursor *c, uintptr_t old_sp, uintptr_t new_sp)
{
    return sw_key(c, new_sp) > sw_key(c, old_sp);
}

/* sw_is_code's search, out of line to keep walk loops small (step.c). */
int sw_is_code_slow(const sw_snapshot *snap, const sw_range_table *ranges, sw_hint *hint,
                    uintptr_t pc);

/* Is a return address (or, exact, a pc) inside executable code: a loaded
 * module's executable segment or a JIT code range? *hint caches the last
 * segment found, so the common case is one subtraction and a compare. */
static inline __attribute__((always_inline)) int sw_is_code(const sw_cursor *c, sw_hint *hint,
                                                            uintptr_t ip, int exact)
{
    uintptr_t pc = exact ? ip : ip - 1;
    if (__builtin_expect(pc - hint->lo < hint->len, 1))
        return 1;
    return sw_is_code_slow(c->snap, c->ranges, hint, pc);
}

/* One frame-pointer step on (ip, sp, fp): SW_OK, SW_END (fp leaves the
 * stack, or a zero return address), SW_CORRUPT (fp misaligned or not older
 * than sp). Inline because the fast walk's loop is built around it. */
static inline int sw_fp_next(const sw_cursor *c, uintptr_t *ip, uintptr_t *sp, uintptr_t *fp)
{
    uintptr_t f = *fp;
    if (!sw_in_stack(c, f, 2 * sizeof(uintptr_t)))
        return SW_END;
    /* f not older than sp, in walk order; then nsp = f+16 is older too */
    if ((f & (sizeof(uintptr_t) - 1)) || sw_key(c, f) < sw_key(c, *sp))
        return SW_CORRUPT;
    uintptr_t nip = ((const uintptr_t *)f)[1];
    uintptr_t nsp = f + 16;
    if (nip == 0)
        return SW_END;
    *ip = nip;
    *sp = nsp;
    *fp = ((const uintptr_t *)f)[0];
    return SW_OK;
}

/* The rule in a cache slot for key, or 0 if the slot holds another key
 * (or is being written). */
static inline __attribute__((always_inline)) uint64_t sw_rule_get_at(const sw_cfi_slot *slot,
                                                                     uintptr_t key,
                                                                     unsigned long *hits)
{
    if (atomic_load_explicit(&slot->key, memory_order_acquire) == key) {
        uint64_t rule = atomic_load_explicit(&slot->rule, memory_order_acquire);
        if (atomic_load_explicit(&slot->key, memory_order_relaxed) == key) {
            ++*hits;
            return rule;
        }
    }
    return 0;
}

/* The rule for key: from the cache (two loads when it hits), else looked up. */
static inline __attribute__((always_inline)) uint64_t sw_rule_get(const sw_cursor *c, uintptr_t key, unsigned long *hits)
{
    const sw_cfi_slot *slot = &c->snap->cache[sw_rule_hash(key) >> (64 - SW_CFI_SLOT_BITS)];
    if (atomic_load_explicit(&slot->key, memory_order_acquire) == key) {
        uint64_t rule = atomic_load_explicit(&slot->rule, memory_order_acquire);
        if (atomic_load_explicit(&slot->key, memory_order_relaxed) == key) {
            ++*hits;
            return rule;
        }
    }
    return sw_rule_lookup(c->snap, key, c->signal_safe, c->sparse);
}

/* Apply rule to (ip, sp, fp), as sw_fp_next does by frame pointers:
 * SW_OK, SW_END, SW_CORRUPT, or SW_ASK (no rule this walk may apply). The
 * caller found is not checked to be code. */
static inline __attribute__((always_inline)) int sw_rule_apply(const sw_cursor *c, uint64_t rule,
                                                               uintptr_t *ip, uintptr_t *sp,
                                                               uintptr_t *fp)
{
    unsigned flags = sw_rule_flags(rule);
    /* A module that may have been unloaded: only after checking the loader
     * (normal context, once per walk), never in signal context. */
    if (!(flags & SW_RULE_TRUSTED) && (c->signal_safe || !c->refreshed))
        return SW_ASK;
    if (flags & SW_RULE_END)
        return SW_END;
    if (!(flags & SW_RULE_VALID))
        return SW_ASK;
    uintptr_t cfa = ((flags & SW_RULE_CFA_FP) ? *fp : *sp) + (uintptr_t)sw_rule_cfa_off(rule);
    uintptr_t ra_at = cfa + (uintptr_t)sw_rule_ra_off(rule);
    /* the CFA is the sp before a call: aligned, on the stack, older */
    if ((cfa & (sizeof(uintptr_t) - 1)) || !sw_in_stack(c, ra_at, sizeof(uintptr_t)) ||
        !sw_progress(c, *sp, cfa))
        return SW_CORRUPT;
    uintptr_t nfp = *fp;
    if (flags & SW_RULE_FP_SAVED) {
        uintptr_t fp_at = cfa + (uintptr_t)sw_rule_fp_off(rule);
        if (!sw_in_stack(c, fp_at, sizeof(uintptr_t)))
            return SW_CORRUPT;
        nfp = *(const uintptr_t *)fp_at;
    }
    uintptr_t nip = *(const uintptr_t *)ra_at;
    if (nip == 0)
        return SW_END;
    *ip = nip, *sp = cfa, *fp = nfp;
    return SW_OK;
}

/* "The caller is not code": stop, unless a normal-context walk has not
 * asked the loader yet (the code may be newly loaded). */
static inline int sw_not_code(const sw_cursor *c)
{
    return c->signal_safe || c->refreshed ? SW_STOP : SW_ASK;
}

/* One step on (ip, sp, fp) by the compiled CFI rule: sw_rule_apply, and the
 * caller found must be code (SW_STOP or SW_ASK otherwise). */
static inline __attribute__((always_inline)) int sw_cfi_next(const sw_cursor *c, sw_hint *hint,
                                                             unsigned long *hits, uintptr_t *ip,
                                                             uintptr_t *sp, uintptr_t *fp,
                                                             int exact)
{
    if (!c->snap)
        return SW_ASK;
    uintptr_t nip = *ip, nsp = *sp, nfp = *fp;
    int st = sw_rule_apply(c, sw_rule_get(c, exact ? *ip : *ip - 1, hits), &nip, &nsp, &nfp);
    if (st != SW_OK)
        return st;
    if (!sw_is_code(c, hint, nip, 0))
        return sw_not_code(c);
    *ip = nip, *sp = nsp, *fp = nfp;
    return SW_OK;
}

/* ---- walking (walk.c) --------------------------------------------------- */
/* Walk from regs (the frame of the function that captured them, skip
 * frames of crawl's own are not reported). gregs: a signal context's
 * registers, or NULL. */
/* gdb_jit.c: announce a named code range to debuggers, withdraw it. */
void sw_gdb_jit_add(uintptr_t start, uintptr_t end, const char *name);
void sw_gdb_jit_remove(uintptr_t start);

/* threads.c: on signal sig, fn(arg) runs on a helper thread that takes no
 * signal (the handler writes a byte to a pipe). 0 or a negative errno. */
int sw_on_signal_run(int sig, void (*fn)(void *), void *arg);
/* 1 for a signal no helper may take (sw_on_signal_run refuses it with
 * -EINVAL): one no handler can catch, one a fault raises (a crash would
 * run the work and fault again, for ever), SIGPROF (the profiler's),
 * glibc's own two (SIGCANCEL,
 * SIGSETXID), crawl's walk signal (other threads' walks would then never
 * answer). */
int sw_signal_refused(int sig);
/* Signals taken whose work fn (given to sw_on_signal_run) has not
 * finished yet: queued or running. Async-signal-safe (loads). */
int sw_signal_work_pending(void (*fn)(void *));

/* An internal walk flag (sw_walk, sw_backtrace; normal context): rules of
 * modules not compiled yet are read one pc at a time first (cfi_cache.c).
 * Such a walk does not compile the module: signal-safe walks can use the
 * rules it read (cached) at those pcs only. */
#define SW_WALK_SPARSE_CFI (1u << 31)

/* The pcs above the frame whose registers are regs (as sw_walk with skip 1
 * would report them), without a callback: at most max. */
unsigned sw_backtrace(const crawl_regs *regs, uintptr_t *pcs, unsigned max, unsigned flags);

/* A caller's word kept with the walk memo (walk.c) that describes one
 * backtrace exactly: the sanitizer keeps the depot id of those pcs there,
 * so a stack replayed whole from the memo skips the depot. */
typedef struct sw_memo_tag {
    void *memo;                         /* the memo, or NULL: nothing to keep */
    unsigned long gen;                  /* its generation when the walk ended */
    unsigned skip, max;                 /* the walk's: a tag is for these pcs only */
    uint32_t tag;                       /* the word kept for these pcs, or 0 */
} sw_memo_tag;
/* sw_backtrace, and in *t the memo that holds exactly these pcs (if any)
 * and the word kept with them (0 if none). */
unsigned sw_backtrace_tagged(const crawl_regs *regs, uintptr_t *pcs, unsigned max, unsigned flags,
                             sw_memo_tag *t);
/* The word kept with the memo that sw_backtrace_tagged(regs, max, flags)
 * would replay whole, if its walk still holds (the stack words it read
 * unchanged), without the walk: 0 if none (then walk). Normal context. */
uint32_t sw_memo_probe(const crawl_regs *regs, unsigned max, unsigned flags);
/* Keep tag with t's memo, if it still holds the same walk. */
void sw_memo_set_tag(const sw_memo_tag *t, uint32_t tag);
crawl_walk_status sw_walk(const crawl_regs *regs, unsigned exact, unsigned skip,
                          crawl_walk_fn fn, void *ctx, unsigned flags);
void sw_regs_from_ucontext(crawl_regs *r, const ucontext_t *uc);

/* "function file:line" or "function (module+0xoff)" for a native pc (a
 * return address unless exact). snprintf-like; not signal-safe. */
int sw_describe_pc(uintptr_t pc, int exact, char *buf, size_t len);

#endif
