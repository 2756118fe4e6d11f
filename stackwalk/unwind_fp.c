/* The fast unwinder: the frame-pointer chain, and JIT code-range rules.
 *
 * Every load is bounds-checked against the thread's stack first, so a
 * corrupt chain ends the walk instead of faulting (cf. compiler-rt's
 * UnwindFast). A frame pointer that leaves the stack is the normal end of
 * the chain: code without frame pointers uses rbp as a general register
 * (glibc's __libc_start_call_main leaves 0x1 there), and that cannot be
 * told apart from a corrupt value that points elsewhere. A frame pointer
 * that stays on the stack but is misaligned or does not move towards the
 * base is corruption. */
#include "stackwalk/internal.h"

static inline uintptr_t load(uintptr_t a)
{
    return *(const uintptr_t *)a;
}

int sw_step_fp(sw_cursor *c)
{
    int st = sw_fp_step(c, &c->regs.ip, &c->regs.sp, &c->regs.fp);
    if (st == SW_OK)
        c->exact = 0;
    return st;
}

int sw_step_rule(sw_cursor *c, const crawl_code_range *r)
{
    if (r->rule.kind == CRAWL_UNWIND_FRAME_POINTER) {
        int st = sw_step_fp(c);
        /* Registered code promised a frame pointer: leaving the stack is
         * not a normal end here. */
        return st == SW_END ? SW_STOP : st;
    }
    uintptr_t cfa = c->regs.sp + r->rule.frame_size;
    if (cfa < c->regs.sp || !sw_in_stack(c, cfa - 8, 8))
        return SW_STOP;
    uintptr_t fp = c->regs.fp;
    if (r->rule.saved_fp_offset) {
        uintptr_t slot = cfa + (uintptr_t)(intptr_t)r->rule.saved_fp_offset;
        if (!sw_in_stack(c, slot, 8))
            return SW_CORRUPT;
        fp = load(slot);
    }
    uintptr_t ip = load(cfa - 8);
    if (!sw_progress(c, c->regs.sp, cfa))
        return SW_CORRUPT;
    if (ip == 0)
        return SW_END;
    c->regs.ip = ip;
    c->regs.sp = cfa;
    c->regs.fp = fp;
    c->exact = 0;
    return SW_OK;
}

void sw_cursor_reset(sw_cursor *c, const crawl_regs *regs, unsigned exact)
{
    c->regs = *regs;
    c->exact = exact;
    c->need_init = c->dwarf != NULL;
    c->from_signal = exact;
}

void sw_cursor_init(sw_cursor *c, const crawl__thread *th, const crawl_regs *regs,
                    unsigned exact, sw_dwarf *dwarf, const sw_range_table *ranges)
{
    c->dwarf = dwarf;
    sw_cursor_reset(c, regs, exact);
    c->lo = th->stack_lo;
    c->hi = th->stack_hi;
    c->alo = c->ahi = 0;
    c->ranges = ranges;
    /* A walk that starts on the signal stack, or runs on it (a handler
     * walking the context it interrupted), needs its bounds. */
    uintptr_t here = (uintptr_t)__builtin_frame_address(0);
    if (!(regs->sp >= c->lo && regs->sp < c->hi) || !(here >= c->lo && here < c->hi))
        crawl__current_altstack(&c->alo, &c->ahi);
}

int sw_step(sw_cursor *c)
{
    /* a return address may be the end of the range (a call as last instruction) */
    const crawl_code_range *r =
        c->ranges ? sw_range_lookup(c->ranges, c->regs.ip - !c->exact) : NULL;
    if (r) {
        int st = sw_step_rule(c, r);
        c->need_init = c->dwarf != NULL; /* libunwind restarts from the new registers */
        c->from_signal = 0;
        return st;
    }
    if (!c->dwarf)
        return sw_step_fp(c);
    if (c->cfi) {
        int st = sw_step_cfi(c);
        if (st != SW_ASK_LIBUNWIND)
            return st;
    }
    return sw_step_dwarf(c);
}
