/* crawl-boehm: Boehm GC marks what attached threads' Frames report.
 *
 * Boehm scans thread stacks and static data itself, conservatively; it
 * does not scan memory it does not know (a VM value stack in mmap'ed
 * memory). The push-other-roots callback runs inside every collection,
 * with the allocation lock held and the world stopped, and marks from each
 * reported slot. Slots close together are scanned as one range (the words
 * between are scanned conservatively, as Boehm scans stacks), and ranges
 * go through GC_push_all_eager: GC_push_all would take one mark-stack entry
 * per range and abort the process when thousands of activations overflow
 * it ("Unexpected mark stack overflow").
 *
 * The same callback records the roots when a diagnostic asks (a census,
 * why-alive) and checks each one with gc_verify=1. With the world stopped
 * it can neither lock nor malloc: records go to mmap'ed memory, problems
 * wait in a fixed list until gc_flush_pending reports them. */
#include <errno.h>
#include <gc/gc_mark.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "gcroots/gc_internal.h"

static GC_push_other_roots_proc previous;
static int installed;
static unsigned long last_count;

typedef struct pending {
    void **lo, **hi;                    /* [lo, hi): slots not yet pushed */
    unsigned long n;
} pending;

#define COALESCE_GAP 4                  /* words between slots still scanned as one range */

static void push_slot(pending *p, void **slot)
{
    p->n++;
    if (slot >= p->hi && slot <= p->hi + COALESCE_GAP && p->lo) {
        p->hi = slot + 1;
        return;
    }
    if (p->lo)
        GC_push_all_eager(p->lo, p->hi);
    p->lo = slot;
    p->hi = slot + 1;
}

static void push_root(void **slot, unsigned root_flags, const crawl_cf *cf, void *ctx)
{
    (void)root_flags;                   /* Boehm neither moves objects nor needs interior hints */
    (void)cf;
    push_slot(ctx, slot);
}

/* ---- recording and checking roots (world stopped) ------------------------------- */

static int (*_Atomic immediate_fn)(uintptr_t);
static int capture_requested;           /* under Boehm's lock */
static gc_root_rec *recs;               /* mmap'ed; capture_cap entries */
static size_t recs_n, recs_cap;
static uintptr_t *seen;                 /* open-addressing set of slots (double roots) */
static size_t seen_cap;

#define MAX_PENDING 256
static gc_root_rec *pend;               /* problems waiting for a report (mmap'ed) */
static size_t pend_n;
static unsigned long pend_dropped;
volatile int gc_pending;

static void *map(size_t bytes)
{
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return p == MAP_FAILED ? NULL : p;
}

static size_t seen_n;                   /* slots in the set */

static size_t seen_slot(const uintptr_t *set, size_t cap, uintptr_t k)
{
    size_t i = (size_t)((k >> 3) * 0x9e3779b97f4a7c15ull >> 11) & (cap - 1);
    while (set[i] != 0 && set[i] != k)
        i = (i + 1) & (cap - 1);
    return i;
}

/* Double the set (mmap: no malloc with the world stopped). */
static int seen_grow(void)
{
    size_t cap = seen_cap ? seen_cap * 2 : 4096;
    uintptr_t *set = map(cap * sizeof *set);
    if (!set)
        return -1;
    for (size_t i = 0; i < seen_cap; i++)
        if (seen[i])
            set[seen_slot(set, cap, seen[i])] = seen[i];
    if (seen)
        munmap(seen, seen_cap * sizeof *seen);
    seen = set;
    seen_cap = cap;
    return 0;
}

/* 1 if slot was reported before in this collection. The set grows with
 * the roots (a collection may see many more than the last one did). */
static int seen_before(void **slot)
{
    if ((seen_n + 1) * 2 > seen_cap && seen_grow() != 0)
        return 0;                        /* out of memory: no double-root check */
    uintptr_t k = (uintptr_t)slot;
    size_t i = seen_slot(seen, seen_cap, k);
    if (seen[i] == k)
        return 1;
    seen[i] = k;
    seen_n++;
    return 0;
}

static int check_root(gc_root_rec *r)
{
    uintptr_t v = (uintptr_t)r->value;
    int (*imm)(uintptr_t) = atomic_load_explicit(&immediate_fn, memory_order_relaxed);
    if (v == 0 || (imm && imm(v)))
        return GC_PROBLEM_NONE;
    void *base = GC_base(r->value);
    if (!base)
        return GC_PROBLEM_NOT_OBJECT;
    r->object = (uintptr_t)base;
    r->object_size = GC_size(base);
    gc_obj e;
    /* the table's lock may be held by a thread the collector stopped */
    int known = gc_obj_find_nowait((uintptr_t)base, &e) == 1;
    if (known)
        r->object_size = e.size;         /* as requested, not as Boehm rounded it */
    if (known && e.state != GC_OBJ_LIVE)
        return GC_PROBLEM_COLLECTED;
    if ((uintptr_t)base != v && !(r->flags & CRAWL_ROOT_INTERIOR))
        return GC_PROBLEM_INTERIOR;
    return GC_PROBLEM_NONE;
}

typedef struct recorder {
    pending push;
    int verify;
    int me;                             /* the collecting thread's number */
    const void *last_frame;             /* home_pc is found once per Frame */
    uintptr_t last_home;
} recorder;

/* pc follows a call instruction: e8 rel32; ff 15 disp32; ff d0-d7 (call
 * reg), with a REX prefix too; ff 50-57 disp8; ff 90-97 disp32. */
static int after_call(uintptr_t pc)
{
    const unsigned char *p = (const unsigned char *)pc;
    return p[-5] == 0xe8 || (p[-6] == 0xff && p[-5] == 0x15) ||
           (p[-2] == 0xff && (p[-1] & 0xf8) == 0xd0) ||
           (p[-3] == 0x41 && p[-2] == 0xff && (p[-1] & 0xf8) == 0xd0) ||
           (p[-3] == 0xff && (p[-2] & 0xf8) == 0x50) || (p[-6] == 0xff && (p[-5] & 0xf8) == 0x90);
}

/* Another thread's Frame, with that thread stopped: it cannot be walked
 * from here, but the native frame holding the Frame is normally in a call,
 * and that call's return address lies a little below the Frame. The first
 * word below it that points just after a call instruction in code is
 * taken (a heuristic: the census says so). */
GC_SCANS static uintptr_t home_by_scan(const void *frame)
{
    const uintptr_t *w = (const uintptr_t *)frame;
    for (int k = 1; k <= 512; k++) {
        uintptr_t v = w[-k];
        if (v > 4096 && crawl_is_code(v) == 1 && crawl_is_code(v - 6) == 1 && after_call(v))
            return v;
    }
    return 0;
}

static void record_root(void **slot, unsigned root_flags, const crawl_cf *cf, void *ctx)
{
    recorder *rc = ctx;
    push_slot(&rc->push, slot);
    gc_root_rec r = {.slot = slot, .value = *slot, .flags = root_flags,
                     .thread = crawl_cf_thread(cf), .index = crawl_cf_depth(cf)};
    const crawl_frame *f = crawl_cf_frame(cf);
    r.frame = f;
    r.type_name = f && f->type && f->type->name ? f->type->name : "?";
    if (f && (int)r.thread != rc->me) {
        if (f != rc->last_frame) {
            rc->last_frame = f;
            rc->last_home = home_by_scan(f);
        }
        r.home_pc = rc->last_home;
    }
    if (f && f->type && f->type->describe)
        f->type->describe(f, r.text, sizeof r.text);
    r.problem = seen_before(slot) ? GC_PROBLEM_DOUBLE : check_root(&r);
    if (capture_requested && recs_n < recs_cap)
        recs[recs_n++] = r;
    if (rc->verify && r.problem != GC_PROBLEM_NONE) {
        if (pend && pend_n < MAX_PENDING)
            pend[pend_n++] = r;
        else
            pend_dropped++;
        gc_pending = 1;
        atomic_store_explicit(&gc_active, 1, memory_order_relaxed);
    }
}

/* Room for every root of this collection: the last one's count, doubled. */
static void prepare_recording(void)
{
    size_t want = last_count * 2 + 1024;
    if (capture_requested && want > recs_cap) {
        if (recs)
            munmap(recs, recs_cap * sizeof *recs);
        recs = map(want * sizeof *recs);
        recs_cap = recs ? want : 0;
    }
    recs_n = 0;
    if (seen)
        memset(seen, 0, seen_cap * sizeof *seen);
    seen_n = 0;
    if (!pend)
        pend = map(MAX_PENDING * sizeof *pend);
}

static void GC_CALLBACK push_crawl_roots(void)
{
    if (previous)
        previous();
    crawl_walk_status st;
    unsigned long n;
    if (capture_requested || gc_opt.verify) {
        prepare_recording();
        recorder rc = {.verify = gc_opt.verify || capture_requested == 2,
                       .me = crawl_thread_number()};
        st = crawl_enum_roots_all_threads(record_root, &rc, 0);
        if (rc.push.lo)
            GC_push_all_eager(rc.push.lo, rc.push.hi);
        n = rc.push.n;
    } else {
        pending p = {0};
        st = crawl_enum_roots_all_threads(push_root, &p, 0);
        if (p.lo)
            GC_push_all_eager(p.lo, p.hi);
        n = p.n;
    }
    last_count = n;
    /* A corrupt Frame chain hides the roots of every older Frame: collecting
     * now would free live objects without a word. Stop instead. */
    if (st == CRAWL_WALK_FAILED) {
        static const char msg[] =
            "crawl-boehm: fatal: a thread's Frame chain is corrupt; the roots its older Frames "
            "hold cannot be reported, and collecting now would free live objects\n";
        ssize_t w = write(STDERR_FILENO, msg, sizeof msg - 1);
        (void)w;
        abort();
    }
}

void crawl_boehm_install(void)
{
    gc_opts_refresh();                  /* gc_verify applies from the first collection */
    if (installed)
        return;
    previous = GC_get_push_other_roots();
    GC_set_push_other_roots(push_crawl_roots);
    installed = 1;
}

unsigned long crawl_boehm_last_root_count(void)
{
    return last_count;
}

void crawl_gc_set_immediate_fn(int (*fn)(uintptr_t value))
{
    atomic_store(&immediate_fn, fn);
}

/* ---- after the collection ---------------------------------------------------------- */

static pthread_mutex_t capture_lock = PTHREAD_MUTEX_INITIALIZER;

static void *GC_CALLBACK request_capture(void *mode)
{
    capture_requested = (int)(intptr_t)mode;
    return NULL;
}

static void *GC_CALLBACK take_records(void *arg)
{
    gc_roots *t = arg;
    t->r = recs;
    t->n = recs_n;
    t->cap = recs_cap;
    recs = NULL;                        /* the caller owns them now */
    recs_cap = recs_n = 0;
    capture_requested = 0;
    return NULL;
}

void gc_roots_capture(gc_roots *out, int verify)
{
    crawl_boehm_install();
    gc_opts_refresh();
    pthread_mutex_lock(&capture_lock);
    GC_call_with_alloc_lock(request_capture, (void *)(intptr_t)(verify ? 2 : 1));
    gc_collect();
    *out = (gc_roots){0};
    GC_call_with_alloc_lock(take_records, out);
    pthread_mutex_unlock(&capture_lock);
}

void gc_roots_release(gc_roots *t)
{
    if (t->r)
        munmap(t->r, t->cap * sizeof *t->r);
    *t = (gc_roots){0};
}

typedef struct flushed {
    gc_root_rec *copy;
    size_t n;
    unsigned long dropped;
} flushed;

static void *GC_CALLBACK take_pending(void *arg)
{
    flushed *f = arg;
    f->n = pend_n < MAX_PENDING ? pend_n : MAX_PENDING;
    if (f->copy && pend)
        memcpy(f->copy, pend, f->n * sizeof *pend);
    f->dropped = pend_dropped;
    pend_n = 0;
    pend_dropped = 0;
    gc_pending = 0;
    gc_update_active();
    return NULL;
}

unsigned gc_flush_pending(void)
{
    flushed f = {.copy = malloc(MAX_PENDING * sizeof(gc_root_rec))};
    if (!f.copy)
        return 0;
    GC_call_with_alloc_lock(take_pending, &f);
    for (size_t i = 0; i < f.n; i++)
        gc_report_root_problem(&f.copy[i]);
    if (f.dropped) {
        crawl_report *r = crawl_report_begin();
        crawl_report_printf(r, "==%d==ERROR: crawl-boehm: bad-root: %lu more root problems in "
                               "the same collections were not kept\n",
                            (int)getpid(), f.dropped);
        crawl_report_end(r);
    }
    free(f.copy);
    return (unsigned)(f.n + (f.dropped != 0));
}
