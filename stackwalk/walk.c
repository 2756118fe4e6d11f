/* The mixed walk: Frames merged with native frames by stack address.
 *
 * Two cursors: the native one (sw_cursor) and the next unreported Frame.
 * Before native frame N is reported, every Frame below N's canonical frame
 * address (the caller's sp) is reported, newest first. When native
 * unwinding stops, the walk resumes from the next Frame that saved
 * registers (a transition Frame), so no Frame is ever dropped. */
#include <stdatomic.h>
#include <string.h>
#include <sys/mman.h>

#include "stackwalk/internal.h"

typedef struct walk {
    crawl_walk_fn fn;
    void *ctx;
    unsigned flags;
    unsigned depth;
    unsigned thread;                    /* the walked thread's seq, for crawl_cf_thread */
    unsigned gap;                       /* CRAWL_CF_AFTER_GAP for the next report */
    unsigned frames_left;               /* chain length bound: a cyclic chain is corrupt */
    int corrupt, aborted;
    crawl_frame *next;                  /* next unreported Frame */
    uintptr_t *pcs;                     /* crawl_backtrace: collect native pcs here */
    unsigned pcs_max, pcs_n;
    sw_cursor cur;
} walk;

/* A VM hook that never says "no more" must not hang the walk. */
#define MAX_VM_FRAMES_PER_SEGMENT (1u << 20)

static void emit(walk *w, crawl_cf *cf)
{
    if (w->pcs) {
        w->pcs[w->pcs_n++] = cf->ip;
        if (w->pcs_n >= w->pcs_max)
            w->aborted = 1;
        return;
    }
    cf->depth = w->depth++;
    cf->thread = w->thread;
    cf->flags |= w->gap;
    w->gap = 0;
    if (w->fn(cf, w->ctx) != CRAWL_CONTINUE)
        w->aborted = 1;
}

static int frame_valid(const walk *w, const crawl_frame *f)
{
    crawl__bounds b = {w->cur.lo, w->cur.hi, w->cur.alo, w->cur.ahi};
    return w->frames_left > 0 && crawl__frame_ok(f, &b);
}

static const crawl_regs *frame_regs(const walk *w, const crawl_frame *f)
{
    const crawl_frame_type *t = f->type;
    if (!(t->flags & CRAWL_FRAME_SAVES_REGS))
        return NULL;
    uintptr_t a = (uintptr_t)f + t->regs_offset;
    return sw_in_stack(&w->cur, a, sizeof(crawl_regs)) ? (const crawl_regs *)a : NULL;
}

static void report_frame(walk *w, crawl_frame *f)
{
    const crawl_frame_type *t = f->type;
    if (w->flags & CRAWL_WALK_SKIP_FRAMES)
        return;
    if (t->kind == CRAWL_FRAME_KIND_INTERP && t->vm_next && !(w->flags & CRAWL_WALK_NO_VM)) {
        crawl_vm_frame vf = {0};
        for (unsigned i = 0; i < MAX_VM_FRAMES_PER_SEGMENT && !w->aborted; i++) {
            if (t->vm_next(f, &vf) != 1)
                break;
            crawl_cf cf = {.kind = CRAWL_CF_VM, .ip = vf.pc, .sp = (uintptr_t)f, .frame = f,
                           .method = vf.method, .vm = &vf, .name = t->name};
            emit(w, &cf);
        }
        return;
    }
    if ((w->flags & CRAWL_WALK_FUNCTIONS_ONLY) && !(t->flags & CRAWL_FRAME_FUNCTION))
        return;
    const crawl_regs *regs = frame_regs(w, f);
    uintptr_t ip = (t->flags & CRAWL_FRAME_FUNCTION) && t->position ? t->position(f)
                   : regs                                           ? regs->ip
                                                                    : 0;
    crawl_cf cf = {.kind = CRAWL_CF_FRAME, .flags = regs ? CRAWL_CF_HAS_REGS : 0,
                   .ip = ip, .sp = (uintptr_t)f, .frame = f,
                   .method = t->method ? t->method(f) : NULL, .regs = regs, .name = t->name};
    emit(w, &cf);
}

/* Take the next Frame off the chain, or NULL (at the end, or on a corrupt
 * Frame, which ends Frame reporting and fails the walk). */
static crawl_frame *take_frame(walk *w)
{
    crawl_frame *f = w->next;
    if (!f)
        return NULL;
    if (!frame_valid(w, f)) {
        SW_DEBUG("Frame %p fails the check (off the stack, misaligned, unknown type, or more "
                 "Frames than were pushed): the chain is corrupt", (void *)f);
        w->corrupt = 1;
        w->next = NULL;
        return NULL;
    }
    w->next = f->next;
    w->frames_left--;
    return f;
}

/* Is Frame f newer than stack address a (in walk order)? */
static inline int frame_before(const walk *w, const crawl_frame *f, uintptr_t a)
{
    return sw_key(&w->cur, (uintptr_t)f) < sw_key(&w->cur, a);
}

/* Report the Frames newer than stack address limit. */
static void report_frames_below(walk *w, uintptr_t limit)
{
    while (!w->aborted && w->next && frame_before(w, w->next, limit)) {
        crawl_frame *f = take_frame(w);
        if (f)
            report_frame(w, f);
    }
}

static void report_all_frames(walk *w)
{
    while (!w->aborted && w->next) {
        crawl_frame *f = take_frame(w);
        if (f)
            report_frame(w, f);
    }
}

/* A step from the frame at sp to caller sp `cfa` went past a Frame that
 * saved its pusher's registers, with the pusher's sp strictly between the
 * two: the unwinder skipped that function (frame-pointer-less code can
 * leave a stack pointer in rbp that looks like a frame). The step must be
 * treated as a stop, so the walk resumes from the saved registers instead
 * of following the wrong chain. (A Frame whose saved sp is sp itself was
 * pushed by the current frame: that step is fine.) */
static int step_skips_transition(const walk *w, uintptr_t sp, uintptr_t cfa)
{
    unsigned left = w->frames_left;
    for (const crawl_frame *f = w->next; f && left && frame_before(w, f, cfa); f = f->next, left--) {
        if (!frame_valid(w, f))
            return 0;                    /* reporting it will fail the walk */
        const crawl_regs *regs = frame_regs(w, f);
        if (regs && sw_key(&w->cur, sp) < sw_key(&w->cur, regs->sp) &&
            sw_key(&w->cur, regs->sp) < sw_key(&w->cur, cfa))
            return 1;
    }
    return 0;
}

static void report_native(walk *w, const crawl_regs *r, unsigned exact)
{
    const crawl_code_range *range =
        w->cur.ranges ? sw_range_lookup(w->cur.ranges, r->ip - !exact) : NULL;
    if (!range && (w->flags & CRAWL_WALK_SKIP_NATIVE))
        return;
    crawl_cf cf = {.kind = range ? CRAWL_CF_JIT : CRAWL_CF_NATIVE,
                   .flags = CRAWL_CF_HAS_REGS | (exact ? CRAWL_CF_EXACT_IP : 0),
                   .ip = r->ip, .sp = r->sp, .regs = r,
                   .method = range ? range->method : NULL, .name = range ? range->name : NULL};
    emit(w, &cf);
}

/* Native unwinding stopped at a frame whose sp is stop_sp. Report the
 * Frames up to the next one that saved registers past stop_sp and resume
 * the native cursor there; 0 if there is no such Frame (the remaining
 * Frames have then all been reported). */
static int resume_from_frame(walk *w, uintptr_t stop_sp)
{
    w->gap = CRAWL_CF_AFTER_GAP;
    while (!w->aborted && w->next) {
        crawl_frame *f = w->next;
        if (!frame_valid(w, f)) {
            take_frame(w);               /* marks the walk corrupt */
            return 0;
        }
        const crawl_regs *regs = frame_regs(w, f);
        if (regs && sw_in_stack(&w->cur, regs->sp, 1) &&
            sw_key(&w->cur, regs->sp) > sw_key(&w->cur, stop_sp)) {
            /* f itself is reported by the merge, inside its pusher's frame. */
            crawl_regs start = *regs;
            SW_DEBUG("resume at transition Frame %p ('%s') from its saved ip %#lx sp %#lx",
                     (void *)f, crawl__type_name(f->type), (unsigned long)start.ip,
                     (unsigned long)start.sp);
            sw_cursor_reset(&w->cur, &start, 0);
            return 1;
        }
        report_frame(w, take_frame(w));
    }
    return 0;
}

/* The hot path of fast walks without JIT code ranges. Runs until a step
 * fails (returning its status, w->cur left at the frame it failed on, not
 * yet reported) or the callback aborts.
 *
 * Unwinding and reporting alternate in batches: a call-free loop unwinds up
 * to FAST_BATCH frames into a local buffer, then a second loop reports them.
 * With the callback inside the unwinding loop the compiler spilled and
 * reloaded a dozen live values around every call (5.5 ns per frame against
 * 2.1 for a bare loop plus one indirect call). A batch stops early when a
 * Frame lies inside the frame just buffered, so the merge rule holds. */
#define FAST_BATCH 32

typedef struct fast_entry {
    uintptr_t ip, sp, fp;
} fast_entry;

/* One step of the batch loop. Precise: the compiled CFI rule. Fast: the
 * frame-pointer chain, except where frame pointers are known to mislead:
 * the interrupted frame of a signal context (it may not have set up its
 * frame yet, or keep none), and a step that would pass a Frame (the Frame
 * must be placed by true frame boundaries, and frameless code in between
 * makes the chain skip frames); there the CFI rule decides when one is
 * available. A caller that is not code is never taken. Inline, so each mode
 * gets its own copy of the loop. */
/* Fast mode's exceptions, out of line: the CFI decides the step from
 * (ip, sp, fp) where it can; otherwise the frame-pointer step (nip, nsp,
 * nfp; fp_st its status, SW_ASK if not made yet) stands if it reached code. */
static __attribute__((noinline)) int fast_ask_cfi(const sw_cursor *c, sw_hint *hint,
                                                  unsigned long *hits, uintptr_t *ip,
                                                  uintptr_t *sp, uintptr_t *fp, int exact,
                                                  uintptr_t nip, uintptr_t nsp, uintptr_t nfp,
                                                  int fp_st)
{
    uintptr_t cip = *ip, csp = *sp, cfp = *fp;
    int st = sw_cfi_next(c, hint, hits, &cip, &csp, &cfp, exact);
    if (st == SW_OK || st == SW_END || st == SW_CORRUPT) {
        if (st == SW_OK)
            *ip = cip, *sp = csp, *fp = cfp;
        return st;
    }
    if (fp_st == SW_ASK)
        fp_st = sw_fp_next(c, &nip, &nsp, &nfp);
    if (fp_st != SW_OK || !sw_is_code(c, hint, nip, 0))
        return SW_ASK;
    *ip = nip, *sp = nsp, *fp = nfp;
    return SW_OK;
}

static inline __attribute__((always_inline)) int batch_step(const sw_cursor *c,
                                                            const sw_cursor *real, int precise,
                                                            sw_hint *hint, unsigned long *hits,
                                                            uint64_t *rule, uint64_t *last,
                                                            uintptr_t next_key,
                                                            uintptr_t *ip, uintptr_t *sp,
                                                            uintptr_t *fp, int exact)
{
    if (precise) {
        /* Pipelined: *rule is the current frame's rule, looked up when the
         * previous step found it; the caller's rule is looked up here, and
         * a rule found means the caller is code (only pcs of modules have
         * one), which spares a separate check. */
        uintptr_t nip = *ip, nsp = *sp, nfp = *fp;
        int st = sw_rule_apply(c, *rule, &nip, &nsp, &nfp);
        if (st != SW_OK)
            return st;
        /* recursion (direct, or two functions in turn as eval/apply):
         * the same return addresses again */
        uint64_t next;
        if (nip - 1 == last[0]) {
            next = last[1];
            ++*hits;
        } else if (nip - 1 == last[2]) {
            next = last[3];
            ++*hits;
        } else {
            next = sw_rule_get(c, nip - 1, hits);
            if (!next)
                return sw_not_code(c);
        }
        last[2] = last[0], last[3] = last[1];
        last[0] = nip - 1, last[1] = next;
        *rule = next;
        *ip = nip, *sp = nsp, *fp = nfp;
        return SW_OK;
    }
    (void)rule, (void)last;
    uintptr_t nip = *ip, nsp = *sp, nfp = *fp;
    /* out of a signal trampoline: by the ucontext, in the slow path */
    if (__builtin_expect(nip - c->tlo < c->tlen, 0))
        return SW_ASK;
    if (__builtin_expect(exact, 0))
        return fast_ask_cfi(real, hint, hits, ip, sp, fp, exact, nip, nsp, nfp, SW_ASK);
    int st = sw_fp_next(c, &nip, &nsp, &nfp);
    if (__builtin_expect(st != SW_OK, 0))  /* the chain ends or is junk: ask the CFI */
        return fast_ask_cfi(real, hint, hits, ip, sp, fp, 0, nip, nsp, nfp, st);
    if (__builtin_expect(next_key < sw_key(c, nsp) || !sw_is_code(c, hint, nip, 0), 0))
        return fast_ask_cfi(real, hint, hits, ip, sp, fp, 0, nip, nsp, nfp, st);
    *ip = nip, *sp = nsp, *fp = nfp;
    return SW_OK;
}

static inline __attribute__((always_inline)) int batch_run(walk *w, unsigned *skip_io,
                                                           int precise, int alt)
{
    sw_cursor *c = &w->cur;
    /* A local copy stays in registers; without a signal stack (alt 0, a
     * constant in each copy of this loop) stack keys are plain addresses. */
    sw_cursor bounds = *c;
    if (!alt)
        bounds.alo = bounds.ahi = 0;
    sw_hint hint = c->hint;
    unsigned long hits = 0;
    uintptr_t ip = c->regs.ip, sp = c->regs.sp, fp = c->regs.fp;
    uint64_t rule = 0, last[4] = {0, 0, 0, 0}; /* the last two keys and their rules */
    if (precise) {
        rule = sw_rule_get(&bounds, c->exact ? ip : ip - 1, &hits);
        if (!rule)                       /* the first frame is not code */
            return sw_not_code(c) == SW_ASK ? SW_ASK : SW_STOP;
    }
    unsigned first_flags = c->exact ? CRAWL_CF_EXACT_IP : 0;
    unsigned skip = *skip_io;
    fast_entry buf[FAST_BATCH];
    crawl_regs regs = {0};
    crawl_cf cf = {.kind = CRAWL_CF_NATIVE, .regs = &regs};
    cf.thread = w->thread;
    int st = SW_OK;
    int exact = first_flags != 0;
    while (st == SW_OK && !w->aborted) {
        /* unwind a batch; the first `skip` frames are crawl's own */
        uintptr_t next_key = w->next ? sw_key(&bounds, (uintptr_t)w->next) : UINTPTR_MAX;
        unsigned n = 0, batch = FAST_BATCH;
        if (w->pcs && w->pcs_max - w->pcs_n + skip < batch)
            batch = w->pcs_max - w->pcs_n + skip;   /* crawl_backtrace: no step past max */
        int frame_due = 0;
        while (n < batch) {
            uintptr_t nip = ip, nsp = sp, nfp = fp;
            st = batch_step(&bounds, c, precise, &hint, &hits, &rule, last, next_key, &nip, &nsp, &nfp,
                            exact);
            if (st != SW_OK)
                break;
            exact = 0;
            buf[n].ip = ip, buf[n].sp = sp, buf[n].fp = fp;
            n++;
            ip = nip, sp = nsp, fp = nfp;
            if (next_key < sw_key(&bounds, sp)) {
                frame_due = 1;
                break;
            }
        }
        unsigned first = skip < n ? skip : n;
        skip -= first;
        if (first)
            first_flags = 0;             /* (skip and an exact start never meet) */
        if (frame_due && n > first && step_skips_transition(w, buf[n - 1].sp, sp)) {
            /* the last step was wrong: stop at the last buffered frame */
            n--;
            ip = buf[n].ip, sp = buf[n].sp, fp = buf[n].fp;
            st = SW_STOP;
            frame_due = 0;
        }
        if (w->pcs) {
            /* crawl_backtrace: Frames are not reported, only stepped over */
            unsigned room = w->pcs_max - w->pcs_n, k = n - first < room ? n - first : room;
            for (unsigned i = 0; i < k; i++)
                w->pcs[w->pcs_n + i] = buf[first + i].ip;
            w->pcs_n += k;
            if (w->pcs_n >= w->pcs_max)
                w->aborted = 1;
            if (frame_due)
                report_frames_below(w, sp);
            if (n)
                first_flags = 0;
            continue;
        }
        /* Report it. The batch ends as soon as a Frame lies below the
         * caller's sp, so only its last frame can have Frames to report
         * first (those below sp, its frame's end). */
        crawl_walk_fn fn = w->fn;
        void *ctx = w->ctx;
        unsigned depth = w->depth, flags = CRAWL_CF_HAS_REGS | first_flags;
        for (unsigned i = first; i < n; i++) {
            if (i + 1 == n && frame_due) {
                w->depth = depth;
                report_frames_below(w, sp);
                depth = w->depth;
                if (w->aborted)
                    break;
            }
            regs.ip = cf.ip = buf[i].ip;
            regs.sp = cf.sp = buf[i].sp;
            regs.fp = buf[i].fp;
            cf.flags = flags | w->gap;    /* a gap may come from report_frames_below */
            cf.depth = depth++;
            flags = CRAWL_CF_HAS_REGS;
            w->gap = 0;
            if (fn(&cf, ctx) != CRAWL_CONTINUE) {
                w->aborted = 1;
                break;
            }
        }
        w->depth = depth;
        if (n)
            first_flags = 0;
    }
    *skip_io = skip;
    c->hint = hint;
    c->hits += hits;
    if (ip != c->regs.ip || sp != c->regs.sp) {
        c->regs.ip = ip, c->regs.sp = sp, c->regs.fp = fp;
        c->need_init = c->dwarf != NULL; /* libunwind, if asked next, starts here */
        c->from_signal = 0;
    }
    c->exact = first_flags != 0;
    return st;
}

static int fast_run(walk *w, unsigned *skip_io)
{
    return w->cur.ahi ? batch_run(w, skip_io, 0, 1) : batch_run(w, skip_io, 0, 0);
}

static int precise_run(walk *w, unsigned *skip_io)
{
    return w->cur.ahi ? batch_run(w, skip_io, 1, 1) : batch_run(w, skip_io, 1, 0);
}

/* w->fn/ctx/flags (and pcs for crawl_backtrace) are set by the caller. */
static crawl_walk_status run_walk(walk *wp, const crawl_regs *regs, unsigned exact, unsigned skip)
{
    walk *const w = wp;                 /* in place: no copy of the walk state */
    unsigned flags = w->flags;
    crawl__thread *th = crawl__self();
    if (!th->attached) {
        /* (inside pthread_getattr_np, attaching would wait for its lock) */
        if ((flags & CRAWL_WALK_SIGNAL_SAFE) || crawl__in_getattr || crawl_thread_attach() != 0)
            return CRAWL_WALK_FAILED;
    }
    unsigned precise = !(flags & CRAWL_WALK_FAST);
    if (precise && (flags & CRAWL_WALK_NO_CFI_CACHE) &&
        (!sw_unw() || (flags & CRAWL_WALK_SIGNAL_SAFE)))
        return CRAWL_WALK_FAILED;        /* libunwind only, and libunwind is not allowed */

    sw_dwarf dwarf;                     /* left uninitialized: libunwind fills it */
    w->frames_left = th->nframes;
    w->thread = th->seq;
    atomic_signal_fence(memory_order_acquire);
    w->next = th->top;
    const sw_range_table *held = sw_ranges_enter();
    const sw_range_table *ranges = held && held->n ? held : NULL;
    sw_cursor_init(&w->cur, th, regs, exact, precise && sw_unw() ? &dwarf : NULL, ranges);
    /* Modules that can be unloaded are checked against the loader (its
     * lock: normal context only) the first time the walk meets one. */
    w->cur.snap = sw_snap_enter(th);
    w->cur.precise = precise;
    w->cur.cfi = !(flags & CRAWL_WALK_NO_CFI_CACHE);
    w->cur.signal_safe = (flags & CRAWL_WALK_SIGNAL_SAFE) != 0;
    w->cur.sparse = (flags & SW_WALK_SPARSE_CFI) != 0;
    /* Frames newer than the first frame belong to crawl's caller's callees:
     * a signal handler that pushed Frames before walking the context it
     * interrupted. They are not part of this stack. */
    while (w->next && frame_valid(w, w->next) && frame_before(w, w->next, regs->sp))
        take_frame(w);
    SW_DEBUG("walk from ip %#lx sp %#lx: %s%s, %u Frame(s) on the chain",
             (unsigned long)regs->ip, (unsigned long)regs->sp, precise ? "precise" : "fast",
             w->cur.signal_safe ? ", signal-safe" : "", w->frames_left);

    if ((flags & CRAWL_WALK_SKIP_NATIVE) && !ranges) {
        /* Nothing native to report: the chain alone is in order. */
        report_all_frames(w);
    } else {
        int live = 1;
        int batch = !ranges && w->cur.snap && (w->cur.cfi || !precise);
        while (live && !w->aborted) {
            crawl_regs r;
            unsigned r_exact;
            int st = SW_ASK;
            if (batch) {
                st = precise ? precise_run(w, &skip) : fast_run(w, &skip);
                if (w->aborted)
                    break;
                r = w->cur.regs;
                r_exact = w->cur.exact;
            }
            if (st == SW_ASK) {
                /* the slow path: one step by every means the mode allows */
                r = w->cur.regs;
                r_exact = w->cur.exact;
                st = sw_step(&w->cur);
                if (st == SW_OK && skip) {
                    skip--;
                    continue;
                }
                if (st == SW_OK && w->next && frame_before(w, w->next, w->cur.regs.sp) &&
                    step_skips_transition(w, r.sp, w->cur.regs.sp))
                    st = SW_STOP;
                if (st == SW_OK) {
                    report_frames_below(w, w->cur.regs.sp);
                    if (!w->aborted)
                        report_native(w, &r, r_exact);
                    continue;
                }
            }
            /* Unwinding stopped at r. */
            SW_DEBUG("stop at ip %#lx sp %#lx: %s (%s)", (unsigned long)r.ip, (unsigned long)r.sp,
                     sw_status_name(st), w->cur.why ? w->cur.why : "the inline step");
            w->cur.why = NULL;
            if (st == SW_CORRUPT)
                w->corrupt = 1;
            /* Frames below r's sp surely belong to newer frames. */
            report_frames_below(w, r.sp);
            if (!w->aborted && !skip)
                report_native(w, &r, r_exact);
            skip = 0;
            if (!w->aborted && w->next)
                live = resume_from_frame(w, r.sp);
            else
                live = 0;
        }
    }
    if (w->cur.hits)
        __atomic_store_n(&th->counts[SW_COUNT_CFI_HITS], th->counts[SW_COUNT_CFI_HITS] + w->cur.hits,
                         __ATOMIC_RELAXED);
    sw_snap_exit(th);
    sw_ranges_exit(held);
    SW_DEBUG("walk ends: %s", w->aborted ? "aborted by the callback"
                              : w->corrupt ? "FAILED (corrupt stack or Frame chain)" : "done");
    if (w->aborted)
        return CRAWL_WALK_ABORTED;
    return w->corrupt ? CRAWL_WALK_FAILED : CRAWL_WALK_DONE;
}

crawl_walk_status sw_walk(const crawl_regs *regs, unsigned exact, unsigned skip,
                          crawl_walk_fn fn, void *ctx, unsigned flags)
{
    if (!fn)
        return CRAWL_WALK_FAILED;
    walk w = {.fn = fn, .ctx = ctx, .flags = flags};
    return run_walk(&w, regs, exact, skip);
}

crawl_walk_status crawl_walk(crawl_walk_fn fn, void *ctx, unsigned flags)
{
    crawl_regs r;
    crawl_capture_regs(&r);
    crawl_walk_status st = sw_walk(&r, 0, 1, fn, ctx, flags);
    CRAWL__NO_TAIL(st);
    return st;
}

/* ---- backtraces: the quick walk ------------------------------------------ */

/* Where a quick walk stands: the current frame (not yet reported) and its
 * rule; after Q_MISS, also the caller that rule found, whose own rule was
 * not in the cache. */
typedef struct quick_regs {
    uintptr_t ip, sp, fp;
    uint64_t rule;
    uintptr_t nip, nsp, nfp;
} quick_regs;

enum { Q_FULL, Q_END, Q_MISS, Q_BAIL, Q_MEMO };

/* The walk memo: a thread's last few quick walks, each frame's registers
 * and the two stack words its step loaded (the return address, and the
 * saved rbp when the rule restores it). A walk's steps are a function of
 * the registers it starts from, those words and the rules of the pcs (the
 * same for the same pc in one module snapshot, and quick walks use only
 * rules of modules that are never unloaded). So a walk that starts from
 * the ip and sp a memo starts from takes exactly the memo's frames for as
 * long as each of those words still holds the value the memo saw (rbp is
 * compared only where a rule reads it: elsewhere it is any callee-saved
 * value, a loop counter of some caller, carried along): checking
 * that is a few independent loads, where unwinding is a chain of dependent
 * ones (the next return address is found only once the rule for this one
 * is known). A loop that allocates from one place gets its stack for the
 * price of reading it. */
#define SW_MEMO_FRAMES 64
#define SW_MEMOS 4

typedef struct memo_frame {
    uintptr_t ip, sp, fp;
    uintptr_t ra_at, fp_at;             /* the words its step read (fp_at 0: none) */
    uintptr_t cfa_fp;                   /* its rule's CFA is rbp-based: fp matters here */
} memo_frame;

enum { MEMO_CHECKS_UNBUILT, MEMO_CHECKS_OK, MEMO_CHECKS_NONE };

typedef struct walk_memo {
    const sw_snapshot *snap;            /* the snapshot its rules came from */
    unsigned n;                         /* frames reached: f[0..n) */
    unsigned end;                       /* f[n-1] is the outermost frame */
    unsigned long gen;                  /* changes with every rewrite */
    uint32_t tag;                       /* sw_memo_set_tag's word, for tag_skip/tag_max */
    unsigned tag_skip, tag_max;
    /* The tag's walk as a flat list (memo_build_checks, MEMO_CHECKS_OK):
     * replaying this memo from its first frame gives the tag's pcs
     * exactly when each check's word holds its value, and rbp at the
     * start is fp0 (if fp0_check). */
    unsigned checks, nchecks, fp0_check;
    uintptr_t fp0;
    memo_frame f[SW_MEMO_FRAMES];
    struct {
        uintptr_t at, val;
    } check[2 * SW_MEMO_FRAMES];
} walk_memo;

typedef struct walk_memos {
    unsigned busy;                      /* a quick walk is using them (a handler's nests) */
    unsigned next;                      /* the slot the next new walk writes */
    unsigned recent;                    /* the memo of the last walk */
    unsigned long gen;
    walk_memo m[SW_MEMOS];
} walk_memos;

static void memo_release(crawl__thread *th)
{
    void *m = th->walk_memo;
    th->walk_memo = NULL;
    if (m)
        crawl__munmap(m, sizeof(walk_memos));
}

void sw_memo_range(const crawl__thread *th, uintptr_t *lo, uintptr_t *hi)
{
    uintptr_t w = (uintptr_t)__atomic_load_n(&th->walk_memo, __ATOMIC_RELAXED);
    *lo = w, *hi = w ? w + sizeof(walk_memos) : 0;
}

/* The thread's memos, mapped on its first quick walk (never malloc: walks
 * run inside malloc hooks), unmapped when it leaves. NULL if none. */
static walk_memos *memos_of(crawl__thread *th)
{
    walk_memos *w = th->walk_memo;
    if (__builtin_expect(w != NULL, 1))
        return w;
    w = crawl__mmap(sizeof *w, PROT_READ | PROT_WRITE, 0);
    if (w == MAP_FAILED)
        return NULL;
    __atomic_store_n(&crawl__leave_hook, memo_release, __ATOMIC_RELEASE);
    th->walk_memo = w;
    return w;
}

/* The steps of a quick walk while the rule cache serves them: a leaf, so
 * the whole state stays in registers. Stores each frame's pc at *outp
 * until end and, with rec, the frame's registers and loads at *recp.
 * Q_FULL: end reached; Q_END: the outermost frame reached, and stored;
 * Q_MISS: the caller's rule is not cached (r->n* is that caller, the frame
 * is recorded); Q_BAIL: run_walk must decide this frame's step; Q_MEMO:
 * the caller (now r) is frame *jp of memo c, reached by a step (not its
 * first frame), so the memo may answer from there. Each step is
 * batch_step's precise one (the same rule, the same checks in the same
 * order) minus what cannot happen here (see quick_backtrace). */
static inline __attribute__((always_inline)) int quick_steps(quick_regs *r,
                                                             const sw_cfi_slot *cache,
                                                             uintptr_t lo, uintptr_t span,
                                                             uintptr_t **outp, const uintptr_t *end,
                                                             memo_frame **recp, int rec,
                                                             const walk_memo *c, unsigned *jp)
{
    uintptr_t ip = r->ip, sp = r->sp, fp = r->fp, *out = *outp;
    memo_frame *at = rec ? *recp : NULL;
    /* the memo's next frame at or above sp (frames lie in rising sp order) */
    unsigned j = rec && c ? *jp : 0, cn = rec && c ? c->n : 0;
    uintptr_t csp = j < cn ? c->f[j].sp : UINTPTR_MAX;
    uint64_t rule = r->rule;
    uintptr_t last_ip[2] = {0, 0};       /* 0: never a caller (the loop stops at nip 0) */
    uint64_t last_rule[2] = {0, 0};
    int st;
    for (;;) {
        if (out == end) {
            st = Q_FULL;
            break;
        }
        unsigned f = sw_rule_flags(rule);
        if (__builtin_expect((f & (SW_RULE_TRUSTED | SW_RULE_END | SW_RULE_VALID)) !=
                                 (SW_RULE_TRUSTED | SW_RULE_VALID), 0)) {
            st = Q_BAIL;
            if ((f & (SW_RULE_TRUSTED | SW_RULE_END)) == (SW_RULE_TRUSTED | SW_RULE_END)) {
                *out++ = ip;             /* the outermost frame: the walk is over */
                st = Q_END;
            }
            break;
        }
        uintptr_t cfa = ((f & SW_RULE_CFA_FP) ? fp : sp) + (uintptr_t)sw_rule_cfa_off(rule);
        uintptr_t ra_at = cfa + (uintptr_t)sw_rule_ra_off(rule);
        /* as sw_rule_apply: aligned, the return address on the stack, older */
        if ((cfa & (sizeof(uintptr_t) - 1)) || ra_at - lo > span - sizeof(uintptr_t) ||
            cfa <= sp) {
            st = Q_BAIL;
            break;
        }
        uintptr_t nfp = fp, fp_at = 0;
        if (f & SW_RULE_FP_SAVED) {
            fp_at = cfa + (uintptr_t)sw_rule_fp_off(rule);
            if (fp_at - lo > span - sizeof(uintptr_t)) {
                st = Q_BAIL;
                break;
            }
            nfp = *(const uintptr_t *)fp_at;
        }
        uintptr_t nip = *(const uintptr_t *)ra_at;
        if (nip == 0) {
            st = Q_BAIL;
            break;
        }
        if (rec) {
            at->ip = ip, at->sp = sp, at->fp = fp, at->ra_at = ra_at, at->fp_at = fp_at;
            at->cfa_fp = f & SW_RULE_CFA_FP;
            at++;
            while (csp < cfa) {
                j++;
                csp = j < cn ? c->f[j].sp : UINTPTR_MAX;
            }
            if (__builtin_expect(csp == cfa, 0) && j > 0 && c->f[j].ip == nip) {
                *out++ = ip;             /* this step is made; the memo goes on from nip */
                ip = nip, sp = cfa, fp = nfp;
                st = Q_MEMO;
                break;
            }
        }
        /* the caller's rule: the last two callers' again (recursion, or
         * two functions in turn: no probe on the chain of loads), else as
         * sw_rule_get (a rule found: the caller is code) */
        uint64_t next;
        if (nip == last_ip[0]) {
            next = last_rule[0];
        } else if (nip == last_ip[1]) {
            next = last_rule[1];
        } else {
            const sw_cfi_slot *slot = &cache[sw_rule_hash(nip - 1) >> (64 - SW_CFI_SLOT_BITS)];
            next = 0;
            if (atomic_load_explicit(&slot->key, memory_order_acquire) == nip - 1) {
                next = atomic_load_explicit(&slot->rule, memory_order_acquire);
                if (atomic_load_explicit(&slot->key, memory_order_relaxed) != nip - 1)
                    next = 0;
            }
            if (!next) {
                r->nip = nip, r->nsp = cfa, r->nfp = nfp;
                st = Q_MISS;
                break;
            }
        }
        last_ip[1] = last_ip[0], last_rule[1] = last_rule[0];
        last_ip[0] = nip, last_rule[0] = next;
        *out++ = ip;
        ip = nip, sp = cfa, fp = nfp, rule = next;
    }
    r->ip = ip, r->sp = sp, r->fp = fp, r->rule = rule;
    *outp = out;
    if (rec) {
        *recp = at;
        *jp = j;
    }
    return st;
}

static __attribute__((noinline)) int quick_loop(quick_regs *r, const sw_cfi_slot *cache,
                                                uintptr_t lo, uintptr_t span, uintptr_t **outp,
                                                const uintptr_t *end)
{
    return quick_steps(r, cache, lo, span, outp, end, NULL, 0, NULL, NULL);
}

static __attribute__((noinline)) int quick_loop_rec(quick_regs *r, const sw_cfi_slot *cache,
                                                    uintptr_t lo, uintptr_t span,
                                                    uintptr_t **outp, const uintptr_t *end,
                                                    memo_frame **recp, const walk_memo *c,
                                                    unsigned *jp)
{
    return quick_steps(r, cache, lo, span, outp, end, recp, 1, c, jp);
}

/* m's tag's walk (skip and max) as the flat list of what replay(m, 0)
 * would test: the words at each frame's ra_at, and rbp where a rule's CFA
 * is rbp-based, which is then the word the last fp_at before it loaded or,
 * with none, the starting rbp. Replaying then reads the same words in the
 * same order; the list leaves out the pcs it stores and its bookkeeping
 * (per frame, 22 instructions where the list takes about 5). */
static void memo_build_checks(walk_memo *m, unsigned skip, unsigned max)
{
    m->checks = MEMO_CHECKS_NONE;
    if (!m->n)
        return;
    const unsigned stop = skip + max;
    const memo_frame *f = m->f, *const last = &m->f[m->n - 1];
    unsigned k = 0, nc = 0, fp0_check = 0;
    uintptr_t fp_from = 0, fp0 = 0;     /* the last fp_at so far, and rbp at the start */
    for (; f != last && k < stop; f++, k++) {
        if (f->cfa_fp) {
            if (fp_from) {
                m->check[nc].at = fp_from, m->check[nc].val = f->fp;
                nc++;
            } else if (fp0_check && fp0 != f->fp) {
                return;                  /* (replay would never get past it) */
            } else {
                fp0_check = 1, fp0 = f->fp;
            }
        }
        m->check[nc].at = f->ra_at, m->check[nc].val = f[1].ip;
        nc++;
        if (f->fp_at)
            fp_from = f->fp_at;
    }
    if (k < stop && !m->end)
        return;                          /* (it would go on unwinding) */
    m->nchecks = nc, m->fp0_check = fp0_check, m->fp0 = fp0;
    m->checks = MEMO_CHECKS_OK;
}

/* 1 if m's flat list holds for a walk starting at m's first frame with
 * rbp fp */
static inline int memo_checks_hold(const walk_memo *m, uintptr_t fp)
{
    if (m->fp0_check && fp != m->fp0)
        return 0;
    /* two at a time, one branch for both (a branch each cost a third more) */
    unsigned i = 0, n = m->nchecks;
    for (; i + 1 < n; i += 2) {
        uintptr_t a = *(const uintptr_t *)m->check[i].at ^ m->check[i].val;
        uintptr_t b = *(const uintptr_t *)m->check[i + 1].at ^ m->check[i + 1].val;
        if (a | b)
            return 0;
    }
    return i == n || *(const uintptr_t *)m->check[i].at == m->check[i].val;
}

/* Where a quick walk's pcs go: frame k (0 the first) at pcs[k - skip]. */
typedef struct quick_out {
    uintptr_t *pcs;
    unsigned max, skip, k;
    uintptr_t skipped[4];
} quick_out;

/* The buffer the loop stores frame k's pc into, and its end. */
static inline void out_window(quick_out *o, uintptr_t **out, uintptr_t **end)
{
    if (o->k < o->skip)
        *out = o->skipped + o->k, *end = o->skipped + o->skip;
    else
        *out = o->pcs + (o->k - o->skip), *end = o->pcs + o->max;
}

/* This walk stands at frame o->k with registers r, which are memo m's
 * frame j (the same ip and sp). Checked word by word (and rbp where a rule
 * reads it), m's frames from j go out, and into the memo being written at
 * *recp, for as many steps as still hold; r moves to the last of them.
 * Returns Q_END (the outermost frame reached, and stored), Q_FULL (max
 * pcs), or Q_MEMO: go on unwinding from r. */
static int replay(const walk_memo *m, unsigned j, quick_regs *r, quick_out *o, memo_frame **recp)
{
    /* (all in locals, the frame by pointer: with o's fields and m->n read
     * through pointers a pc store may alias, GCC reloaded them and
     * recomputed f's index a frame, 35 instructions a frame where 22 do) */
    const unsigned skip = o->skip, stop = o->skip + o->max;    /* frames k >= stop are past max */
    uintptr_t *const pcs = o->pcs;
    const memo_frame *f = &m->f[j];
    const memo_frame *const last = &m->f[m->n - 1];
    unsigned k = o->k;
    uintptr_t fp = r->fp;                /* this walk's rbp at frame f */
    memo_frame *rec = recp ? *recp : NULL;
    for (; f != last && k < stop; f++, k++) {
        if ((f->cfa_fp && fp != f->fp) || *(const uintptr_t *)f->ra_at != f[1].ip)
            break;                       /* frame f is reached; its step is this walk's own */
        if (k >= skip)
            pcs[k - skip] = f->ip;
        if (rec) {
            *rec = *f;
            rec->fp = fp;
            rec++;
        }
        if (f->fp_at)
            fp = *(const uintptr_t *)f->fp_at;
    }
    if (recp)
        *recp = rec;
    r->ip = f->ip, r->sp = f->sp, r->fp = fp;
    o->k = k;
    if (k >= stop)
        return Q_FULL;
    if (f == last && m->end) {
        if (k >= skip)
            pcs[k - skip] = f->ip;
        o->k = k + 1;
        return Q_END;
    }
    return Q_MEMO;
}

/* A backtrace's common case, ahead of run_walk: a precise walk (in normal
 * context, or signal-safe: then without the memo, and with only the rules
 * compiled ahead) of a thread with no Frame on its chain, no JIT code range
 * registered and no signal stack in the way ([lo, lo + span) is the whole
 * stack), through the rules of modules that are never unloaded; from the
 * walk memo where it applies (a memo that starts where this walk starts,
 * or one whose frame this walk reaches: the memo of the last walk, or the
 * one it started from). The first step that needs anything else (an
 * untrusted or "other" rule, a caller that is not code, a check that
 * fails) hands the walk to run_walk at that frame, not yet reported, which
 * then decides exactly as it would have. The first skip frames (at most 4)
 * are not stored. Returns 1 when the walk is over (the stack's end, or max
 * pcs stored), else 0 with r at the frame to go on from, *skip_io what is
 * left to skip and *n_out the pcs stored. The loop takes about 25
 * instructions a frame where run_walk's batch loop takes 140. */
static int quick_backtrace(const sw_snapshot *snap, walk_memos *memos, uintptr_t lo,
                           uintptr_t span, int signal_safe, int sparse, quick_regs *r,
                           unsigned *skip_io,
                           uintptr_t *pcs, unsigned max, unsigned *n_out, unsigned long *hits,
                           sw_memo_tag *t)
{
    quick_out o;                         /* (no initializer: zeroing it cost a rep stos) */
    o.pcs = pcs, o.max = max, o.skip = *skip_io, o.k = 0;
    if (o.skip > 4)
        return 0;                        /* (run_walk skips any number) */
    walk_memo *w = NULL;                 /* the memo this walk writes */
    const walk_memo *c = NULL;           /* the memo whose frames it may reach */
    int st = Q_BAIL;
    if (memos && o.skip + max < SW_MEMO_FRAMES) {
        memos->busy = 1;
        const walk_memo *m = NULL;
        for (unsigned i = 0; i < SW_MEMOS; i++) {
            const walk_memo *e = &memos->m[i];
            if (e->n && e->snap == snap && e->f[0].ip == r->ip && e->f[0].sp == r->sp) {
                m = e;
                break;
            }
        }
        if (m) {
            st = replay(m, 0, r, &o, NULL);
            if (st != Q_MEMO) {
                /* the memo's pcs, all of them: its tag holds */
                if (t) {
                    t->memo = (void *)m, t->gen = m->gen, t->skip = o.skip, t->max = max;
                    t->tag = m->tag_skip == o.skip && m->tag_max == max ? m->tag : 0;
                    /* a walk met again whole: its flat list, for sw_memo_probe
                     * (built only now: with many call paths, most memos are
                     * never met whole, and a list for each cost more than
                     * the probe saved) */
                    if (t->tag && m->checks == MEMO_CHECKS_UNBUILT)
                        memo_build_checks((walk_memo *)m, o.skip, max);
                }
                memos->recent = (unsigned)(m - memos->m);
                goto out;
            }
            c = m;                       /* the stacks parted: they may meet again */
        } else {
            const walk_memo *e = &memos->m[memos->recent];
            c = e->n && e->snap == snap ? e : NULL;
        }
        unsigned slot = memos->next;
        while (&memos->m[slot] == c)
            slot = (slot + 1) % SW_MEMOS;
        w = &memos->m[slot];
        memos->next = (slot + 1) % SW_MEMOS;
        if (m)                           /* the frames replayed (their rbp right where it counts) */
            memcpy(w->f, m->f, o.k * sizeof w->f[0]);
        w->snap = snap;
        w->n = 0;                        /* not usable until complete */
        w->gen = ++memos->gen;
        w->tag = 0, w->tag_skip = w->tag_max = 0;
    }
    unsigned long served = 0;
    memo_frame *rec = w ? &w->f[o.k] : NULL;
    unsigned cj = 0;                     /* c's next frame at or above sp */
    int need_rule = 1;
    for (;;) {
        if (need_rule) {
            uintptr_t key = r->ip - 1;
            const sw_cfi_slot *slot = &snap->cache[sw_rule_hash(key) >> (64 - SW_CFI_SLOT_BITS)];
            r->rule = sw_rule_get_at(slot, key, &served);
            if (!r->rule)
                r->rule = sw_rule_lookup(snap, key, signal_safe, sparse);
            need_rule = 0;
        }
        uintptr_t *out, *end;
        out_window(&o, &out, &end);
        uintptr_t *from = out;
        st = w ? quick_loop_rec(r, snap->cache, lo, span, &out, end, &rec, c, &cj)
               : quick_loop(r, snap->cache, lo, span, &out, end);
        unsigned stepped = (unsigned)(out - from);
        o.k += stepped;
        served += stepped - (st == Q_END);
        if (st == Q_FULL && o.k == o.skip && o.skip && o.skip <= 4)
            continue;                    /* the frames to skip are behind */
        if (st == Q_MEMO) {
            st = replay(c, cj, r, &o, &rec);
            if (st != Q_MEMO)
                break;
            need_rule = 1;               /* (the memo went past frames whose rules it knew) */
            continue;
        }
        if (st != Q_MISS)
            break;
        uint64_t next = sw_rule_lookup(snap, r->nip - 1, signal_safe, sparse);
        if (!next) {
            st = Q_BAIL;                 /* not code: run_walk asks the loader */
            break;
        }
        out_window(&o, &out, &end);
        *out = r->ip;                    /* the step the loop could not finish */
        o.k++;
        r->ip = r->nip, r->sp = r->nsp, r->fp = r->nfp, r->rule = next;
    }
    *hits += served;
    if (w) {
        /* f[0..k) as the loop or the memos left them; the frame it stands at
         * (the outermost one after Q_END) ends the memo */
        unsigned last = st == Q_END ? o.k - 1 : o.k;
        w->f[last] = (memo_frame){r->ip, r->sp, r->fp, 0, 0, 0};
        w->end = st == Q_END;
        w->n = last + 1;
        memos->recent = (unsigned)(w - memos->m);
        if (t && (st == Q_END || st == Q_FULL))  /* w holds this walk's pcs, all of them */
            t->memo = w, t->gen = w->gen, t->skip = o.skip, t->max = max, t->tag = 0;
    }
out:
    if (memos)
        memos->busy = 0;
    *skip_io = o.k < o.skip ? o.skip - o.k : 0;
    *n_out = o.k > o.skip ? o.k - o.skip : 0;
    if (*n_out > max)
        *n_out = max;
    return st == Q_END || (st == Q_FULL && o.k >= o.skip);
}

/* crawl_backtrace and sw_backtrace: quick_backtrace where it applies,
 * run_walk for the rest. */
static unsigned backtrace_from(const crawl_regs *regs, uintptr_t *pcs, unsigned max, unsigned flags,
                               sw_memo_tag *t)
{
    /* One load per register: crawl_capture_regs has just stored them one
     * by one, and a wider load would wait for both stores to retire (the
     * store could not be forwarded). */
    quick_regs q;
    q.ip = regs->ip;
    __asm__("" : "+r"(q.ip));
    q.sp = regs->sp;
    q.fp = regs->fp;
    unsigned skip = 1, n = 0;
    crawl__thread *th = crawl__self();
    uintptr_t lo = th->stack_lo, span = th->stack_hi - th->stack_lo;
    uintptr_t here = (uintptr_t)__builtin_frame_address(0);
    if (!(flags & CRAWL_WALK_FAST) && th->attached && !th->top && regs->sp - lo < span &&
        here - lo < span) {
        const sw_range_table *held = sw_ranges_enter();
        const sw_snapshot *snap = held ? NULL : sw_snap_enter(th);
        int done = 0;
        if (snap) {
            /* (signal-safe: no memo; its first use maps it) */
            int safe = (flags & CRAWL_WALK_SIGNAL_SAFE) != 0;
            walk_memos *memos = safe ? NULL : memos_of(th);
            unsigned long hits = 0;
            done = quick_backtrace(snap, memos && !memos->busy ? memos : NULL, lo, span, safe,
                                   (flags & SW_WALK_SPARSE_CFI) != 0, &q, &skip, pcs, max, &n,
                                   &hits, t);
            if (hits)
                __atomic_store_n(&th->counts[SW_COUNT_CFI_HITS],
                                 th->counts[SW_COUNT_CFI_HITS] + hits, __ATOMIC_RELAXED);
            sw_snap_exit(th);
        }
        sw_ranges_exit(held);
        if (done)
            return n;
    }
    crawl_regs at = *regs;
    at.ip = q.ip, at.sp = q.sp, at.fp = q.fp;
    walk w = {.flags = (flags & (CRAWL_WALK_FAST | CRAWL_WALK_SIGNAL_SAFE | SW_WALK_SPARSE_CFI)) |
                       CRAWL_WALK_SKIP_FRAMES,
              .pcs = pcs, .pcs_max = max, .pcs_n = n};
    run_walk(&w, &at, 0, skip);
    return w.pcs_n;
}

uint32_t sw_memo_probe(const crawl_regs *regs, unsigned max, unsigned flags)
{
    /* (backtrace_from's and quick_backtrace's conditions for the memo) */
    crawl__thread *th = crawl__self();
    walk_memos *memos = th->walk_memo;
    uintptr_t lo = th->stack_lo, span = th->stack_hi - th->stack_lo;
    uintptr_t here = (uintptr_t)__builtin_frame_address(0);
    if (!memos || memos->busy || (flags & (CRAWL_WALK_FAST | CRAWL_WALK_SIGNAL_SAFE)) ||
        !th->attached || th->top || regs->sp - lo >= span || here - lo >= span ||
        max == 0 || 1 + max >= SW_MEMO_FRAMES)
        return 0;
    memos->busy = 1;                     /* (a handler's walk meanwhile leaves them alone) */
    /* a memo with a tag for this walk that starts here; only then the
     * snapshot (a miss costs the loop alone: with many call paths, most
     * walks miss) */
    walk_memo *m = NULL;
    unsigned i = 0;
    for (; i < SW_MEMOS; i++) {
        walk_memo *e = &memos->m[i];
        if (e->n && e->f[0].ip == regs->ip && e->f[0].sp == regs->sp) {
            if (e->tag && e->tag_skip == 1 && e->tag_max == max && e->checks == MEMO_CHECKS_OK)
                m = e;
            break;
        }
    }
    uint32_t tag = 0;
    if (m) {
        const sw_range_table *held = sw_ranges_enter();
        const sw_snapshot *snap = held ? NULL : sw_snap_enter(th);
        if (snap && m->snap == snap && memo_checks_hold(m, regs->fp)) {
            tag = m->tag;
            memos->recent = i;
        }
        if (snap)
            sw_snap_exit(th);
        sw_ranges_exit(held);
    }
    memos->busy = 0;
    return tag;
}

unsigned sw_backtrace(const crawl_regs *regs, uintptr_t *pcs, unsigned max, unsigned flags)
{
    return max ? backtrace_from(regs, pcs, max, flags, NULL) : 0;
}

unsigned sw_backtrace_tagged(const crawl_regs *regs, uintptr_t *pcs, unsigned max, unsigned flags,
                             sw_memo_tag *t)
{
    t->memo = NULL, t->gen = 0, t->tag = 0;
    return max ? backtrace_from(regs, pcs, max, flags, t) : 0;
}

void sw_memo_set_tag(const sw_memo_tag *t, uint32_t tag)
{
    walk_memo *m = t->memo;
    walk_memos *memos = crawl__self()->walk_memo;
    /* (the thread's own memos, not being written by a nested walk) */
    if (m && memos && !memos->busy && m->gen == t->gen) {
        m->tag = tag, m->tag_skip = t->skip, m->tag_max = t->max;
        m->checks = MEMO_CHECKS_UNBUILT;   /* (built when a walk replays it whole) */
    }
}

int crawl_backtrace(uintptr_t *pcs, int max, unsigned flags)
{
    if (!pcs || max <= 0)
        return 0;
    crawl_regs r;
    crawl_capture_regs(&r);
    unsigned n = backtrace_from(&r, pcs, (unsigned)max, flags & ~SW_WALK_SPARSE_CFI, NULL);
    CRAWL__NO_TAIL(n);
    return (int)n;
}

crawl_walk_status crawl_walk_context(const ucontext_t *uc, crawl_walk_fn fn, void *ctx,
                                     unsigned flags)
{
    if (!uc)
        return CRAWL_WALK_FAILED;
    crawl_regs r;
    sw_regs_from_ucontext(&r, uc);
    return sw_walk(&r, 1, 0, fn, ctx, flags);
}

/* ---- accessors ----------------------------------------------------------- */
crawl_kind crawl_cf_kind(const crawl_cf *cf) { return cf->kind; }
uintptr_t crawl_cf_ip(const crawl_cf *cf) { return cf->ip; }
uintptr_t crawl_cf_sp(const crawl_cf *cf) { return cf->sp; }
crawl_frame *crawl_cf_frame(const crawl_cf *cf) { return cf->frame; }
const void *crawl_cf_method(const crawl_cf *cf) { return cf->method; }
unsigned crawl_cf_depth(const crawl_cf *cf) { return cf->depth; }
unsigned crawl_cf_flags(const crawl_cf *cf) { return cf->flags; }
const crawl_regs *crawl_cf_regs(const crawl_cf *cf) { return cf->regs; }
const crawl_vm_frame *crawl_cf_vm_frame(const crawl_cf *cf) { return cf->vm; }
const char *crawl_cf_name(const crawl_cf *cf) { return cf->name; }
unsigned crawl_cf_thread(const crawl_cf *cf) { return cf->thread; }
