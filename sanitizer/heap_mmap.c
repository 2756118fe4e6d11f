/* Heap profiles' mapped regions (heap_profile_mmap=1, Matrix's mmap hooks):
 * what mmap and mremap mapped and munmap has not taken back, each with the
 * stack that mapped it. A table of its own, apart from the chunks: a
 * sorted array of disjoint page ranges under one lock. Mappings are few
 * next to mallocs, and munmap may take back any part of one, which trims
 * or splits it, so lookups are by range, not by address. The array grows
 * by mmap, never by malloc; the growth's own mapping is not recorded (the
 * thread is marked inside crawl), nor is any mapping made while crawl
 * records, or holds one of its own locks. */
#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "sanitizer/heap_profile_internal.h"

#ifndef MREMAP_DONTUNMAP
#define MREMAP_DONTUNMAP 4 /* Linux 5.7; glibc 2.36's headers lack it */
#endif

typedef struct region {
    uintptr_t lo, hi;                   /* whole pages */
    uintptr_t caller;
    uint32_t stack;
} region;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static region *rg;                      /* n of cap, sorted by lo, disjoint */
static size_t n, cap;

static uintptr_t page_mask(void)
{
    return (uintptr_t)getpagesize() - 1;
}

/* Room for two more regions (a split adds one). 0 or -ENOMEM. Under lock,
 * inside crawl: this mmap is crawl's own. */
static int reserve(void)
{
    if (n + 2 <= cap)
        return 0;
    size_t ncap = cap ? 2 * cap : 256;
    region *more = crawl__mmap(ncap * sizeof *more, PROT_READ | PROT_WRITE, 0);
    if (more == MAP_FAILED)
        return -ENOMEM;
    if (rg) {
        memcpy(more, rg, n * sizeof *rg);
        crawl__munmap(rg, cap * sizeof *rg);
    }
    rg = more, cap = ncap;
    return 0;
}

/* The first region whose hi is above a (n if none). */
static size_t first_above(uintptr_t a)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (rg[mid].hi <= a)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* Take [lo, hi) out of every region (under lock, room reserved): trims,
 * splits, removals. If out is not NULL, the region that held lo (before
 * the cut) is copied there and 1 returned. */
static int cut(uintptr_t lo, uintptr_t hi, region *out)
{
    size_t i = first_above(lo);
    int found = 0;
    if (out && i < n && rg[i].lo <= lo) {
        *out = rg[i];
        found = 1;
    }
    while (i < n && rg[i].lo < hi) {
        region *r = &rg[i];
        if (r->lo < lo && r->hi > hi) {          /* split in two */
            memmove(r + 2, r + 1, (n - i - 1) * sizeof *r);
            r[1] = *r;
            r[0].hi = lo;
            r[1].lo = hi;
            n++;
            return found;
        }
        if (r->lo < lo) {                        /* keep the left part */
            r->hi = lo;
            i++;
        } else if (r->hi > hi) {                 /* keep the right part */
            r->lo = hi;
            return found;
        } else {                                 /* all of it goes */
            memmove(r, r + 1, (n - i - 1) * sizeof *r);
            n--;
        }
    }
    return found;
}

/* Add [lo, hi) (under lock, room reserved, [lo, hi) cut first). */
static void put(const region *r)
{
    size_t i = first_above(r->lo);
    memmove(&rg[i + 1], &rg[i], (n - i) * sizeof *rg);
    rg[i] = *r;
    n++;
}

static int recording(void)
{
    return __atomic_load_n(&crawl__hp.on, __ATOMIC_ACQUIRE) == 1 &&
           __atomic_load_n(&crawl__hp.mmap, __ATOMIC_RELAXED) && !hp_inside_now() &&
           !crawl__busy;
}

/* The whole pages [*lo, *hi) that [addr, addr + len) touches. */
static void pages(uintptr_t addr, size_t len, uintptr_t *lo, uintptr_t *hi)
{
    *lo = addr & ~page_mask();
    *hi = (addr + len + page_mask()) & ~page_mask();
}

/* Take [lo, hi) out of the table and, when add is not NULL, put *add in
 * its place (a mapping made over whatever was there); *found, when not
 * NULL, gets the region that held lo before (its return: 1 if there was
 * one). Inside crawl meanwhile: the table's own growth is not recorded. */
static int change(uintptr_t lo, uintptr_t hi, const region *add, region *found)
{
    int was = hp_inside_enter(), held = 0;
    crawl__lock(&lock);
    if ((n || add) && reserve() == 0) {
        held = cut(lo, hi, found);
        if (add)
            put(add);
    }
    crawl__unlock(&lock);
    hp_inside_leave(was);
    return held;
}

static void add_region(uintptr_t addr, size_t len, uintptr_t caller, uint32_t stack)
{
    region r = {.caller = caller, .stack = stack};
    pages(addr, len, &r.lo, &r.hi);
    change(r.lo, r.hi, &r, NULL);
}

/* A new region with a stack from the caller of the function whose
 * registers are *from. */
static void map_from(const void *addr, size_t len, uintptr_t caller, const crawl_regs *from)
{
    if (!addr || addr == MAP_FAILED || len == 0 || !recording())
        return;
    add_region((uintptr_t)addr, len, caller, hp_capture_stack(from));
}

void crawl_heap_profile_mmap(const void *addr, size_t len, uintptr_t caller)
{
    crawl_regs here;
    crawl_capture_regs(&here);
    map_from(addr, len, caller ? caller : (uintptr_t)__builtin_return_address(0), &here);
    CRAWL__NO_TAIL(len);
}

void crawl_heap_profile_munmap(const void *addr, size_t len)
{
    if (!addr || len == 0 || hp_inside_now() || crawl__busy)
        return;
    uintptr_t lo, hi;
    pages((uintptr_t)addr, len, &lo, &hi);
    change(lo, hi, NULL, NULL);
}

void crawl_heap_profile_mremap(const void *old, size_t old_len, const void *addr, size_t len,
                               int flags)
{
    if (!old || !addr || addr == MAP_FAILED || hp_inside_now() || crawl__busy)
        return;
    if (flags & MREMAP_DONTUNMAP) {      /* the old pages stay mapped: a new region */
        crawl_regs here;
        crawl_capture_regs(&here);
        map_from(addr, len, (uintptr_t)__builtin_return_address(0), &here);
        CRAWL__NO_TAIL(len);
        return;
    }
    uintptr_t lo, hi;
    pages((uintptr_t)old, old_len, &lo, &hi);
    region r;
    if (change(lo, hi, NULL, &r))        /* moved or resized: the stack that mapped it stays */
        add_region((uintptr_t)addr, len, r.caller, r.stack);
}

void crawl_heap_profile_mapped(size_t *bytes, size_t *regions)
{
    size_t b = 0;
    crawl__lock(&lock);
    for (size_t i = 0; i < n; i++)
        b += rg[i].hi - rg[i].lo;
    if (regions)
        *regions = n;
    crawl__unlock(&lock);
    if (bytes)
        *bytes = b;
}

int hp_mmap_append(hp_snap *s)
{
    crawl__lock(&lock);
    if (hp_snap_reserve(s, n) != 0) {
        crawl__unlock(&lock);
        return -ENOMEM;
    }
    for (size_t i = 0; i < n; i++)
        s->e[s->n++] = (hp_entry){.ptr = rg[i].lo, .size = rg[i].hi - rg[i].lo,
                                  .caller = rg[i].caller, .stack = rg[i].stack, .flags = HP_MMAP};
    crawl__unlock(&lock);
    return 0;
}

void hp_mmap_fork(int lock_it)
{
    if (lock_it)
        crawl__lock(&lock);
    else
        crawl__unlock(&lock);
}
