/* Heap profiles as a self-contained SVG flame graph of live bytes: the
 * root (all) at the bottom, each stack's callers below its callees, widths
 * proportional to bytes; native frames in warm colours, script frames in
 * blue, JIT frames in green. Every box is a <g> with class (its kind),
 * data-depth and data-bytes, and a <title> for the tooltip, so tools and
 * tests can read the numbers back. No script, no external reference. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "sanitizer/heap_output.h"

typedef struct node {
    unsigned frame;                     /* 0: the root */
    unsigned first, next;               /* children, siblings (0: none) */
    double bytes;
} node;

typedef struct tree {
    node *n;
    size_t len, cap;
    unsigned depth;
} tree;

/* The child of parent for frame: frames with the same text are one box (a
 * script function at two positions of one line, say). */
static unsigned child(const ho_profile *p, tree *t, unsigned parent, unsigned frame)
{
    for (unsigned c = t->n[parent].first; c; c = t->n[c].next)
        if (t->n[c].frame == frame || (p->frames[t->n[c].frame].text == p->frames[frame].text &&
                                       p->frames[t->n[c].frame].kind == p->frames[frame].kind))
            return c;
    if (t->len == t->cap) {
        size_t cap = t->cap * 2;
        node *more = realloc(t->n, cap * sizeof *more);
        if (!more)
            return 0;
        t->n = more, t->cap = cap;
    }
    unsigned c = (unsigned)t->len++;
    t->n[c] = (node){.frame = frame, .next = t->n[parent].first};
    t->n[parent].first = c;
    return c;
}

#define WIDTH 1200.0
#define ROW 17
#define TOP 36

static uint32_t fnv(const char *s)
{
    uint32_t h = 2166136261u;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 16777619u;
    return h;
}

/* The first max bytes of s, XML-escaped (control characters dropped; a
 * cut short name keeps ASCII only, so no UTF-8 sequence is split). */
static void xml_text(ho_out *o, const char *s, size_t max)
{
    int ascii = strlen(s) > max;
    for (size_t k = 0; *s && k < max; s++, k++) {
        switch (*s) {
        case '<': ho_write(o, "&lt;", 4); break;
        case '>': ho_write(o, "&gt;", 4); break;
        case '&': ho_write(o, "&amp;", 5); break;
        case '"': ho_write(o, "&quot;", 6); break;
        default:
            if ((unsigned char)*s >= 0x20 && (!ascii || (unsigned char)*s < 0x80))
                ho_write(o, s, 1);
        }
    }
}

static void box(ho_out *o, const ho_profile *p, const tree *t, unsigned i, double x,
                unsigned depth, double total)
{
    const node *nd = &t->n[i];
    double w = nd->bytes / total * (WIDTH - 20);
    double y = TOP + (double)(t->depth - depth) * ROW;
    const ho_frame *f = i ? &p->frames[nd->frame] : NULL;
    const char *name = f ? ho_str(p, f->kind == HO_NATIVE ? f->name : f->text) : "all";
    const char *cls = !f ? "root" : f->kind == HO_SCRIPT ? "script" : f->kind == HO_JIT ? "jit"
                                                                                      : "native";
    uint32_t h = fnv(name);
    unsigned r, g, b;
    if (!f)
        r = 200, g = 200, b = 200;
    else if (f->kind == HO_SCRIPT)
        r = 60 + h % 50, g = 130 + (h >> 8) % 60, b = 210 + (h >> 16) % 45;
    else if (f->kind == HO_JIT)
        r = 70 + h % 50, g = 190 + (h >> 8) % 60, b = 70 + (h >> 16) % 50;
    else
        r = 205 + h % 50, g = 80 + (h >> 8) % 130, b = (h >> 16) % 55;
    ho_printf(o, "<g class=\"%s\" data-depth=\"%u\" data-bytes=\"%.0f\"><title>", cls, depth,
              nd->bytes);
    xml_text(o, name, SIZE_MAX);
    ho_printf(o, " (%.0f %s, %.2f%%)</title><rect x=\"%.2f\" y=\"%.1f\" width=\"%.2f\" "
                 "height=\"%d\" rx=\"2\" fill=\"rgb(%u,%u,%u)\"/>",
              nd->bytes, p->snap->kind == HP_KIND_CPU ? "samples" : "bytes",
              100.0 * nd->bytes / total, x, y, w, ROW - 1, r, g, b);
    size_t fit = w > 24 ? (size_t)((w - 6) / 7) : 0;
    if (fit >= 3) {
        ho_printf(o, "<text x=\"%.2f\" y=\"%.1f\">", x + 3, y + ROW - 5);
        size_t len = strlen(name);
        xml_text(o, name, len > fit ? fit - 2 : len);
        if (len > fit)
            ho_write(o, "..", 2);
        ho_write(o, "</text>", 7);
    }
    ho_write(o, "</g>\n", 5);
    for (unsigned c = nd->first; c; c = t->n[c].next) {   /* sorted: the biggest first */
        box(o, p, t, c, x, depth + 1, total);
        x += t->n[c].bytes / total * (WIDTH - 20);
    }
}

static int bigger_first(const void *a, const void *b, void *tp)
{
    const node *n = tp;
    double x = n[*(const unsigned *)a].bytes, y = n[*(const unsigned *)b].bytes;
    return x > y ? -1 : x < y;
}

/* Relink every node's children, the biggest first. 0 or -ENOMEM. */
static int sort_children(tree *t)
{
    unsigned *kids = malloc(t->len * sizeof *kids);
    if (!kids)
        return -ENOMEM;
    for (size_t i = 0; i < t->len; i++) {
        unsigned nk = 0;
        for (unsigned c = t->n[i].first; c; c = t->n[c].next)
            kids[nk++] = c;
        qsort_r(kids, nk, sizeof *kids, bigger_first, t->n);
        t->n[i].first = nk ? kids[0] : 0;
        for (unsigned k = 0; k < nk; k++)
            t->n[kids[k]].next = k + 1 < nk ? kids[k + 1] : 0;
    }
    free(kids);
    return 0;
}

int ho_write_svg(ho_out *o, const ho_profile *p)
{
    tree t = {.cap = 1024};
    t.n = malloc(t.cap * sizeof *t.n);
    if (!t.n)
        return -ENOMEM;
    t.n[0] = (node){0};
    t.len = 1;
    for (size_t i = 0; i < p->ngroups; i++) {
        const ho_group *g = &p->groups[i];
        unsigned at = 0;
        t.n[0].bytes += g->bytes;
        for (unsigned k = g->nframes; k-- > 0;) {
            at = child(p, &t, at, g->frames[k]);
            if (!at) {
                free(t.n);
                return -ENOMEM;
            }
            t.n[at].bytes += g->bytes;
        }
        if (g->nframes > t.depth)
            t.depth = g->nframes;
    }
    if (sort_children(&t) != 0) {
        free(t.n);
        return -ENOMEM;
    }
    double total = t.n[0].bytes > 0 ? t.n[0].bytes : 1;
    unsigned height = TOP + (t.depth + 1) * ROW + 24;
    ho_printf(o, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
                 "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%u\" "
                 "viewBox=\"0 0 %.0f %u\" data-total-bytes=\"%.0f\">\n"
                 "<style>text { font: 12px monospace; fill: #000; pointer-events: none; }"
                 " .title { font: 16px sans-serif; }</style>\n"
                 "<rect width=\"100%%\" height=\"100%%\" fill=\"#f8f8f4\"/>\n"
                 "<text class=\"title\" x=\"%.0f\" y=\"22\" text-anchor=\"middle\">",
              WIDTH, height, WIDTH, height, t.n[0].bytes, WIDTH / 2);
    if (p->snap->kind == HP_KIND_CPU)
        ho_printf(o, "CPU: %.0f samples", p->total_bytes);
    else
        ho_printf(o, "Live heap: %.0f bytes in %.0f objects", p->total_bytes, p->total_objects);
    ho_printf(o, " (native frames warm, script frames blue)</text>\n"
                 "<g transform=\"translate(10,0)\">\n");
    if (p->ngroups)
        box(o, p, &t, 0, 0, 0, total);
    ho_write(o, "</g>\n</svg>\n", 12);
    free(t.n);
    return 0;
}
