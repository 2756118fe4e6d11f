/* One step of the native cursor, by every means the walk's mode allows:
 * a JIT code range's registered rule, the module's compiled CFI rule, a
 * signal trampoline's saved context, then libunwind (precise walks in
 * normal context) or the frame-pointer chain (fast walks).
 *
 * Every caller found must be code (a loaded module's executable segment or
 * a code range): a value that is not is never reported as a frame; the
 * step stops instead, and the walk resumes at the next transition Frame.
 * Every load is bounds-checked against the thread's stack first, so a
 * corrupt stack ends the walk instead of faulting (cf. compiler-rt's
 * UnwindFast). The batch loop in walk.c runs the inline steps itself and
 * comes here only when they cannot decide. */
#include <stddef.h>

#include "stackwalk/internal.h"

/* Answer st, saying why for the decision trace (CRAWL_DEBUG=unwind). */
#define WHY(st, text) (c->why = (text), (st))

static inline uintptr_t load(uintptr_t a)
{
    return *(const uintptr_t *)a;
}

__attribute__((noinline)) int sw_is_code_slow(const sw_snapshot *snap,
                                              const sw_range_table *ranges, sw_hint *hint,
                                              uintptr_t pc)
{
    if (pc < 4096)
        return 0;
    const sw_seg *g = sw_seg_find(snap, pc);
    if (g) {
        hint->lo = g->lo, hint->len = g->hi - g->lo;
        return 1;
    }
    return ranges && sw_range_lookup(ranges, pc);
}

/* Moved to a caller whose registers came from a rule, not libunwind. */
static void moved(sw_cursor *c, unsigned exact)
{
    c->exact = exact;
    c->need_init = c->dwarf != NULL;    /* libunwind, if asked next, starts here */
    c->from_signal = exact;
}

int sw_step_range(sw_cursor *c, const crawl_code_range *r)
{
    if (r->rule.kind == CRAWL_UNWIND_FRAME_POINTER) {
        uintptr_t ip = c->regs.ip, sp = c->regs.sp, fp = c->regs.fp;
        int st = sw_fp_next(c, &ip, &sp, &fp);
        /* Registered code promised a frame pointer: leaving the stack is
         * not a normal end here. */
        if (st != SW_OK)
            return WHY(st == SW_END ? SW_STOP : st, "code range: frame pointer off the stack");
        c->regs.ip = ip, c->regs.sp = sp, c->regs.fp = fp;
        moved(c, 0);
        return SW_OK;
    }
    uintptr_t cfa = c->regs.sp + r->rule.frame_size;
    if (cfa < c->regs.sp || !sw_in_stack(c, cfa - 8, 8))
        return WHY(SW_STOP, "code range: CFA off the stack");
    uintptr_t fp = c->regs.fp;
    if (r->rule.saved_fp_offset) {
        uintptr_t slot = cfa + (uintptr_t)(intptr_t)r->rule.saved_fp_offset;
        if (!sw_in_stack(c, slot, 8))
            return WHY(SW_CORRUPT, "code range: saved rbp off the stack");
        fp = load(slot);
    }
    uintptr_t ip = load(cfa - 8);
    if (!sw_progress(c, c->regs.sp, cfa))
        return WHY(SW_CORRUPT, "code range: the CFA does not move up the stack");
    if (ip == 0)
        return WHY(SW_END, "code range: return address 0");
    c->regs.ip = ip;
    c->regs.sp = cfa;
    c->regs.fp = fp;
    moved(c, 0);
    return SW_OK;
}

/* Out of a signal trampoline (x86-64 Linux): the interrupted registers are
 * in the ucontext the kernel left at sp. The next frame's ip is exact. */
static int step_sigframe(sw_cursor *c)
{
    uintptr_t uc = c->regs.sp;
    if (!sw_in_stack(c, uc, sizeof(ucontext_t)))
        return WHY(SW_CORRUPT, "signal frame: ucontext off the stack");
    crawl_regs r;
    sw_regs_from_ucontext(&r, (const ucontext_t *)uc);
    if (!sw_in_stack(c, r.sp, 1) || !sw_progress(c, c->regs.sp, r.sp))
        return WHY(SW_CORRUPT, "signal frame: interrupted sp off the stack or not older");
    if (!sw_is_code(c, &c->hint, r.ip, 1))
        return WHY(SW_STOP, "signal frame: interrupted pc is not code");
    c->regs = r;
    moved(c, 1);
    return SW_OK;
}

/* SW_ASK from here: the answer may change with a fresh module snapshot. */
static int step_once(sw_cursor *c)
{
    const crawl_code_range *range =
        c->ranges ? sw_range_lookup(c->ranges, c->regs.ip - !c->exact) : NULL;
    if (range) {
        crawl_regs before = c->regs;
        unsigned exact = c->exact;
        int st = sw_step_range(c, range);
        if (st == SW_OK && !sw_is_code(c, &c->hint, c->regs.ip, 0)) {
            c->regs = before;
            moved(c, exact);
            return WHY(sw_not_code(c), "code range: the caller is not code");
        }
        return st;
    }
    uint64_t rule = 0;
    if (c->snap && (c->cfi || !c->precise)) {
        uintptr_t ip = c->regs.ip, sp = c->regs.sp, fp = c->regs.fp;
        int st = sw_cfi_next(c, &c->hint, &c->hits, &ip, &sp, &fp, (int)c->exact);
        if (st == SW_OK) {
            c->regs.ip = ip, c->regs.sp = sp, c->regs.fp = fp;
            moved(c, 0);
            return SW_OK;
        }
        if (st != SW_ASK)
            return WHY(st, "CFI rule");
        rule = sw_rule_get(c, c->exact ? c->regs.ip : c->regs.ip - 1, &c->hits);
        unsigned flags = sw_rule_flags(rule);
        if (!(flags & SW_RULE_TRUSTED) && !c->signal_safe && !c->refreshed)
            return SW_ASK;               /* check the loader first */
        int usable = !c->signal_safe || (flags & SW_RULE_TRUSTED);
        if ((flags & SW_RULE_VALID) && usable)
            return SW_ASK;               /* the caller was not code: maybe newly loaded */
        if ((flags & SW_RULE_SIGFRAME) && usable)
            return step_sigframe(c);
        if (!rule && !c->signal_safe && !c->refreshed)
            return SW_ASK;               /* the pc is in no module: maybe newly loaded */
    } else if (c->snap) {
        rule = sw_seg_find(c->snap, c->exact ? c->regs.ip : c->regs.ip - 1) ? 1 : 0;
    }
    if (c->precise) {
        /* libunwind, for what no rule expresses; never in signal context
         * (it takes locks), never for a pc in no module (it would guess) */
        if (c->signal_safe || !rule || !c->dwarf)
            return WHY(SW_STOP, !rule ? "pc in no known module"
                                : c->signal_safe ? "no usable CFI rule (module not compiled, "
                                                   "not permanent, or a DWARF expression), and "
                                                   "libunwind is not signal-safe"
                                                 : "no CFI rule and no libunwind");
        sw_cfi_count_fallback();
        crawl_regs before = c->regs;
        unsigned exact = c->exact;
        int st = sw_step_dwarf(c);
        if (st == SW_OK && !sw_is_code(c, &c->hint, c->regs.ip, c->exact)) {
            c->regs = before;
            moved(c, exact);
            return WHY(SW_STOP, "libunwind: the caller is not code");
        }
        return WHY(st, "libunwind");
    }
    /* fast: the frame-pointer chain, where it leads to code */
    uintptr_t ip = c->regs.ip, sp = c->regs.sp, fp = c->regs.fp;
    int st = sw_fp_next(c, &ip, &sp, &fp);
    if (st == SW_OK && sw_is_code(c, &c->hint, ip, 0)) {
        c->regs.ip = ip, c->regs.sp = sp, c->regs.fp = fp;
        moved(c, 0);
        return SW_OK;
    }
    /* A frame pointer off the stack is how chains end; anything else
     * (junk in rbp from code without frame pointers, a caller that is not
     * code) stops the native part here, with a gap if Frames follow. */
    return WHY(st == SW_END ? SW_END : SW_STOP,
               st == SW_END ? "frame pointer leaves the stack"
               : st == SW_OK ? "frame pointer: the caller is not code"
                             : "frame pointer: a bad chain (code without frame pointers?)");
}

int sw_step(sw_cursor *c)
{
    c->why = NULL;
    int st = step_once(c);
    if (st == SW_ASK && !c->signal_safe && !c->refreshed) {
        c->snap = sw_snap_refresh();
        c->hint = (sw_hint){0, 0};
        c->refreshed = 1;
        st = step_once(c);
    }
    return st == SW_ASK ? WHY(SW_STOP, "the caller is not code in any known module") : st;
}
