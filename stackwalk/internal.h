/* Private to the stackwalk layer and the layers above it. */
#ifndef CRAWL_STACKWALK_INTERNAL_H
#define CRAWL_STACKWALK_INTERNAL_H

#define UNW_LOCAL_ONLY
#include <libunwind.h>
#include <stdatomic.h>

#include <crawl/stackwalk.h>

#include "frames/internal.h"

/* What a walk callback sees (opaque in the public headers). */
struct crawl_cf {
    crawl_kind kind;
    unsigned flags;
    unsigned depth;
    uintptr_t ip, sp;
    crawl_frame *frame;
    const void *method;
    const crawl_regs *regs;
    const crawl_vm_frame *vm;
    const char *name;
};

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

/* ---- the native cursor (unwind_fp.c, unwind_dwarf.c) -------------------- */
enum { SW_OK = 0, SW_END = 1, SW_STOP = 2, SW_CORRUPT = 3, SW_ASK_LIBUNWIND = 4 };

/* libunwind's state: large (about 2 KiB), so kept apart from sw_cursor and
 * never zero-filled; only precise walks touch it. */
typedef struct sw_dwarf {
    unw_cursor_t unw;
    ucontext_t uctx;                    /* register source for libunwind */
} sw_dwarf;

typedef struct sw_cursor {
    crawl_regs regs;                    /* the current frame */
    unsigned exact;                     /* regs.ip is an exact pc */
    unsigned need_init;                 /* precise: libunwind not yet positioned at regs */
    unsigned from_signal;               /* precise: regs came from a signal context */
    uintptr_t lo, hi;                   /* the thread's stack */
    uintptr_t alo, ahi;                 /* the signal stack in use, or 0, 0 */
    const sw_range_table *ranges;
    sw_dwarf *dwarf;                    /* NULL: fast (frame-pointer) mode */
    unsigned cfi;                       /* precise: try the CFI cache first (cfi_cache.c) */
    unsigned signal_safe;
} sw_cursor;

void sw_cursor_init(sw_cursor *c, const crawl__thread *th, const crawl_regs *regs,
                    unsigned exact, sw_dwarf *dwarf, const sw_range_table *ranges);
/* Reposition c at regs (resuming from a transition Frame). */
void sw_cursor_reset(sw_cursor *c, const crawl_regs *regs, unsigned exact);
/* Move to the caller. SW_OK: c->regs is the caller. SW_END: the stack ends
 * here. SW_STOP: unwinding cannot go on (no unwind info). SW_CORRUPT: the
 * stack is inconsistent. */
int sw_step(sw_cursor *c);
int sw_step_fp(sw_cursor *c);
int sw_step_dwarf(sw_cursor *c);
int sw_step_rule(sw_cursor *c, const crawl_code_range *r);
/* cfi_cache.c: one step by a cached CFI rule; SW_ASK_LIBUNWIND when the
 * rule is not a simple one or (c->signal_safe) not known to be safe to use. */
int sw_step_cfi(sw_cursor *c);

/* Flush rules if a module was unloaded since the last check (normal context). */
void sw_cfi_check_generation(void);

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

/* One frame-pointer step on (ip, sp, fp); see unwind_fp.c for the rules.
 * Inline because the fast walk's loop is built around it. */
static inline int sw_fp_step(const sw_cursor *c, uintptr_t *ip, uintptr_t *sp, uintptr_t *fp)
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

/* The rule table, for the inline step below (cfi_cache.c owns it). */
typedef struct sw_cfi_slot {
    _Atomic uintptr_t key;
    _Atomic uint64_t rule;
} sw_cfi_slot;
#define SW_CFI_SLOT_BITS 16
#define SW_CFI_VALID 1u
#define SW_CFI_CFA_FP 4u
#define SW_CFI_FP_SAVED 8u
#define SW_CFI_PERMANENT 16u
sw_cfi_slot *sw_cfi_table(void);
/* The rule for key after a miss: fills in normal context; 0 if signal_safe. */
uint64_t sw_cfi_miss(uintptr_t key, int signal_safe);
void sw_cfi_count_fallback(void);

static inline int64_t sw_cfi_field12(uint64_t rule, int shift)
{
    int64_t v = (int64_t)((rule >> shift) & 0xfff);
    return v >= 2048 ? v - 4096 : v;
}

/* One precise step on (ip, sp, fp) by a cached rule, as sw_fp_step does by
 * frame pointers: SW_OK, SW_END, SW_CORRUPT, or SW_ASK_LIBUNWIND. */
static inline int sw_cfi_step(const sw_cursor *c, sw_cfi_slot *table, unsigned long *hits,
                              uintptr_t *ip, uintptr_t *sp, uintptr_t *fp, int exact)
{
    uintptr_t key = exact ? *ip : *ip - 1;
    sw_cfi_slot *slot = &table[(key * 0x9E3779B97F4A7C15u) >> (64 - SW_CFI_SLOT_BITS)];
    uint64_t rule = 0;
    if (atomic_load_explicit(&slot->key, memory_order_acquire) == key) {
        rule = atomic_load_explicit(&slot->rule, memory_order_acquire);
        if (atomic_load_explicit(&slot->key, memory_order_acquire) != key ||
            (c->signal_safe && !((rule >> 56) & SW_CFI_PERMANENT)))
            rule = 0;
        else
            ++*hits;
    }
    if (!rule)
        rule = sw_cfi_miss(key, c->signal_safe);
    unsigned flags = (unsigned)(rule >> 56);
    if (!(flags & SW_CFI_VALID))
        return SW_ASK_LIBUNWIND;
    uintptr_t cfa = ((flags & SW_CFI_CFA_FP) ? *fp : *sp) + (uintptr_t)(int64_t)(int32_t)(uint32_t)rule;
    uintptr_t ra_at = cfa + (uintptr_t)sw_cfi_field12(rule, 32);
    if (!sw_in_stack(c, ra_at, sizeof(uintptr_t)) || !sw_progress(c, *sp, cfa))
        return SW_CORRUPT;
    uintptr_t nfp = *fp;
    if (flags & SW_CFI_FP_SAVED) {
        uintptr_t fp_at = cfa + (uintptr_t)sw_cfi_field12(rule, 44);
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

/* ---- walking (walk.c) --------------------------------------------------- */
/* Walk from regs (the frame of the function that captured them, skip
 * frames of crawl's own are not reported). gregs: a signal context's
 * registers, or NULL. */
crawl_walk_status sw_walk(const crawl_regs *regs, unsigned exact, unsigned skip,
                          crawl_walk_fn fn, void *ctx, unsigned flags);
void sw_regs_from_ucontext(crawl_regs *r, const ucontext_t *uc);

/* "function file:line" or "function (module+0xoff)" for a native pc (a
 * return address unless exact). snprintf-like; not signal-safe. */
int sw_describe_pc(uintptr_t pc, int exact, char *buf, size_t len);

#endif
