/* Tracing the GC heap from chosen sources, for why-alive and the search
 * for unreported references; the static data and stack frames those
 * sources come from. */
#include <errno.h>
#include <gc/gc_mark.h>
#include <link.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "gcroots/gc_internal.h"

int gc_reserve(void *items, size_t *cap, size_t n, size_t item_size)
{
    if (n < *cap)
        return 0;
    size_t want = *cap ? *cap * 2 : 64;
    void *grown = realloc(*(void **)items, want * item_size);
    if (!grown)
        return -1;
    *(void **)items = grown;
    *cap = want;
    return 0;
}

/* ---- precise traces per object kind ------------------------------------------------- */

#define MAX_TRACES 16
static struct {
    _Atomic int kind;
    _Atomic crawl_gc_trace_fn fn;
} traces[MAX_TRACES];
static _Atomic int ntraces;
static pthread_mutex_t traces_lock = PTHREAD_MUTEX_INITIALIZER;

int crawl_gc_set_trace(int gc_kind, crawl_gc_trace_fn trace)
{
    if (gc_kind < 0 || gc_kind >= 1 << 16)
        return -EINVAL;
    pthread_mutex_lock(&traces_lock);
    int n = atomic_load(&ntraces), rc = 0;
    int i = 0;
    while (i < n && atomic_load(&traces[i].kind) != gc_kind)
        i++;
    if (i < n) {
        atomic_store(&traces[i].fn, trace);
    } else if (!trace) {
        rc = 0;
    } else if (n == MAX_TRACES) {
        rc = -ENOSPC;
    } else {
        atomic_store(&traces[n].kind, gc_kind);
        atomic_store(&traces[n].fn, trace);
        atomic_store(&ntraces, n + 1);
    }
    pthread_mutex_unlock(&traces_lock);
    return rc;
}

crawl_gc_trace_fn gc_trace_for(const void *base)
{
    int n = atomic_load_explicit(&ntraces, memory_order_acquire);
    if (!n)
        return NULL;
    int kind = gc_public_kind(GC_get_kind_and_size(base, NULL));
    for (int i = 0; i < n; i++)
        if (atomic_load_explicit(&traces[i].kind, memory_order_relaxed) == kind)
            return atomic_load_explicit(&traces[i].fn, memory_order_relaxed);
    return NULL;
}

typedef struct visiting {
    gc_graph *g;
    long from;                          /* the node being traced */
    uintptr_t base, target;
    long hit;                           /* the target's node once found */
} visiting;

static long add(gc_graph *g, uintptr_t base, long parent, size_t offset, long source);

GC_SCANS static void visit_field(void *const *field, void *ctx)
{
    visiting *v = ctx;
    uintptr_t value = (uintptr_t)*field;
    void *b = value >= 4096 ? GC_base((void *)value) : NULL;
    if (!b)
        return;
    long ni = add(v->g, (uintptr_t)b, v->from, (uintptr_t)field - v->base, -1);
    if (ni >= 0 && v->target && (uintptr_t)b == v->target && v->hit < 0)
        v->hit = ni;
}

void gc_graph_init(gc_graph *g)
{
    memset(g, 0, sizeof *g);
}

void gc_graph_free(gc_graph *g)
{
    free(g->node);
    free(g->set);
    free(g->set_node);
    memset(g, 0, sizeof *g);
}

static size_t hash_base(uintptr_t b, size_t cap)
{
    return (size_t)((b >> 4) * 0x9e3779b97f4a7c15ull >> 17) & (cap - 1);
}

long gc_graph_find(const gc_graph *g, uintptr_t base)
{
    if (!g->set)
        return -1;
    for (size_t i = hash_base(base, g->set_cap);; i = (i + 1) & (g->set_cap - 1)) {
        if (g->set[i] == base)
            return g->set_node[i];
        if (g->set[i] == 0)
            return -1;
    }
}

static int set_grow(gc_graph *g)
{
    size_t cap = g->set_cap ? g->set_cap * 2 : 1 << 12;
    uintptr_t *set = calloc(cap, sizeof *set);
    long *idx = malloc(cap * sizeof *idx);
    if (!set || !idx) {
        free(set);
        free(idx);
        return -1;
    }
    for (size_t i = 0; i < g->set_cap; i++) {
        if (!g->set[i])
            continue;
        size_t j = hash_base(g->set[i], cap);
        while (set[j])
            j = (j + 1) & (cap - 1);
        set[j] = g->set[i];
        idx[j] = g->set_node[i];
    }
    free(g->set);
    free(g->set_node);
    g->set = set;
    g->set_node = idx;
    g->set_cap = cap;
    return 0;
}

/* The node for the object at base (new: appended with parent/offset). */
static long add(gc_graph *g, uintptr_t base, long parent, size_t offset, long source)
{
    long have = gc_graph_find(g, base);
    if (have >= 0)
        return -1;
    if ((g->n + 1) * 2 > g->set_cap && set_grow(g) != 0) {
        g->failed = 1;
        return -1;
    }
    if (gc_reserve(&g->node, &g->cap, g->n, sizeof *g->node) != 0) {
        g->failed = 1;
        return -1;
    }
    long i = (long)g->n++;
    g->node[i] = (gc_node){base, GC_size((void *)base), parent, offset, source};
    size_t j = hash_base(base, g->set_cap);
    while (g->set[j])
        j = (j + 1) & (g->set_cap - 1);
    g->set[j] = base;
    g->set_node[j] = i;
    return i;
}

long gc_graph_source(gc_graph *g, uintptr_t value, long source, size_t offset)
{
    if (value < 4096)
        return -1;
    void *base = GC_base((void *)value);
    return base ? add(g, (uintptr_t)base, -1, offset, source) : -1;
}

GC_SCANS long gc_graph_run(gc_graph *g, uintptr_t target)
{
    if (target) {
        long t = gc_graph_find(g, target);
        if (t >= 0)
            return t;
    }
    while (g->done < g->n) {
        gc_node cur = g->node[g->done];
        long ci = (long)g->done++;
        if (gc_pointer_free((void *)cur.base))
            continue;
        crawl_gc_trace_fn trace = gc_trace_for((void *)cur.base);
        if (trace) {
            visiting v = {g, ci, cur.base, target, -1};
            trace((const void *)cur.base, cur.size, visit_field, &v);
            if (v.hit >= 0)
                return v.hit;
            continue;
        }
        const uintptr_t *w = (const uintptr_t *)cur.base;
        for (size_t k = 0; k < cur.size / sizeof *w; k++) {
            uintptr_t v = w[k];
            if (v < 4096)
                continue;
            void *b = GC_base((void *)v);
            if (!b)
                continue;
            long ni = add(g, (uintptr_t)b, ci, k * sizeof *w, -1);
            if (ni >= 0 && target && (uintptr_t)b == target)
                return ni;
        }
    }
    return -1;
}

/* ---- static data ---------------------------------------------------------------- */

typedef struct ranges_ctx {
    void (*fn)(uintptr_t, uintptr_t, const char *, void *);
    void *ctx;
} ranges_ctx;

static int each_module(struct dl_phdr_info *info, size_t size, void *arg)
{
    (void)size;
    ranges_ctx *rc = arg;
    const char *name = info->dlpi_name && info->dlpi_name[0] ? info->dlpi_name : "(main program)";
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type != PT_LOAD || !(ph->p_flags & PF_W))
            continue;
        uintptr_t lo = info->dlpi_addr + ph->p_vaddr;
        rc->fn(lo & ~(uintptr_t)7, lo + ph->p_memsz, name, rc->ctx);
    }
    return 0;
}

void gc_static_ranges(void (*fn)(uintptr_t lo, uintptr_t hi, const char *module, void *ctx),
                      void *ctx)
{
    ranges_ctx rc = {fn, ctx};
    dl_iterate_phdr(each_module, &rc);
}

/* ---- the calling thread's frames ----------------------------------------------------- */

typedef struct frames_ctx {
    gc_frame_rec *r;
    size_t n, cap;
    uintptr_t above;                    /* frames at or below this sp are the caller's callees */
    long last_native;                   /* its cfa is the next native frame's sp */
    crawl_regs *regs;                   /* the first native frame's registers, when asked */
    char *caller;
    size_t caller_len;
} frames_ctx;

static crawl_action each_frame(const crawl_cf *cf, void *arg)
{
    frames_ctx *fc = arg;
    crawl_kind k = crawl_cf_kind(cf);
    int native = k == CRAWL_CF_NATIVE || k == CRAWL_CF_JIT;
    if (crawl_cf_sp(cf) <= fc->above)
        return CRAWL_CONTINUE;           /* crawl-boehm's own frames, and Frames inside them */
    int script = k == CRAWL_CF_VM ||
                 (k == CRAWL_CF_FRAME && crawl_cf_frame(cf) && crawl_cf_frame(cf)->type &&
                  (crawl_cf_frame(cf)->type->flags & CRAWL_FRAME_FUNCTION));
    if (!native && !script)
        return CRAWL_CONTINUE;
    if (gc_reserve(&fc->r, &fc->cap, fc->n, sizeof *fc->r) != 0)
        return CRAWL_ABORT;
    gc_frame_rec *rec = &fc->r[fc->n];
    memset(rec, 0, sizeof *rec);
    rec->script = script;
    if (native) {
        rec->sp = crawl_cf_sp(cf);
        if (fc->regs && fc->last_native < 0 && crawl_cf_regs(cf)) {
            *fc->regs = *crawl_cf_regs(cf);
            crawl_cf_describe(cf, fc->caller, fc->caller_len);
        }
        if (fc->last_native >= 0)
            fc->r[fc->last_native].cfa = rec->sp;
        fc->last_native = (long)fc->n;
    }
    crawl_cf_describe(cf, rec->text, sizeof rec->text);
    fc->n++;
    return CRAWL_CONTINUE;
}

size_t gc_stack_frames(gc_frame_rec **out, uintptr_t above)
{
    frames_ctx fc = {.above = above, .last_native = -1};
    crawl_walk(each_frame, &fc, 0);
    *out = fc.r;
    return fc.n;
}

size_t gc_stack_frames_regs(gc_frame_rec **out, uintptr_t above, crawl_regs *regs,
                            char *caller, size_t caller_len)
{
    memset(regs, 0, sizeof *regs);
    frames_ctx fc = {.above = above, .last_native = -1, .regs = regs, .caller = caller,
                     .caller_len = caller_len};
    if (caller_len)
        caller[0] = 0;
    if (crawl_walk(each_frame, &fc, CRAWL_WALK_NO_CFI_CACHE) == CRAWL_WALK_FAILED) {
        /* (no libunwind at run time, or a frame further out it could not
         * step: the frames from the CFI walk, and the caller's registers
         * where this walk got that far) */
        free(fc.r);
        return gc_stack_frames(out, above);
    }
    *out = fc.r;
    return fc.n;
}
