/* The native cursor's state at the start of a walk and where a walk
 * resumes (a transition Frame's saved registers): the registers, the stack
 * bounds every load is checked against, and what the next step may use. */
#include "stackwalk/internal.h"

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
    c->hint = (sw_hint){0, 0};
    c->hits = 0;
    c->refreshed = 0;
    c->tlo = atomic_load_explicit(&sw_sigtramp_lo, memory_order_acquire);
    c->tlen = atomic_load_explicit(&sw_sigtramp_len, memory_order_acquire);
    /* A walk that starts on the signal stack, or runs on it (a handler
     * walking the context it interrupted), needs its bounds. */
    uintptr_t here = (uintptr_t)__builtin_frame_address(0);
    if (!(regs->sp >= c->lo && regs->sp < c->hi) || !(here >= c->lo && here < c->hi))
        crawl__current_altstack(&c->alo, &c->ahi);
}
