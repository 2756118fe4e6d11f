/* Why is this object alive: the shortest path to it from the most
 * trustworthy kind of root that reaches it. */
#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gcroots/gc_internal.h"

enum { FROM_FRAMES, FROM_STATIC, FROM_STACK };

/* The sources of one kind, numbered so a path can name its root. */
typedef struct source {
    uintptr_t slot;
    char what[240];
} source;

typedef struct search {
    gc_graph g;
    uintptr_t target;
    long found;                         /* the target's node, or -1 */
    const gc_roots *roots;
    const gc_frame_rec *frames;
    size_t nframes;
    crawl_regs regs;                    /* the caller's, at its call of crawl_gc_why */
    const char *caller;                 /* its frame's description */
    source *src;
    size_t nsrc, capsrc;
    int kind;
} search;

static long add_source(search *s, uintptr_t slot, uintptr_t value, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static long add_source(search *s, uintptr_t slot, uintptr_t value, const char *fmt, ...)
{
    if (gc_reserve(&s->src, &s->capsrc, s->nsrc, sizeof *s->src) != 0)
        return -1;
    long i = gc_graph_source(&s->g, value, (long)s->nsrc, 0);
    if (i < 0)
        return -1;
    source *src = &s->src[s->nsrc++];
    src->slot = slot;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(src->what, sizeof src->what, fmt, ap);
    va_end(ap);
    return i;
}

GC_SCANS static void static_range(uintptr_t lo, uintptr_t hi, const char *module, void *ctx)
{
    search *s = ctx;
    for (uintptr_t a = lo; a + sizeof(uintptr_t) <= hi; a += sizeof(uintptr_t))
        add_source(s, a, *(const uintptr_t *)a, "static data of %s", module);
}

/* Under Boehm's lock: add one kind of source, then trace. */
GC_SCANS static void *GC_CALLBACK run_kind(void *arg)
{
    search *s = arg;
    gc_graph_free(&s->g);
    gc_graph_init(&s->g);
    s->nsrc = 0;
    if (s->kind == FROM_FRAMES) {
        for (size_t i = 0; i < s->roots->n; i++) {
            const gc_root_rec *r = &s->roots->r[i];
            add_source(s, (uintptr_t)r->slot, (uintptr_t)r->value,
                       "slot %p reported by Frame '%s' %p%s%s%s (thread T%u, root #%u)",
                       (void *)r->slot, r->type_name, r->frame, r->text[0] ? " (" : "", r->text,
                       r->text[0] ? ")" : "", r->thread, r->index);
        }
    } else if (s->kind == FROM_STATIC) {
        gc_static_ranges(static_range, s);
    } else {
        /* what the caller held in registers (in none of the frames' words:
         * still in the register, or saved by crawl_gc_why's own frames) */
        static const struct {
            const char *name;
            size_t at;
        } regs[] = {{"rbx", offsetof(crawl_regs, bx)}, {"rbp", offsetof(crawl_regs, fp)},
                    {"r12", offsetof(crawl_regs, r12)}, {"r13", offsetof(crawl_regs, r13)},
                    {"r14", offsetof(crawl_regs, r14)}, {"r15", offsetof(crawl_regs, r15)}};
        for (size_t i = 0; s->regs.sp && i < sizeof regs / sizeof regs[0]; i++)
            add_source(s, 0, *(const uintptr_t *)((const char *)&s->regs + regs[i].at),
                       "register %s of %s at its call of crawl_gc_why (scanned conservatively)",
                       regs[i].name, s->caller);
        for (size_t f = 0; f < s->nframes; f++) {
            const gc_frame_rec *fr = &s->frames[f];
            if (fr->script || !fr->cfa)
                continue;
            for (uintptr_t a = fr->sp; a + sizeof(uintptr_t) <= fr->cfa; a += sizeof(uintptr_t))
                add_source(s, a, *(const uintptr_t *)a,
                           "stack word %p (sp+%lu) in the frame of %s (scanned conservatively)",
                           (void *)a, (unsigned long)(a - fr->sp), fr->text);
        }
    }
    s->found = gc_graph_run(&s->g, s->target);
    return NULL;
}

static void print_path(FILE *out, const search *s)
{
    /* the chain from the target back to its source, printed source first */
    long chain[4096];
    size_t n = 0;
    for (long i = s->found; i >= 0 && n < sizeof chain / sizeof chain[0];
         i = s->g.node[i].parent)
        chain[n++] = i;
    const gc_node *first = &s->g.node[chain[n - 1]];
    const source *src = &s->src[first->source];
    fprintf(out, "  root: %s\n", src->what);
    for (size_t k = n; k-- > 0;) {
        const gc_node *nd = &s->g.node[chain[k]];
        if (k + 1 < n)
            fprintf(out, "  -> at offset %zu of that object: ", nd->offset);
        else
            fprintf(out, "  -> holds ");
        gc_obj e;
        size_t size = gc_obj_find(nd->base, &e) ? e.size : nd->size;   /* as requested */
        fprintf(out, "%p (%zu-byte object)%s\n", (void *)nd->base, size,
                k == 0 ? "  <- the object" : "");
    }
}

int crawl_gc_why(const void *obj, int fd)
{
    int dup_fd = dup(fd);
    FILE *out = dup_fd >= 0 ? fdopen(dup_fd, "w") : NULL;
    if (!out)
        return -1;                       /* fd is not writable: nothing said */
    if (!obj) {
        fprintf(out, "crawl_gc_why: NULL is not a GC object\n");
        fclose(out);
        return -1;
    }
    uintptr_t base = (uintptr_t)GC_base((void *)obj);
    if (!base) {
        fprintf(out, "crawl_gc_why: %p is not in the GC heap\n", obj);
        fclose(out);
        return -1;
    }
    gc_opts_refresh();
    gc_obj e;
    if (gc_obj_find(base, &e) && e.state != GC_OBJ_LIVE) {
        fprintf(out, "why is %p alive: it is not: collection #%lu collected it "
                     "(crawl_gc_check would report use-after-collect)\n",
                obj, e.collect_gc);
        fclose(out);
        return -1;
    }
    if (base != (uintptr_t)obj)
        fprintf(out, "%p points %lu bytes into the object at %p\n", obj,
                (unsigned long)((uintptr_t)obj - base), (void *)base);
    gc_roots roots;
    gc_roots_capture(&roots, 0);
    search s = {.target = base, .found = -1, .roots = &roots};
    char caller[200];
    s.nframes = gc_stack_frames_regs((gc_frame_rec **)&s.frames,
                                     (uintptr_t)__builtin_frame_address(0), &s.regs, caller,
                                     sizeof caller);
    s.caller = caller;
    static const char *const kinds[] = {"roots reported by Frames", "static data",
                                        "this thread's stack and registers"};
    int rc = -1;
    fflush(out);
    for (s.kind = FROM_FRAMES; s.kind <= FROM_STACK; s.kind++) {
        GC_call_with_alloc_lock(run_kind, &s);
        if (s.found >= 0) {
            long len = 0;
            for (long i = s.found; s.g.node[i].parent >= 0; i = s.g.node[i].parent)
                len++;
            gc_obj t;
            size_t size = gc_obj_find(base, &t) ? t.size : s.g.node[s.found].size;
            fprintf(out, "why is %p (%zu bytes) alive: reached from %s, %ld step%s:\n", obj,
                    size, kinds[s.kind], len, len == 1 ? "" : "s");
            print_path(out, &s);
            rc = (int)len;
            break;
        }
    }
    if (rc < 0)
        fprintf(out, "why is %p alive: no root reaches it (Frames' roots, static data, this "
                     "thread's stack and registers)%s: it is garbage the next collection may "
                     "free, or freed already (GC_FREE), or held only where this search does "
                     "not look (another thread's stack)\n",
                obj, s.g.failed ? " — the search ran out of memory" : "");
    fflush(out);
    if (gc_obj_find(base, &e) && e.alloc_stack) {
        fprintf(out, "  %p was allocated by thread T%u here:\n", (void *)base, e.alloc_tid);
        fflush(out);
        crawl_depot_print(e.alloc_stack, fileno(out));
    }
    gc_graph_free(&s.g);
    free(s.src);
    free((void *)s.frames);
    gc_roots_release(&roots);
    fclose(out);
    return rc;
}
