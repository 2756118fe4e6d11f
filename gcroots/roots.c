/* GC roots: Frames report the slots that hold references. */
#include <crawl/gcroots.h>
#include <stdio.h>

#include "stackwalk/internal.h"

struct crawl_roots {
    crawl_root_fn fn;
    void *ctx;
    const crawl_cf *cf;
};

void crawl_roots_report(crawl_roots *sink, void **slot, unsigned root_flags)
{
    sink->fn(slot, root_flags, sink->cf, sink->ctx);
}

typedef struct enum_state {
    crawl_root_fn fn;
    void *ctx;
    unsigned flags;
    int failed;
} enum_state;

static void enum_thread(crawl__thread *th, void *arg)
{
    enum_state *st = arg;
    int self = th == crawl__self();
    crawl_cf cf = {.kind = CRAWL_CF_FRAME, .thread = th->seq};
    crawl_roots sink = {st->fn, st->ctx, &cf};
    unsigned left = th->nframes, depth = 0;
    /* The calling thread's signal stack is asked for (a system call) only
     * when a Frame is not on its stack. */
    crawl__bounds b = {th->stack_lo, th->stack_hi, self ? 0 : th->alt_lo, self ? 0 : th->alt_hi};
    int asked = !self;
    for (crawl_frame *f = th->top; f; f = f->next, depth++) {
        int ok = left-- > 0;
        if (ok && !crawl__frame_ok(f, &b)) {
            ok = !asked;
            if (ok) {
                crawl__thread_bounds(th, 1, &b);
                asked = 1;
                ok = crawl__frame_ok(f, &b);
            }
        }
        if (!ok) {
            st->failed = 1;
            return;
        }
        const crawl_frame_type *t = f->type;
        if (!t->enum_roots)
            continue;
        if ((st->flags & CRAWL_WALK_FUNCTIONS_ONLY) && !(t->flags & CRAWL_FRAME_FUNCTION))
            continue;
        cf.frame = f;
        cf.sp = (uintptr_t)f;
        cf.depth = depth;
        cf.method = t->method ? t->method(f) : NULL;
        cf.name = t->name;
        t->enum_roots(f, &sink);
    }
}

crawl_walk_status crawl_enum_roots(crawl_root_fn fn, void *ctx, unsigned flags)
{
    crawl__thread *th = crawl__self();
    if (!fn)
        return CRAWL_WALK_FAILED;
    if (!th->attached)
        return CRAWL_WALK_DONE;         /* no Frames, no roots */
    enum_state st = {fn, ctx, flags, 0};
    enum_thread(th, &st);
    return st.failed ? CRAWL_WALK_FAILED : CRAWL_WALK_DONE;
}

crawl_walk_status crawl_enum_roots_all_threads(crawl_root_fn fn, void *ctx, unsigned flags)
{
    if (!fn)
        return CRAWL_WALK_FAILED;
    enum_state st = {fn, ctx, flags, 0};
    crawl__threads_foreach(enum_thread, &st);
    return st.failed ? CRAWL_WALK_FAILED : CRAWL_WALK_DONE;
}

/* ---- GCPROTECT ------------------------------------------------------------ */

static void gcprotect_roots(crawl_frame *f, crawl_roots *sink)
{
    crawl_gcprotect *gp = (crawl_gcprotect *)f;
    for (unsigned i = 0; i < gp->n; i++)
        crawl_roots_report(sink, gp->slots[i], 0);
}

static int gcprotect_describe(const crawl_frame *f, char *buf, size_t len)
{
    return snprintf(buf, len, "[GCPROTECT Frame: %u slot(s)]", ((const crawl_gcprotect *)f)->n);
}

const crawl_frame_type crawl_gcprotect_type = {
    .name = "gcprotect",
    .describe = gcprotect_describe,
    .enum_roots = gcprotect_roots,
};

void crawl_gcprotect_push(crawl_gcprotect *gp, void **slots[], unsigned n)
{
    gp->slots = slots;
    gp->n = n;
    crawl_frame_push(&gp->frame, &crawl_gcprotect_type);
}

void crawl_gcprotect_pop(crawl_gcprotect *gp)
{
    crawl_frame_pop(&gp->frame);
}
