/* crawl-boehm: Boehm GC marks what attached threads' Frames report.
 *
 * Boehm scans thread stacks and static data itself, conservatively; it
 * does not scan memory it does not know (a VM value stack in mmap'ed
 * memory). The push-other-roots callback runs inside every collection,
 * with the allocation lock held and the world stopped, and pushes each
 * reported slot; adjacent slots are pushed as one range. */
#include <crawl/gcroots.h>
#include <gc/gc.h>
#include <gc/gc_mark.h>

static GC_push_other_roots_proc previous;
static int installed;
static unsigned long last_count;

typedef struct pending {
    void **lo, **hi;                    /* [lo, hi): slots not yet pushed */
    unsigned long n;
} pending;

static void push_root(void **slot, unsigned root_flags, const crawl_cf *cf, void *ctx)
{
    (void)root_flags;                   /* Boehm neither moves objects nor needs interior hints */
    (void)cf;
    pending *p = ctx;
    p->n++;
    if (slot == p->hi) {
        p->hi++;
        return;
    }
    if (p->lo)
        GC_push_all(p->lo, p->hi);
    p->lo = slot;
    p->hi = slot + 1;
}

static void GC_CALLBACK push_crawl_roots(void)
{
    if (previous)
        previous();
    pending p = {0};
    crawl_enum_roots_all_threads(push_root, &p, 0);
    if (p.lo)
        GC_push_all(p.lo, p.hi);
    last_count = p.n;
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
