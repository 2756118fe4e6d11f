/* crawl-boehm's reports: bad and double roots, use-after-collect and
 * overflows of GC objects, in crawl's report path and the
 * AddressSanitizer shape, with mixed allocation stacks. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "gcroots/gc_internal.h"

typedef struct home_search {
    const void *frame;
    int found;
    char *buf;
    size_t len;
} home_search;

static crawl_action find_home(const crawl_cf *cf, void *ctx)
{
    home_search *h = ctx;
    if (!h->found) {
        h->found = crawl_cf_frame(cf) == h->frame;
        return CRAWL_CONTINUE;
    }
    if (crawl_cf_kind(cf) != CRAWL_CF_NATIVE)
        return CRAWL_CONTINUE;
    crawl_cf_describe(cf, h->buf, h->len);
    return CRAWL_ABORT;
}

void gc_frame_home(const void *f, char *buf, size_t len)
{
    buf[0] = '\0';
    home_search h = {f, 0, buf, len};
    crawl_walk(find_home, &h, 0);
    if (!h.found)
        buf[0] = '\0';
}

void gc_report_object(crawl_report *r, uintptr_t object, size_t size)
{
    gc_obj e;
    if (!gc_obj_find(object, &e) || !e.alloc_stack) {
        crawl_report_printf(r, "  the %zu-byte object at 0x%lx has no allocation stack "
                               "(allocated without crawl_gc_malloc, or gc_alloc_stacks=0)\n",
                            size, (unsigned long)object);
        return;
    }
    crawl_report_printf(r, "  the %zu-byte object at 0x%lx was allocated by thread T%u here:\n",
                        e.size, (unsigned long)object, e.alloc_tid);
    crawl_report_trace(r, e.alloc_stack);
}

static const char *problem_words(const gc_root_rec *rec, char *buf, size_t len)
{
    switch (rec->problem) {
    case GC_PROBLEM_NOT_OBJECT:
        return "not NULL, not an immediate, and not in the GC heap";
    case GC_PROBLEM_INTERIOR:
        snprintf(buf, len, "%lu bytes into the %zu-byte object at 0x%lx (an interior pointer "
                           "in a slot not reported with CRAWL_ROOT_INTERIOR)",
                 (unsigned long)((uintptr_t)rec->value - rec->object), rec->object_size,
                 (unsigned long)rec->object);
        return buf;
    case GC_PROBLEM_COLLECTED:
        return "a collected object (the root was not reported when it was collected)";
    default:
        return "";
    }
}

void gc_report_root_problem(const gc_root_rec *rec)
{
    char why[200], home[200] = "";
    if (crawl_thread_number() == (int)rec->thread)
        gc_frame_home(rec->frame, home, sizeof home);
    crawl_report *r = crawl_report_begin();
    int pid = (int)getpid();
    if (rec->problem == GC_PROBLEM_DOUBLE)
        crawl_report_printf(r, "==%d==ERROR: crawl-boehm: double-root: slot 0x%lx reported twice "
                               "in one collection (thread T%u)\n",
                            pid, (unsigned long)rec->slot, rec->thread);
    else
        crawl_report_printf(r, "==%d==ERROR: crawl-boehm: bad-root: slot 0x%lx holds 0x%lx: %s "
                               "(thread T%u)\n",
                            pid, (unsigned long)rec->slot, (unsigned long)rec->value,
                            problem_words(rec, why, sizeof why), rec->thread);
    crawl_report_printf(r, "  reported by Frame '%s' at %p%s%s%s, root #%u of its thread\n",
                        rec->type_name, rec->frame, rec->text[0] ? " (" : "", rec->text,
                        rec->text[0] ? ")" : "", rec->index);
    if (home[0])
        crawl_report_printf(r, "  which lives in the frame of %s\n", home);
    if (rec->object)
        gc_report_object(r, rec->object, rec->object_size);
    crawl_report_printf(r, "SUMMARY: crawl-boehm: %s\n",
                        rec->problem == GC_PROBLEM_DOUBLE ? "double-root" : "bad-root");
    crawl_report_end(r);
}

/* ---- checked accesses ---------------------------------------------------------- */

__attribute__((noinline)) static void report_access(const char *kind, const void *p,
                                                    size_t size, int is_write, const gc_obj *e)
{
    crawl_report *r = crawl_report_begin();
    int pid = (int)getpid();
    int t = crawl_thread_number();
    unsigned long a = (unsigned long)(uintptr_t)p, base = (unsigned long)e->base;
    crawl_report_printf(r, "==%d==ERROR: AddressSanitizer: %s on address 0x%lx\n", pid, kind, a);
    crawl_report_printf(r, "%s of size %zu at 0x%lx thread T%d\n", is_write ? "WRITE" : "READ",
                        size, a, t < 0 ? 0 : t);
    crawl_report_stack(r, 2);            /* from crawl_gc_check's caller */
    crawl_report_printf(r, "\n");
    /* an access that runs past the end: located by its first bad byte, as
     * the checked heap and AddressSanitizer do */
    if (e->state == GC_OBJ_LIVE && a < base + e->size)
        a = base + e->size;
    if (a >= base + e->size)
        crawl_report_printf(r, "0x%lx is located %lu bytes after %zu-byte object [0x%lx,0x%lx)\n",
                            a, a - base - e->size, e->size, base, base + e->size);
    else
        crawl_report_printf(r, "0x%lx is located %lu bytes inside of %zu-byte object [0x%lx,0x%lx)\n",
                            a, a - base, e->size, base, base + e->size);
    if (e->state != GC_OBJ_LIVE) {
        crawl_report_printf(r, "collected by collection #%lu, which thread T%u started here:\n",
                            e->collect_gc, e->collect_tid);
        crawl_report_trace(r, e->collect_stack);
        crawl_report_printf(r, "\npreviously allocated by thread T%u here:\n", e->alloc_tid);
    } else {
        crawl_report_printf(r, "allocated by thread T%u here:\n", e->alloc_tid);
    }
    crawl_report_trace(r, e->alloc_stack);
    crawl_report_printf(r, "\nSUMMARY: AddressSanitizer: %s\n", kind);
    crawl_report_end(r);
}

int crawl_gc_check(const void *p, size_t size, int is_write)
{
    if (!p || size == 0)
        return 0;
    gc_opts_refresh();
    if (gc_pending)
        gc_flush_pending();
    void *base = GC_base((void *)p);
    gc_obj e;
    if (!base || !gc_obj_find((uintptr_t)base, &e))
        return 0;                        /* not an object crawl knows */
    const char *kind = NULL;
    if (e.state != GC_OBJ_LIVE)
        kind = "use-after-collect";
    else if ((uintptr_t)p + size > e.base + e.size || (uintptr_t)p + size < (uintptr_t)p)
        kind = "heap-buffer-overflow";
    if (!kind)
        return 0;
    report_access(kind, p, size, is_write, &e);
    int reported = 1;
    __asm__ volatile("" : "+r"(reported));   /* keep this frame: the stack starts above it */
    return reported;
}
