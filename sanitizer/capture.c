/* Mixed traces: capture the current stack into the depot, and print one. */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "sanitizer/internal.h"

typedef struct capture {
    uintptr_t words[CRAWL_DEPOT_MAX_FRAMES];
    unsigned n;                          /* words used */
    unsigned frames, max;                /* frames stored, and the most wanted */
} capture;

/* Frames that carry no script location (transition, entry) are left out by
 * CRAWL_WALK_FUNCTIONS_ONLY; VM activations and function Frames become
 * (tag | type, method, position) triples (a function Frame's position from
 * its type's position hook, else 0), JIT frames their method. A trace
 * holds at most max frames and CRAWL_DEPOT_MAX_FRAMES words. */
static crawl_action add_frame(const crawl_cf *cf, void *ctx)
{
    capture *c = ctx;
    switch (crawl_cf_kind(cf)) {
    case CRAWL_CF_NATIVE:
        c->words[c->n++] = crawl_cf_ip(cf) & ~CRAWL_DEPOT_TAGS;
        break;
    case CRAWL_CF_JIT:
        c->words[c->n++] = CRAWL_DEPOT_JIT | (uintptr_t)crawl_cf_method(cf);
        break;
    case CRAWL_CF_VM:
    case CRAWL_CF_FRAME:
        if (c->n + 3 > CRAWL_DEPOT_MAX_FRAMES)
            return CRAWL_ABORT;
        c->words[c->n++] = CRAWL_DEPOT_VM | (uintptr_t)crawl_cf_frame(cf)->type;
        c->words[c->n++] = (uintptr_t)crawl_cf_method(cf);
        /* the VM position: activations', and function Frames' (position hook) */
        c->words[c->n++] = crawl_cf_kind(cf) == CRAWL_CF_VM || crawl_cf_frame(cf)->type->position
                               ? crawl_cf_ip(cf)
                               : 0;
        break;
    }
    return ++c->frames < c->max && c->n < CRAWL_DEPOT_MAX_FRAMES ? CRAWL_CONTINUE : CRAWL_ABORT;
}

/* SAN_CAPTURE_COMPILE: the modules of a trace's native pcs compiled (the
 * walk may have found their rules without: in the CFI cache, filled by
 * sparse captures pc by pc, or in the walk memo). */
static void compile_modules(const uintptr_t *w, unsigned n)
{
    uintptr_t pcs[CRAWL_DEPOT_MAX_FRAMES];
    unsigned k = 0;
    for (unsigned i = 0; i < n; i++) {
        if (w[i] & CRAWL_DEPOT_VM)
            i += 2;                      /* type, method, position */
        else if (!(w[i] & CRAWL_DEPOT_JIT))
            pcs[k++] = w[i];
    }
    sw_modules_compile_at(pcs, k);
}

static unsigned walk_words(const crawl_regs *from, unsigned max, unsigned flags,
                           uintptr_t *out, unsigned cap, sw_memo_tag *t);

/* The pcs a native walk of max frames asks for, into cap words */
static unsigned walk_want(unsigned max, unsigned cap)
{
    return max < 1 ? 1 : max > cap ? cap : max;
}

/* san_capture_words; with t (the thread has no Frames), the walk memo that
 * holds these words and the depot id kept with it. */
static unsigned capture_words(const crawl_regs *from, unsigned max, unsigned flags,
                              uintptr_t *out, unsigned cap, sw_memo_tag *t)
{
    unsigned n = walk_words(from, max, flags, out, cap, t);
    if (flags & SAN_CAPTURE_COMPILE)
        compile_modules(out, n);
    return n;
}

static unsigned walk_words(const crawl_regs *from, unsigned max, unsigned flags,
                           uintptr_t *out, unsigned cap, sw_memo_tag *t)
{
    const crawl__thread *th = crawl__self();
    unsigned walk = (flags & (CRAWL_WALK_FAST | CRAWL_WALK_SIGNAL_SAFE)) |
                    (flags & SAN_CAPTURE_COMPILE ? 0 : SW_WALK_SPARSE_CFI);
    if (t)
        t->memo = NULL, t->tag = 0;
    if (th->attached && !th->top) {
        /* no Frames on this thread: native pcs only, without a callback per
         * frame (the same words: a native frame is its pc). Only the first
         * may be anything (the walk reports where it starts); every other
         * is code in a module, below any tag bit. */
        unsigned want = walk_want(max, cap);
        unsigned n = t ? sw_backtrace_tagged(from, out, want, walk, t)
                       : sw_backtrace(from, out, want, walk);
        if (n)
            out[0] &= ~CRAWL_DEPOT_TAGS;
        return n;
    }
    capture c;
    c.n = c.frames = 0;
    c.max = max < 1 ? 1 : max > CRAWL_DEPOT_MAX_FRAMES ? CRAWL_DEPOT_MAX_FRAMES : max;
    sw_walk(from, 0, 1, add_frame, &c, walk | CRAWL_WALK_FUNCTIONS_ONLY);
    unsigned n = c.n < cap ? c.n : cap;
    memcpy(out, c.words, n * sizeof *out);
    return n;
}

unsigned san_capture_words(const crawl_regs *from, unsigned max, unsigned flags,
                           uintptr_t *out, unsigned cap)
{
    return capture_words(from, max, flags, out, cap, NULL);
}

uint32_t san_capture_uc(const ucontext_t *uc, unsigned max, unsigned flags)
{
    capture c;
    c.n = c.frames = 0;
    c.max = max < 1 ? 1 : max > CRAWL_DEPOT_MAX_FRAMES ? CRAWL_DEPOT_MAX_FRAMES : max;
    crawl_regs r;
    sw_regs_from_ucontext(&r, uc);
    sw_walk(&r, 1, 0, add_frame, &c,
            (flags & (CRAWL_WALK_FAST | CRAWL_WALK_SIGNAL_SAFE)) | CRAWL_WALK_FUNCTIONS_ONLY);
    return c.n ? crawl_depot_put(c.words, c.n) : 0;
}

/* A stack the walk memo replayed whole has the depot id its first capture
 * got, kept with the memo: no depot lookup then. */
__attribute__((noinline)) static uint32_t capture_walked(const crawl_regs *from, unsigned max,
                                                         unsigned flags)
{
    uintptr_t words[CRAWL_DEPOT_MAX_FRAMES];
    sw_memo_tag t;
    unsigned n = capture_words(from, max, flags, words, CRAWL_DEPOT_MAX_FRAMES, &t);
    if (t.tag)
        return t.tag;
    uint32_t id = n ? crawl_depot_put(words, n) : 0;
    if (id)
        sw_memo_set_tag(&t, id);
    return id;
}

/* First a walk the memo holds whole (the walk capture_walked would ask
 * for): its id, without the walk (compiling reads the words); then
 * capture_walked, whose frame (the words) only a walk needs. */
uint32_t san_capture_at(const crawl_regs *from, unsigned max, unsigned flags)
{
    if (!(flags & SAN_CAPTURE_COMPILE)) {
        uint32_t id = sw_memo_probe(from, walk_want(max, CRAWL_DEPOT_MAX_FRAMES), flags);
        if (id)
            return id;
    }
    return capture_walked(from, max, flags);
}

uint32_t crawl_depot_capture(unsigned max_frames, unsigned flags)
{
    if (max_frames == 0)
        return 0;                        /* no frame asked for: nothing stored */
    crawl_regs here;
    crawl_capture_regs(&here);
    uint32_t id = san_capture_at(&here, max_frames, flags);
    CRAWL__NO_TAIL(id);
    return id;
}

uint32_t crawl_depot_capture_from(const crawl_regs *regs, unsigned max_frames, unsigned flags)
{
    return regs && max_frames ? san_capture_at(regs, max_frames, flags) : 0;
}

/* An activation stored in the depot, through its type's describe_method.
 * The depot takes any words: a type crawl_frame_push never saw is not
 * followed (crawl_depot_print of a made-up activation faulted). */
static int describe_activation(const uintptr_t *w, char *buf, size_t len)
{
    const crawl_frame_type *t = (const crawl_frame_type *)(w[0] & ~CRAWL_DEPOT_TAGS);
    if (!crawl__type_known(t))
        return snprintf(buf, len, "[activation of unknown type %p, method %p]", (const void *)t,
                        (const void *)w[1]);
    if (t->describe_method)
        return t->describe_method((const void *)w[1], w[2], buf, len);
    return snprintf(buf, len, "[%s activation, method %p]", t->name ? t->name : "?",
                    (const void *)w[1]);
}

size_t san_format_trace(const uintptr_t *w, unsigned n, char *buf, size_t len, int *cut)
{
    size_t used = 0;
    unsigned depth = 0;
    char text[700];
    *cut = 0;
    if (len)
        buf[0] = '\0';
    for (unsigned i = 0; i < n; depth++) {
        int k;
        if (w[i] & CRAWL_DEPOT_VM) {
            if (i + 3 > n)
                break;                   /* a truncated triple: nothing to say */
            describe_activation(&w[i], text, sizeof text);
            k = snprintf(buf + used, len - used, "    #%u in %s\n", depth, text);
            i += 3;
        } else if (w[i] & CRAWL_DEPOT_JIT) {
            k = snprintf(buf + used, len - used, "    #%u in JIT code, method %p\n", depth,
                         (const void *)(w[i] & ~CRAWL_DEPOT_TAGS));
            i++;
        } else {
            sw_describe_pc(w[i], 0, text, sizeof text);
            k = snprintf(buf + used, len - used, "    #%u 0x%lx in %s\n", depth,
                         (unsigned long)w[i], text);
            i++;
        }
        if (k < 0 || (size_t)k >= len - used) {
            buf[used] = '\0';           /* whole lines only */
            *cut = 1;
            break;
        }
        used += (size_t)k;
    }
    return used;
}

void crawl_depot_print(uint32_t id, int fd)
{
    const uintptr_t *w;
    unsigned n = crawl_depot_get(id, &w);
    char buf[16384];
    int cut;
    size_t used = n ? san_format_trace(w, n, buf, sizeof buf, &cut) : 0;
    crawl__write_all(fd, buf, used);
}
