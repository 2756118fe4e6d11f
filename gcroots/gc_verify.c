/* crawl_gc_verify: the roots, checked by a collection; then the calling
 * thread's native frames, searched for words that keep GC objects alive
 * though no reported root, static data or registered root reaches them
 * (what a move to a precise or compacting collector must fix first). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gcroots/gc_internal.h"

/* An object's words, newest frame first: the first word of each of the
 * first MAX_WORDS frames that hold it, and how many words in all. A word
 * need not be the one the program meant: a slot a frame never wrote may
 * keep a stale copy from an earlier, deeper call (in a -O0 build, often,
 * and often several in one frame: under ASan eight in one frame hid the
 * frame whose local was the bug), so each frame is listed. */
enum { MAX_WORDS = 8 };
typedef struct finding {
    uintptr_t object;
    size_t size;
    size_t nwords, nlisted;
    uintptr_t slot[MAX_WORDS];
    size_t frame[MAX_WORDS];            /* index into the frames */
} finding;

typedef struct scan {
    gc_graph g;
    const gc_roots *roots;
    const gc_frame_rec *frames;
    size_t nframes;
    finding *found;
    size_t nfound, capfound;
} scan;

GC_SCANS static void static_source(uintptr_t lo, uintptr_t hi, const char *module, void *ctx)
{
    (void)module;
    scan *s = ctx;
    for (uintptr_t a = lo; a + sizeof(uintptr_t) <= hi; a += sizeof(uintptr_t))
        gc_graph_source(&s->g, *(const uintptr_t *)a, -1, 0);
}

static finding *already(const scan *s, uintptr_t object)
{
    for (size_t i = 0; i < s->nfound; i++)
        if (s->found[i].object == object)
            return &s->found[i];
    return NULL;
}

/* Under Boehm's lock: everything the precise roots reach, then the frames'
 * words that point elsewhere in the heap. */
GC_SCANS static void *GC_CALLBACK find_unreported(void *arg)
{
    scan *s = arg;
    for (size_t i = 0; i < s->roots->n; i++)
        gc_graph_source(&s->g, (uintptr_t)s->roots->r[i].value, -1, 0);
    gc_static_ranges(static_source, s);
    gc_graph_run(&s->g, 0);
    for (size_t f = 0; f < s->nframes; f++) {
        const gc_frame_rec *fr = &s->frames[f];
        if (fr->script || !fr->cfa)
            continue;
        for (uintptr_t a = fr->sp; a + sizeof(uintptr_t) <= fr->cfa; a += sizeof(uintptr_t)) {
            uintptr_t v = *(const uintptr_t *)a;
            void *base = v >= 4096 ? GC_base((void *)v) : NULL;
            if (!base || gc_graph_find(&s->g, (uintptr_t)base) >= 0)
                continue;
            finding *x = already(s, (uintptr_t)base);
            if (!x) {
                if (gc_reserve(&s->found, &s->capfound, s->nfound, sizeof *s->found) != 0)
                    return NULL;
                x = &s->found[s->nfound++];
                *x = (finding){.object = (uintptr_t)base, .size = GC_size(base)};
            }
            if (x->nlisted < MAX_WORDS && (!x->nlisted || x->frame[x->nlisted - 1] != f)) {
                x->slot[x->nlisted] = a, x->frame[x->nlisted] = f;
                x->nlisted++;
            }
            x->nwords++;
        }
    }
    return NULL;
}

static const char *script_near(const scan *s, size_t f, int dir)
{
    for (size_t i = f; dir < 0 ? i-- > 0 : ++i < s->nframes;)
        if (s->frames[i].script)
            return s->frames[i].text;
    return NULL;
}

static void report_finding(const scan *s, const finding *x)
{
    gc_obj e;
    size_t size = gc_obj_find(x->object, &e) ? e.size : x->size;   /* as requested */
    crawl_report *r = crawl_report_begin();
    crawl_report_printf(r, "==%d==ERROR: crawl-boehm: unreported-reference: %p (%zu-byte object) "
                           "is alive only through a word the collector scans conservatively\n",
                        (int)getpid(), (void *)x->object, size);
    const char *said_newer = NULL, *said_older = NULL;
    for (size_t i = 0; i < x->nlisted; i++) {
        const gc_frame_rec *fr = &s->frames[x->frame[i]];
        crawl_report_printf(r, "  the word at %p (sp+%lu) in the frame of %s\n", (void *)x->slot[i],
                            (unsigned long)(x->slot[i] - fr->sp), fr->text);
        const char *newer = script_near(s, x->frame[i], -1), *older = script_near(s, x->frame[i], +1);
        if ((newer || older) && (i == 0 || newer != said_newer || older != said_older))
            crawl_report_printf(r, "  between script frames: %s (newer) and %s (older)\n",
                                newer ? newer : "none", older ? older : "none");
        said_newer = newer, said_older = older;
    }
    if (x->nwords > x->nlisted)
        crawl_report_printf(r, "  and %zu more word(s) in %s frames\n", x->nwords - x->nlisted,
                            x->nlisted < MAX_WORDS ? "these" : "these and older");
    if (x->nlisted > 1)
        crawl_report_printf(r, "  (a slot its function never wrote may hold a stale copy from an "
                               "earlier call)\n");
    crawl_report_printf(r, "  no Frame reports a slot holding it, and no static data or "
                           "reported root reaches it\n");
    gc_report_object(r, x->object, size);
    crawl_report_printf(r, "SUMMARY: crawl-boehm: unreported-reference\n");
    crawl_report_end(r);
}

unsigned crawl_gc_verify(void)
{
    gc_opts_refresh();
    gc_roots roots;
    gc_roots_capture(&roots, 1);
    unsigned problems = gc_flush_pending();
    scan s = {.roots = &roots};
    gc_graph_init(&s.g);
    gc_frame_rec *frames = NULL;
    s.nframes = gc_stack_frames(&frames, (uintptr_t)__builtin_frame_address(0));
    s.frames = frames;
    GC_call_with_alloc_lock(find_unreported, &s);
    for (size_t i = 0; i < s.nfound; i++)
        report_finding(&s, &s.found[i]);
    problems += (unsigned)s.nfound;
    free(s.found);
    free(frames);
    gc_graph_free(&s.g);
    gc_roots_release(&roots);
    return problems;
}
