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

/* A Frame is followed only if it lies on its thread's stack (or, for the
 * calling thread, on the signal stack in use), is aligned, and has a type
 * that was pushed: a corrupt chain fails the enumeration, never crashes it. */
static int frame_ok(const crawl__thread *th, const crawl_frame *f, int self)
{
    uintptr_t a = (uintptr_t)f;
    if (a & (sizeof(void *) - 1))
        return 0;
    int on_stack = self ? crawl__on_stack(th, a, sizeof *f)
                        : (a >= th->stack_lo && a + sizeof *f <= th->stack_hi) ||
                              (a >= th->alt_lo && a + sizeof *f <= th->alt_hi);
    return on_stack && crawl__type_known(f->type);
}

static void enum_thread(crawl__thread *th, void *arg)
{
    enum_state *st = arg;
    int self = th == crawl__self();
    crawl_cf cf = {.kind = CRAWL_CF_FRAME};
    crawl_roots sink = {st->fn, st->ctx, &cf};
    unsigned left = th->nframes, depth = 0;
    for (crawl_frame *f = th->top; f; f = f->next, depth++) {
        if (left-- == 0 || !frame_ok(th, f, self)) {
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
