/* Heap profiles, the outputs: the live table grouped by caller module and
 * by stack, as text, JSON, collapsed stacks, an SVG flame graph and pprof.
 * Runs in normal context with the thread marked inside crawl, so what it
 * allocates (plenty: symbols, the tree, the protobuf) is not recorded. */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "sanitizer/heap_output.h"

/* ---- buffered output ------------------------------------------------------------------- */

/* All of s to fd: 0, or -1 when a write fails. */
static int write_fd(int fd, const char *s, size_t n)
{
    while (n) {
        ssize_t k = write(fd, s, n);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return -1;
        s += k, n -= (size_t)k;
    }
    return 0;
}

void ho_init(ho_out *o, int fd)
{
    o->fd = fd, o->n = 0, o->err = 0;
}

void ho_flush(ho_out *o)
{
    if (o->n && !o->err && write_fd(o->fd, o->buf, o->n) != 0)
        o->err = 1;
    o->n = 0;
}

void ho_write(ho_out *o, const char *s, size_t len)
{
    if (o->n + len > sizeof o->buf)
        ho_flush(o);
    if (len > sizeof o->buf) {
        if (!o->err && write_fd(o->fd, s, len) != 0)
            o->err = 1;
        return;
    }
    memcpy(o->buf + o->n, s, len);
    o->n += len;
}

void ho_printf(ho_out *o, const char *fmt, ...)
{
    char tmp[4096];
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (k > 0)
        ho_write(o, tmp, (size_t)k < sizeof tmp ? (size_t)k : sizeof tmp - 1);
}

/* s with JSON's escapes (quotes included) */
static void json_str(ho_out *o, const char *s)
{
    ho_write(o, "\"", 1);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            ho_printf(o, "\\%c", c);
        else if (c < 0x20)
            ho_printf(o, "\\u%04x", c);
        else
            ho_write(o, s, 1);
    }
    ho_write(o, "\"", 1);
}

/* ---- strings and frames -------------------------------------------------------------------- */

/* The length of the valid UTF-8 sequence s starts with, or 0 (RFC 3629:
 * no overlong forms, no surrogates, nothing past U+10FFFF; and not U+FFFE
 * or U+FFFF, which XML does not allow in the SVG) */
static size_t utf8_seq(const unsigned char *s)
{
    if (s[0] == 0xef && s[1] == 0xbf && (s[2] == 0xbe || s[2] == 0xbf))
        return 0;
    unsigned c = s[0];
    if (c < 0x80)
        return 1;
    size_t n = c >= 0xc2 && c <= 0xdf ? 2 : c >= 0xe0 && c <= 0xef ? 3 : c >= 0xf0 && c <= 0xf4 ? 4 : 0;
    unsigned lo = c == 0xe0 ? 0xa0 : c == 0xf0 ? 0x90 : 0x80;
    unsigned hi = c == 0xed ? 0x9f : c == 0xf4 ? 0x8f : 0xbf;
    if (!n || s[1] < lo || s[1] > hi)
        return 0;
    for (size_t i = 2; i < n; i++)
        if ((s[i] & 0xc0) != 0x80)
            return 0;
    return n;
}

/* Interned strings: id 0 is "". Every string is made valid UTF-8 (each
 * byte of an invalid sequence becomes U+FFFD), as the outputs declare or
 * require it: the SVG's encoding="UTF-8", JSON, pprof's string table. */
unsigned ho_intern(ho_profile *p, const char *s)
{
    size_t len = 0, bad = 0;
    for (const unsigned char *c = (const unsigned char *)s; *c;) {
        size_t n = utf8_seq(c);
        bad += !n;
        c += n ? n : 1;
        len += n ? n : 1;
    }
    if (bad) {
        char *fixed = malloc(len + 2 * bad + 1);
        if (!fixed)
            return 0;
        char *w = fixed;
        for (const unsigned char *c = (const unsigned char *)s; *c;) {
            size_t n = utf8_seq(c);
            if (n) {
                memcpy(w, c, n), w += n, c += n;
            } else {
                memcpy(w, "\xef\xbf\xbd", 3), w += 3, c++;
            }
        }
        *w = 0;
        unsigned id = ho_intern(p, fixed);
        free(fixed);
        return id;
    }
    uint64_t h = 1469598103934665603ULL;
    for (const char *c = s; *c; c++)
        h = (h ^ (unsigned char)*c) * 1099511628211ULL;
    if (p->nstr * 2 >= p->strcap) {
        size_t cap = p->strcap ? p->strcap * 2 : 1024;
        unsigned *slots = calloc(cap, sizeof *slots);
        char **strs = realloc(p->strs, cap / 2 * sizeof *strs);
        if (!slots || !strs) {
            free(slots);
            if (strs)
                p->strs = strs;
            return 0;
        }
        p->strs = strs;
        for (size_t i = 0; i < p->strcap; i++)
            if (p->slots[i]) {
                uint64_t g = 1469598103934665603ULL;
                for (const char *c = p->strs[p->slots[i]]; *c; c++)
                    g = (g ^ (unsigned char)*c) * 1099511628211ULL;
                size_t j = g & (cap - 1);
                while (slots[j])
                    j = (j + 1) & (cap - 1);
                slots[j] = p->slots[i];
            }
        free(p->slots);
        p->slots = slots, p->strcap = cap;
        if (!p->nstr) {
            p->strs[0] = strdup("");
            p->nstr = 1;
        }
    }
    if (!*s)
        return 0;
    size_t j = h & (p->strcap - 1);
    for (; p->slots[j]; j = (j + 1) & (p->strcap - 1))
        if (strcmp(p->strs[p->slots[j]], s) == 0)
            return p->slots[j];
    char *copy = strdup(s);
    if (!copy)
        return 0;
    p->strs[p->nstr] = copy;
    p->slots[j] = (unsigned)p->nstr;
    return (unsigned)p->nstr++;
}

const char *ho_str(const ho_profile *p, unsigned id)
{
    return id && id < p->nstr ? p->strs[id] : "";
}

/* "name at file:line" (crawlvm's and most VMs' activation text) split up */
static void split_script(const char *text, char *name, size_t nlen, char *file, size_t flen,
                         int *line)
{
    const char *at = strstr(text, " at ");
    const char *colon = at ? strrchr(at + 4, ':') : NULL;
    char *end = NULL;
    long l = colon ? strtol(colon + 1, &end, 10) : 0;
    if (!at || !colon || end == colon + 1 || *end) {
        size_t k = strlen(text) < nlen ? strlen(text) : nlen - 1;
        memcpy(name, text, k);
        name[k] = '\0';
        file[0] = '\0';
        *line = 0;
        return;
    }
    snprintf(name, nlen, "%.*s", (int)(at - text), text);
    snprintf(file, flen, "%.*s", (int)(colon - (at + 4)), at + 4);
    *line = (int)l;
}

/* The frame for the words at w (a native pc, a JIT method, or an activation
 * triple), through a cache keyed by the words. */
static unsigned frame_of(ho_profile *p, const uintptr_t *w, unsigned *used)
{
    uintptr_t k0 = w[0], k1 = 0, k2 = 0;
    int kind = HO_NATIVE;
    *used = 1;
    if (k0 & CRAWL_DEPOT_VM) {
        k1 = w[1], k2 = w[2], kind = HO_SCRIPT;
        *used = 3;
    } else if (k0 & CRAWL_DEPOT_JIT) {
        kind = HO_JIT;
    }
    uint64_t h = (k0 * 0x9e3779b97f4a7c15ULL) ^ (k1 * 0xc2b2ae3d27d4eb4fULL) ^ k2;
    if (p->nframes * 2 >= p->fcap) {
        size_t cap = p->fcap ? p->fcap * 2 : 1024;
        unsigned *slots = calloc(cap, sizeof *slots);
        ho_frame *frames = realloc(p->frames, (cap / 2 + 1) * sizeof *frames);
        if (!slots || !frames) {
            free(slots);
            if (frames)
                p->frames = frames;
            return 0;
        }
        p->frames = frames;
        for (size_t i = 0; i < p->fcap; i++)
            if (p->fslots[i]) {
                const ho_frame *f = &p->frames[p->fslots[i]];
                uint64_t g = (f->key[0] * 0x9e3779b97f4a7c15ULL) ^
                             (f->key[1] * 0xc2b2ae3d27d4eb4fULL) ^ f->key[2];
                size_t j = g & (cap - 1);
                while (slots[j])
                    j = (j + 1) & (cap - 1);
                slots[j] = p->fslots[i];
            }
        free(p->fslots);
        p->fslots = slots, p->fcap = cap;
        if (!p->nframes)
            p->nframes = 1;              /* frame 0: none */
    }
    size_t j = h & (p->fcap - 1);
    for (; p->fslots[j]; j = (j + 1) & (p->fcap - 1)) {
        const ho_frame *f = &p->frames[p->fslots[j]];
        if (f->key[0] == k0 && f->key[1] == k1 && f->key[2] == k2)
            return p->fslots[j];
    }
    ho_frame f = {.key = {k0, k1, k2}, .kind = kind};
    char text[2200], name[1024], file[1024];
    if (kind == HO_SCRIPT) {
        const crawl_frame_type *t = (const crawl_frame_type *)(k0 & ~CRAWL_DEPOT_TAGS);
        if (t->describe_method)
            t->describe_method((const void *)k1, k2, text, sizeof text);
        else
            snprintf(text, sizeof text, "[%s activation]", t->name ? t->name : "?");
        split_script(text, name, sizeof name, file, sizeof file, &f.line);
        f.name = ho_intern(p, name);
        f.file = ho_intern(p, file);
        f.text = ho_intern(p, text);
    } else if (kind == HO_JIT) {
        snprintf(text, sizeof text, "[JIT method %p]", (void *)(k0 & ~CRAWL_DEPOT_TAGS));
        f.name = f.text = ho_intern(p, text);
    } else {
        crawl_symbol sym;
        char buf[1024];
        f.pc = k0;
        if (crawl_symbolize(k0 ? k0 - 1 : 0, &sym, buf, sizeof buf) == 0) {
            const char *base = sym.module ? strrchr(sym.module, '/') : NULL;
            base = base ? base + 1 : sym.module ? sym.module : "?";
            if (sym.function)
                snprintf(name, sizeof name, "%s", sym.function);
            else
                snprintf(name, sizeof name, "%s+0x%lx", base, (unsigned long)sym.module_offset);
            f.name = ho_intern(p, name);
            f.file = sym.file ? ho_intern(p, sym.file) : 0;
            f.line = sym.line;
            f.module = sym.module ? ho_intern(p, sym.module) : 0;
        } else {
            snprintf(name, sizeof name, "0x%lx", (unsigned long)k0);
            f.name = ho_intern(p, name);
        }
        if (f.file)
            snprintf(text, sizeof text, "%s %s:%d", name, ho_str(p, f.file), f.line);
        else
            snprintf(text, sizeof text, "%s", name);
        f.text = ho_intern(p, text);
    }
    p->frames[p->nframes] = f;
    p->fslots[j] = (unsigned)p->nframes;
    return (unsigned)p->nframes++;
}

/* ---- grouping ------------------------------------------------------------------------------- */

static int by_stack(const void *a, const void *b)
{
    const hp_entry *x = a, *y = b;
    if (x->stack != y->stack)
        return x->stack < y->stack ? -1 : 1;
    if (x->stack)
        return 0;
    return x->caller < y->caller ? -1 : x->caller > y->caller;
}

static int by_bytes(const void *a, const void *b)
{
    const ho_group *x = a, *y = b;
    return x->bytes > y->bytes ? -1 : x->bytes < y->bytes;
}

static int mod_by_bytes(const void *a, const void *b)
{
    const ho_module *x = a, *y = b;
    return x->bytes > y->bytes ? -1 : x->bytes < y->bytes;
}

size_t hp_count_stacks(const hp_snap *s)
{
    if (s->n)
        qsort(s->e, s->n, sizeof *s->e, by_stack);
    size_t k = 0;
    for (size_t i = 0; i < s->n; i++)
        if (i == 0 || by_stack(&s->e[i - 1], &s->e[i]) != 0)
            k++;
    return k;
}

/* Whether an entry counts in the views: when sampling, only samples (an
 * entry recorded before sampling began does not) and mapped regions. */
static int in_view(const hp_snap *s, const hp_entry *e)
{
    return !s->sample_bytes || (e->flags & (HP_SAMPLED | HP_MMAP));
}

/* An entry's weight: 1 object of its size, or for a byte sample the
 * objects and bytes it stands for (size / (1 - e^(-(size + 1)/N))). */
static double weight(const hp_snap *s, const hp_entry *e)
{
    if (!s->sample_bytes || (e->flags & HP_MMAP))
        return 1;
    /* (the countdown counts an allocation's size plus one) */
    return 1 / (1 - exp(-((double)e->size + 1) / (double)s->sample_bytes));
}

int ho_build(ho_profile *p, const hp_snap *s)
{
    memset(p, 0, sizeof *p);
    p->snap = s;
    for (size_t i = 0; i < s->n; i++) {
        p->live_bytes += s->e[i].size;
        p->samples += (s->e[i].flags & HP_SAMPLED) != 0;
        if (s->e[i].flags & HP_MMAP)
            p->mapped_bytes += s->e[i].size, p->mapped_regions++;
    }
    p->live_objects = s->n;
    if (s->n)
        qsort(s->e, s->n, sizeof *s->e, by_stack);
    p->groups = calloc(s->n + 1, sizeof *p->groups);
    if (!p->groups)
        return -ENOMEM;
    for (size_t i = 0; i < s->n;) {
        size_t j = i;
        ho_group g = {0};
        for (; j < s->n && by_stack(&s->e[i], &s->e[j]) == 0; j++) {
            const hp_entry *e = &s->e[j];
            if (!in_view(s, e))
                continue;
            double w = weight(s, e);
            g.objects += w;
            g.bytes += w * (double)e->size;
        }
        const hp_entry *e = &s->e[i];
        i = j;
        if (g.objects == 0)
            continue;
        const uintptr_t *words;
        unsigned n = e->stack ? crawl_depot_get(e->stack, &words) : 0;
        if (!n) {
            g.one = e->caller;
            words = &g.one;
            n = 1;
        }
        g.nframes = 0;
        g.frames = malloc(n * sizeof *g.frames);
        if (!g.frames)
            return -ENOMEM;
        for (unsigned k = 0; k < n;) {
            unsigned used;
            if ((words[k] & CRAWL_DEPOT_VM) && k + 3 > n)
                break;
            g.frames[g.nframes++] = frame_of(p, &words[k], &used);
            k += used;
        }
        g.stack = e->stack;
        p->groups[p->ngroups++] = g;
        p->total_bytes += g.bytes;
        p->total_objects += g.objects;
    }
    if (p->ngroups)
        qsort(p->groups, p->ngroups, sizeof *p->groups, by_bytes);
    if (s->sample_bytes) {               /* the samples stand for the whole heap */
        p->live_bytes = (size_t)(p->total_bytes + 0.5);
        p->live_objects = (size_t)(p->total_objects + 0.5);
    }

    /* by caller module: every entry (weighted when sampled) */
    p->modules = calloc(64, sizeof *p->modules);
    size_t mcap = 64;
    if (!p->modules)
        return -ENOMEM;
    for (size_t i = 0; i < s->n; i++) {
        if (!in_view(s, &s->e[i]))
            continue;
        Dl_info info;
        const char *m = s->e[i].caller && dladdr((void *)s->e[i].caller, &info) &&
                                info.dli_fname && info.dli_fname[0]
                            ? info.dli_fname
                            : "[unknown]";
        unsigned id = ho_intern(p, m);
        size_t k = 0;
        while (k < p->nmodules && p->modules[k].name != id)
            k++;
        if (k == p->nmodules) {
            if (k == mcap) {
                ho_module *more = realloc(p->modules, 2 * mcap * sizeof *more);
                if (!more)
                    return -ENOMEM;
                p->modules = more, mcap *= 2;
            }
            p->modules[p->nmodules++] = (ho_module){.name = id};
        }
        double w = weight(s, &s->e[i]);
        p->modules[k].bytes += w * (double)s->e[i].size;
        p->modules[k].objects += w;
    }
    if (p->nmodules)
        qsort(p->modules, p->nmodules, sizeof *p->modules, mod_by_bytes);
    return 0;
}

void ho_free(ho_profile *p)
{
    for (size_t i = 0; i < p->ngroups; i++)
        free(p->groups[i].frames);
    free(p->groups);
    free(p->modules);
    for (size_t i = 0; i < p->nstr; i++)
        free(p->strs[i]);
    free(p->strs);
    free(p->slots);
    free(p->frames);
    free(p->fslots);
    memset(p, 0, sizeof *p);
}

/* ---- text, JSON, collapsed ------------------------------------------------------------------- */

static void write_frames(ho_out *o, const ho_profile *p, const ho_group *g)
{
    for (unsigned k = 0; k < g->nframes; k++) {
        const ho_frame *f = &p->frames[g->frames[k]];
        if (f->kind == HO_NATIVE)
            ho_printf(o, "    #%u 0x%lx in %s\n", k, (unsigned long)f->pc, ho_str(p, f->text));
        else
            ho_printf(o, "    #%u in %s\n", k, ho_str(p, f->text));
    }
    ho_write(o, "\n", 1);
}

static void write_text(ho_out *o, const ho_profile *p)
{
    const hp_snap *s = p->snap;
    if (s->kind == HP_KIND_CPU) {
        ho_printf(o, "crawl CPU profile (pid %d): %.0f samples, one every %.3f ms of a thread's CPU time\n\n",
                  (int)getpid(), p->total_bytes, (double)s->period_ns / 1e6);
        for (size_t i = 0; i < p->ngroups; i++) {
            const ho_group *g = &p->groups[i];
            ho_printf(o, "%.0f sample(s) in:\n", g->bytes);
            write_frames(o, p, g);
        }
        return;
    }
    ho_printf(o, "crawl heap profile (pid %d): %zu bytes live in %zu objects", (int)getpid(),
              p->live_bytes, p->live_objects);
    if (s->sample_bytes)
        ho_printf(o, " (estimated from %zu samples, one every %lu bytes)", p->samples,
                  s->sample_bytes);
    if (p->mapped_regions)
        ho_printf(o, "; of them %zu bytes in %zu mapped region(s)", p->mapped_bytes,
                  p->mapped_regions);
    if (s->dropped)
        ho_printf(o, "; %lu allocations not recorded", s->dropped);
    ho_printf(o, "\n\nBy caller module:\n%14s %10s  %s\n", "bytes", "objects", "module");
    for (size_t i = 0; i < p->nmodules; i++)
        ho_printf(o, "%14.0f %10.0f  %s\n", p->modules[i].bytes, p->modules[i].objects,
                  ho_str(p, p->modules[i].name));
    ho_printf(o, "\nBy stack:\n");
    for (size_t i = 0; i < p->ngroups; i++) {
        const ho_group *g = &p->groups[i];
        ho_printf(o, "%.0f byte(s) in %.0f object(s) allocated from:\n", g->bytes, g->objects);
        write_frames(o, p, g);
    }
}

static const char *kind_name(int kind)
{
    return kind == HO_SCRIPT ? "script" : kind == HO_JIT ? "jit" : "native";
}

static void write_json(ho_out *o, const ho_profile *p)
{
    const hp_snap *s = p->snap;
    ho_printf(o, "{\"pid\":%d,\"live_bytes\":%zu,\"live_objects\":%zu,\"sample_bytes\":%lu,"
                 "\"dropped\":%lu,\"mapped_bytes\":%zu,\"mapped_regions\":%zu,\"modules\":[",
              (int)getpid(), p->live_bytes, p->live_objects, s->sample_bytes, s->dropped,
              p->mapped_bytes, p->mapped_regions);
    for (size_t i = 0; i < p->nmodules; i++) {
        ho_printf(o, "%s{\"module\":", i ? "," : "");
        json_str(o, ho_str(p, p->modules[i].name));
        ho_printf(o, ",\"bytes\":%.0f,\"objects\":%.0f}", p->modules[i].bytes,
                  p->modules[i].objects);
    }
    ho_write(o, "],\"stacks\":[", 12);
    for (size_t i = 0; i < p->ngroups; i++) {
        const ho_group *g = &p->groups[i];
        ho_printf(o, "%s{\"bytes\":%.0f,\"objects\":%.0f,\"frames\":[", i ? "," : "", g->bytes,
                  g->objects);
        for (unsigned k = 0; k < g->nframes; k++) {
            const ho_frame *f = &p->frames[g->frames[k]];
            ho_printf(o, "%s{\"kind\":\"%s\",\"function\":", k ? "," : "", kind_name(f->kind));
            json_str(o, ho_str(p, f->name));
            if (f->kind == HO_NATIVE)
                ho_printf(o, ",\"pc\":\"0x%lx\"", (unsigned long)f->pc);
            if (f->file) {
                ho_write(o, ",\"file\":", 8);
                json_str(o, ho_str(p, f->file));
                ho_printf(o, ",\"line\":%d", f->line);
            }
            ho_write(o, "}", 1);
        }
        ho_write(o, "]}", 2);
    }
    ho_write(o, "]}\n", 3);
}

/* A frame's name in collapsed stacks and the flame graph: the function
 * (native), the activation's text (script); no ';' (the separator). */
static void folded_name(ho_out *o, const ho_profile *p, const ho_frame *f)
{
    const char *s = ho_str(p, f->kind == HO_NATIVE ? f->name : f->text);
    for (; *s; s++)
        ho_write(o, *s == ';' ? ":" : *s == '\n' ? " " : s, 1);
}

typedef struct folded_line {
    char *text;
    double value;
} folded_line;

static int by_text(const void *a, const void *b)
{
    return strcmp(((const folded_line *)a)->text, ((const folded_line *)b)->text);
}

/* One line per distinct text (stacks that differ only where the names do
 * not show, a script position within one line say, are summed). */
static void write_folded(ho_out *o, const ho_profile *p)
{
    folded_line *lines = calloc(p->ngroups + 1, sizeof *lines);
    ho_out *line = malloc(sizeof *line);
    if (!lines || !line) {
        free(lines), free(line);
        o->err = 1;
        return;
    }
    size_t n = 0;
    for (size_t i = 0; i < p->ngroups; i++) {
        const ho_group *g = &p->groups[i];
        ho_init(line, -1);
        for (unsigned k = g->nframes; k-- > 0;) {
            folded_name(line, p, &p->frames[g->frames[k]]);
            if (k)
                ho_write(line, ";", 1);
        }
        lines[n].text = strndup(line->buf, line->n < sizeof line->buf ? line->n : sizeof line->buf - 1);
        lines[n].value = g->bytes;
        if (lines[n].text)
            n++;
    }
    if (n)
        qsort(lines, n, sizeof *lines, by_text);
    for (size_t i = 0; i < n;) {
        size_t j = i + 1;
        double v = lines[i].value;
        for (; j < n && strcmp(lines[j].text, lines[i].text) == 0; j++)
            v += lines[j].value;
        ho_printf(o, "%s %.0f\n", lines[i].text, v);
        i = j;
    }
    for (size_t i = 0; i < n; i++)
        free(lines[i].text);
    free(lines), free(line);
}

/* How deep the calling thread is in writes of its own */
static __thread int own_depth __attribute__((tls_model("initial-exec")));
static __thread int own_cancel __attribute__((tls_model("initial-exec")));

/* (not cancelled half way: a temporary file would stay, and the count of
 * writes under way) */
static void write_enter(void)
{
    if (own_depth++ == 0)
        pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &own_cancel);
}

static void write_leave(void)
{
    if (--own_depth == 0)
        pthread_setcancelstate(own_cancel, NULL);
}

int ho_write_snap(int fd, crawl_heap_format format, hp_snap *s)
{
    ho_profile p;
    write_enter();
    int rc = ho_build(&p, s);
    ho_out *o = rc ? NULL : malloc(sizeof *o);
    if (!rc && !o)
        rc = -ENOMEM;
    if (!rc) {
        ho_init(o, fd);
        switch (format) {
        case CRAWL_HEAP_TEXT: write_text(o, &p); break;
        case CRAWL_HEAP_JSON: write_json(o, &p); break;
        case CRAWL_HEAP_FOLDED: write_folded(o, &p); break;
        case CRAWL_HEAP_SVG: rc = ho_write_svg(o, &p); break;
        case CRAWL_HEAP_PPROF: rc = ho_write_pprof(o, &p); break;
        }
        ho_flush(o);
        if (!rc && o->err)
            rc = -EIO;
        free(o);
    }
    ho_free(&p);
    write_leave();
    return rc;
}

int crawl_heap_profile_write_fd(int fd, crawl_heap_format format)
{
    if (fd < 0 || (unsigned)format > CRAWL_HEAP_PPROF)
        return -EINVAL;
    int was = hp_inside_enter();
    hp_snap s;
    int rc = hp_snapshot(&s, 0);
    if (!rc && (rc = hp_mmap_append(&s)) != 0)
        hp_snapshot_free(&s);
    if (!rc) {
        rc = ho_write_snap(fd, format, &s);
        hp_snapshot_free(&s);
    }
    hp_inside_leave(was);
    return rc;
}

static int ends_with(const char *s, const char *tail)
{
    size_t a = strlen(s), b = strlen(tail);
    return a >= b && strcmp(s + a - b, tail) == 0;
}

crawl_heap_format crawl_heap_format_for(const char *path)
{
    if (!path)
        return CRAWL_HEAP_TEXT;
    if (ends_with(path, ".pb.gz") || ends_with(path, ".pprof"))
        return CRAWL_HEAP_PPROF;
    if (ends_with(path, ".json"))
        return CRAWL_HEAP_JSON;
    if (ends_with(path, ".folded") || ends_with(path, ".collapsed"))
        return CRAWL_HEAP_FOLDED;
    if (ends_with(path, ".svg"))
        return CRAWL_HEAP_SVG;
    return CRAWL_HEAP_TEXT;
}

/* Into path as open(2) with flags gives it */
static int write_opened(const char *path, int (*to_fd)(int fd, crawl_heap_format format),
                        int flags)
{
    int fd = open(path, flags | O_CLOEXEC, 0644);
    if (fd < 0)
        return -errno;
    int rc = to_fd(fd, crawl_heap_format_for(path));
    if (close(fd) != 0 && !rc)
        rc = -errno;
    return rc;
}

/* Into path in place (a device, a FIFO, or where no file can be made
 * beside it). */
static int write_in_place(const char *path, int (*to_fd)(int fd, crawl_heap_format format))
{
    return write_opened(path, to_fd, O_WRONLY | O_CREAT | O_TRUNC);
}

/* Files being written beside their path now (a heap_profile_signal
 * helper's, as the program exits), and whether one is the calling
 * thread's */
static int writes_in_flight;
static __thread int own_in_flight __attribute__((tls_model("initial-exec")));   /* (nested: a count) */

int ho_writes_in_flight(void)
{
    return __atomic_load_n(&writes_in_flight, __ATOMIC_SEQ_CST) - own_in_flight;
}

int ho_in_own_write(void) { return own_depth > 0; }

/* The temporary files being written now, for the exit hook to remove
 * those whose writers it ends. A slot's path is written while it is
 * CLAIMED; the remover takes a READY slot as REMOVING before it reads the
 * path, and its writer waits for it to be READY again before it frees it
 * (a path read while its writer freed the slot and another claimed it
 * could be half of each: another file's name). A write that finds every
 * slot taken goes on unlisted. */
enum { TMP_FREE, TMP_CLAIMED, TMP_READY, TMP_REMOVING, TMP_SLOTS = 8 };
static struct {
    int state;
    char path[PATH_MAX + 64];
} tmps[TMP_SLOTS];

/* The slot of the calling thread's write plus 1, or 0 (kept by a fork
 * child). (Zero-initialized: crawl's TLS stays all .tbss.) */
static __thread int own_slot __attribute__((tls_model("initial-exec")));

static int tmp_list(const char *path)
{
    for (int i = 0; i < TMP_SLOTS; i++) {
        int free_ = TMP_FREE;
        if (__atomic_compare_exchange_n(&tmps[i].state, &free_, TMP_CLAIMED, 0, __ATOMIC_ACQUIRE,
                                        __ATOMIC_RELAXED)) {
            snprintf(tmps[i].path, sizeof tmps[i].path, "%s", path);
            __atomic_store_n(&tmps[i].state, TMP_READY, __ATOMIC_SEQ_CST);
            own_slot = i + 1;
            return i;
        }
    }
    return -1;
}

static void tmp_unlist(int i)
{
    if (i < 0)
        return;
    own_slot = 0;
    for (;;) {
        int was = TMP_READY;
        if (__atomic_compare_exchange_n(&tmps[i].state, &was, TMP_FREE, 0, __ATOMIC_RELEASE,
                                        __ATOMIC_RELAXED) ||
            was != TMP_REMOVING)
            return;
        sched_yield();                   /* (the remover holds it for one unlink) */
    }
}

void ho_remove_temporaries(void)
{
    for (int i = 0; i < TMP_SLOTS; i++) {
        int ready = TMP_READY;
        if (__atomic_compare_exchange_n(&tmps[i].state, &ready, TMP_REMOVING, 0, __ATOMIC_SEQ_CST,
                                        __ATOMIC_RELAXED)) {
            unlink(tmps[i].path);
            __atomic_store_n(&tmps[i].state, TMP_READY, __ATOMIC_RELEASE);
        }
    }
}

/* Set by the exit hook (ho_closing): the thread whose writes may still
 * make a temporary file; any other's is refused from then on (a thread
 * writing in a loop started one after the hook had removed the others',
 * and the process ended it half way) */
static long closing_tid;

void ho_closing(void) { __atomic_store_n(&closing_tid, (long)gettid(), __ATOMIC_SEQ_CST); }

/* Set around the writes the exit hook waits for (heap_profile_signal's
 * helper: a signal taken before the hook ran is written whole) */
static __thread int awaited __attribute__((tls_model("initial-exec")));

void ho_awaited(int on) { awaited = on; }

static int refused_now(void)
{
    long t = __atomic_load_n(&closing_tid, __ATOMIC_SEQ_CST);
    return t != 0 && t != (long)gettid() && !awaited;
}

/* fork child: the writers stayed in the parent (this thread's own, if it
 * forked inside one, goes on here) */
void ho_fork_child(void)
{
    __atomic_store_n(&writes_in_flight, own_in_flight, __ATOMIC_RELEASE);
    __atomic_store_n(&closing_tid, 0, __ATOMIC_RELEASE);
    for (int i = 0; i < TMP_SLOTS; i++)      /* (this thread's own write goes on here) */
        if (i + 1 != own_slot)
            __atomic_store_n(&tmps[i].state, TMP_FREE, __ATOMIC_RELEASE);
}

/* A regular file is written whole beside it, then renamed over it: a
 * reader never sees it half written, and processes that write one path
 * at once (a make -j under the preload) leave one whole profile, not one
 * profile followed by the tail of another. A symbolic link stays: its
 * target is replaced; one that leads nowhere (/dev/stdout once the
 * program closed descriptor 1) is opened as named, never renamed over
 * (the system's /dev/stdout became a regular file). */
static int write_path(const char *path, int (*to_fd)(int fd, crawl_heap_format format));

int ho_write_path(const char *path, int (*to_fd)(int fd, crawl_heap_format format))
{
    if (!path || !*path)
        return -EINVAL;
    write_enter();
    int rc = write_path(path, to_fd);
    write_leave();
    return rc;
}

static int write_path(const char *path, int (*to_fd)(int fd, crawl_heap_format format))
{
    /* stdout or stderr by any name: the descriptor itself, while the
     * program has it (through the link, the file behind it was renamed
     * over: the program's own output, or a module file libdw had opened
     * on a closed descriptor) */
    int std = san_names_standard(path);
    if (std) {
        int fd = san_standard_fd(std);
        return fd < 0 ? -EBADF : to_fd(fd, crawl_heap_format_for(path));
    }
    /* another descriptor's link (/dev/fd/N, /proc/.../fd/N): written as
     * opened, never renamed over or cut short */
    if (strncmp(path, "/proc/", 6) == 0 || strncmp(path, "/dev/fd/", 8) == 0)
        return write_opened(path, to_fd, O_WRONLY | O_APPEND);
    struct stat st;
    if (stat(path, &st) == 0 && !S_ISREG(st.st_mode))
        return write_in_place(path, to_fd);
    char target[PATH_MAX];               /* (not malloc'ed: it would be in the profile) */
    const char *dest = path;
    if (lstat(path, &st) == 0 && S_ISLNK(st.st_mode)) {
        if (!realpath(path, target))
            return write_in_place(path, to_fd);
        dest = target;
    }
    char tmp[PATH_MAX + 64];
    int n = snprintf(tmp, sizeof tmp, "%s.tmp.%d.%ld", dest, (int)getpid(), (long)gettid());
    if (n <= 0 || (size_t)n >= sizeof tmp)
        return write_in_place(path, to_fd);
    /* Counted and listed before the file is made, then the exit hook's
     * flag read (seq_cst, against its store and then its read of the
     * count): a write that does not see the hook is one the hook waits
     * for, and one that sees it makes no file (a writer paused between
     * making the file and listing it left it) */
    __atomic_add_fetch(&writes_in_flight, 1, __ATOMIC_SEQ_CST);
    own_in_flight++;
    int listed = tmp_list(tmp);
    int rc = -ECANCELED, fd = -1;
    if (!refused_now()) {
        fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
        rc = fd < 0 ? -EEXIST : to_fd(fd, crawl_heap_format_for(path));
    }
    if (fd >= 0) {
        if (close(fd) != 0 && !rc)
            rc = -errno;
        if (!rc && rename(tmp, dest) != 0)
            rc = errno == ENOENT && refused_now() ? -ECANCELED : -errno;   /* (the hook took it) */
        if (rc)
            unlink(tmp);
    }
    tmp_unlist(listed);
    own_in_flight--;
    __atomic_sub_fetch(&writes_in_flight, 1, __ATOMIC_SEQ_CST);
    if (fd < 0 && rc == -EEXIST)
        return write_in_place(path, to_fd);   /* (no file can be made beside it) */
    return rc;
}

int crawl_heap_profile_write(const char *path)
{
    return ho_write_path(path, crawl_heap_profile_write_fd);
}
