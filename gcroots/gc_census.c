/* The root census: every root of every attached thread, as a collection
 * saw them, with the object each points to and its allocation stack. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gcroots/gc_internal.h"

/* Where the calling thread's Frames live: one walk, each Frame with the
 * native frame that follows it (the one whose stack frame holds it). */
typedef struct home {
    const void *frame;
    char text[200];
} home;
typedef struct homes {
    home *h;
    size_t n, cap;
    size_t open;                        /* Frames still waiting for their native frame */
} homes;

static crawl_action note_home(const crawl_cf *cf, void *ctx)
{
    homes *hs = ctx;
    crawl_kind k = crawl_cf_kind(cf);
    /* a Frame, or the Frame hosting VM activations (an interpreter segment:
     * one entry for all its activations) */
    if ((k == CRAWL_CF_FRAME || k == CRAWL_CF_VM) &&
        !(hs->n && hs->h[hs->n - 1].frame == crawl_cf_frame(cf))) {
        if (gc_reserve(&hs->h, &hs->cap, hs->n, sizeof *hs->h) != 0)
            return CRAWL_ABORT;
        hs->h[hs->n].frame = crawl_cf_frame(cf);
        hs->h[hs->n].text[0] = '\0';
        hs->n++;
    } else if (k == CRAWL_CF_NATIVE) {
        char text[200];
        crawl_cf_describe(cf, text, sizeof text);
        for (; hs->open < hs->n; hs->open++)
            snprintf(hs->h[hs->open].text, sizeof hs->h[hs->open].text, "%s", text);
    }
    return CRAWL_CONTINUE;
}

static const char *home_of(const homes *hs, const void *frame)
{
    for (size_t i = 0; i < hs->n; i++)
        if (hs->h[i].frame == frame)
            return hs->h[i].text;
    return "";
}

/* "function file:line (stack scan)" for a return address found by
 * scanning another thread's stack (boehm.c). */
static void home_by_symbol(uintptr_t pc, char *buf, size_t len)
{
    char names[512];
    crawl_symbol s;
    if (crawl_symbolize(pc - 1, &s, names, sizeof names) < 0 || !s.function)
        snprintf(buf, len, "0x%lx (stack scan)", (unsigned long)pc);
    else if (s.file)
        snprintf(buf, len, "%s %s:%d (stack scan)", s.function, s.file, s.line);
    else
        snprintf(buf, len, "%s (stack scan)", s.function);
}

unsigned crawl_gc_census_each(void (*fn)(const crawl_gc_root *root, void *ctx), void *ctx)
{
    if (!fn)
        return 0;
    gc_roots t;
    gc_roots_capture(&t, 0);
    homes hs = {0};
    crawl_walk(note_home, &hs, 0);
    int me = crawl_thread_number();
    crawl_gc_root *root = malloc(sizeof *root);
    for (size_t i = 0; root && i < t.n; i++) {
        const gc_root_rec *r = &t.r[i];
        memset(root, 0, sizeof *root);
        root->thread = r->thread;
        root->index = r->index;
        root->frame = r->frame;
        snprintf(root->frame_type, sizeof root->frame_type, "%s", r->type_name);
        snprintf(root->frame_text, sizeof root->frame_text, "%s", r->text);
        if ((int)r->thread == me)
            snprintf(root->native, sizeof root->native, "%s", home_of(&hs, r->frame));
        else if (r->home_pc)
            home_by_symbol(r->home_pc, root->native, sizeof root->native);
        root->slot = r->slot;
        root->flags = r->flags;
        root->value = r->value;
        root->object = (void *)r->object;
        root->object_size = r->object_size;
        gc_obj e;
        if (r->object && gc_obj_find(r->object, &e))
            root->alloc_stack = e.alloc_stack;
        fn(root, ctx);
    }
    free(root);
    free(hs.h);
    unsigned n = (unsigned)t.n;
    gc_roots_release(&t);
    return n;
}

typedef struct printer {
    FILE *out;
    unsigned thread;
    int any;
} printer;

static void print_root(const crawl_gc_root *r, void *ctx)
{
    printer *p = ctx;
    if (!p->any || r->thread != p->thread)
        fprintf(p->out, "thread T%u:\n", r->thread);
    p->any = 1;
    p->thread = r->thread;
    fprintf(p->out, "  #%u Frame '%s' %p%s%s%s%s%s: slot %p%s = %p", r->index, r->frame_type,
            r->frame, r->frame_text[0] ? " (" : "", r->frame_text, r->frame_text[0] ? ")" : "",
            r->native[0] ? " in " : "", r->native, (void *)r->slot,
            r->flags & CRAWL_ROOT_INTERIOR ? " [interior]" : "", r->value);
    if (r->object)
        fprintf(p->out, " -> %zu-byte object %p%s\n", r->object_size, r->object,
                r->object == r->value ? "" : " (inside)");
    else
        fprintf(p->out, "%s\n", r->value ? " (not in the GC heap)" : "");
    if (r->alloc_stack) {
        fflush(p->out);
        crawl_depot_print(r->alloc_stack, fileno(p->out));
    }
}

void crawl_gc_census(int fd)
{
    int dup_fd = dup(fd);
    FILE *out = dup_fd >= 0 ? fdopen(dup_fd, "w") : NULL;
    if (!out)
        return;
    printer p = {out, 0, 0};
    fprintf(out, "crawl-boehm root census (each thread's Frames, newest first):\n");
    unsigned n = crawl_gc_census_each(print_root, &p);
    fprintf(out, "%u root%s\n", n, n == 1 ? "" : "s");
    fclose(out);
}
