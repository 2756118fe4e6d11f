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
 * it ("Unexpected mark stack overflow"). */
#include <crawl/boehm.h>
#include <gc/gc.h>
#include <gc/gc_mark.h>
#include <stdlib.h>
#include <unistd.h>

static GC_push_other_roots_proc previous;
static int installed;
static unsigned long last_count;

typedef struct pending {
    void **lo, **hi;                    /* [lo, hi): slots not yet pushed */
    unsigned long n;
} pending;

#define COALESCE_GAP 4                  /* words between slots still scanned as one range */

static void push_root(void **slot, unsigned root_flags, const crawl_cf *cf, void *ctx)
{
    (void)root_flags;                   /* Boehm neither moves objects nor needs interior hints */
    (void)cf;
    pending *p = ctx;
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

static void GC_CALLBACK push_crawl_roots(void)
{
    if (previous)
        previous();
    pending p = {0};
    crawl_walk_status st = crawl_enum_roots_all_threads(push_root, &p, 0);
    if (p.lo)
        GC_push_all_eager(p.lo, p.hi);
    last_count = p.n;
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
