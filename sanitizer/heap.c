/* The checked heap: redzones, a FIFO quarantine, depot stacks per chunk,
 * and shadow memory in AddressSanitizer's encoding.
 *
 * Chunks come from one reserved region (MAP_NORESERVE: pages are touched
 * as used), carved by size class and recycled through per-class free lists
 * once they leave the quarantine. Layout of a chunk:
 *   [left redzone, its last 32 bytes the header][user bytes][right redzone]
 * The shadow holds one byte per 8 bytes of the region. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "sanitizer/heap_error.h"

#define REGION_SIZE ((size_t)16 << 30)
#define MAX_ALLOC ((size_t)1 << 32)
#define GRANULE 8

enum {
    SH_LEFT = 0xfa,                      /* heap left redzone */
    SH_RIGHT = 0xfb,                     /* heap right redzone */
    SH_FREED = 0xfd,                     /* freed heap region */
    SH_USER = 0xf7,                      /* poisoned by user */
};

enum { ST_LIVE = 0x4c697665u, ST_QUARANTINED = 0x51756172u };

typedef struct chunk {                   /* right before the user bytes */
    uint32_t state;
    uint32_t alloc_stack, free_stack;
    uint32_t alloc_tid, free_tid;
    uint16_t cls;                        /* < NCLASSES */
    uint16_t left;                       /* bytes from chunk start to user (<= 2048) */
    size_t user_size;
} chunk;
_Static_assert(sizeof(chunk) == 32, "the header fills the last 32 bytes of the left redzone");

#define HDR(user) ((chunk *)((char *)(user) - sizeof(chunk)))

/* size classes: multiples of 16 up to 4 KiB, then powers of two */
#define SMALL_CLASSES 256
#define NCLASSES (SMALL_CLASSES + 40)

static pthread_mutex_t heap_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t heap_once = PTHREAD_ONCE_INIT;
static char *region;
static unsigned char *shadow;
static size_t bump;

/* Freed chunks are tracked in side arrays, never through the chunks: by the
 * time a chunk leaves a 64 MiB quarantine its memory is long cold, and
 * touching it cost a cache miss per free (bench/heap). A chunk in the
 * quarantine or on a free list keeps its ST_QUARANTINED header: both are
 * "freed" to a second free. */
typedef struct quarantined {
    void *base;                          /* the chunk's start: no need to read it back */
    size_t csize;                        /* up to 8 GiB (MAX_ALLOC plus redzones, rounded) */
    unsigned cls;
} quarantined;

typedef struct ptr_stack {
    void **items;
    size_t n, cap;
} ptr_stack;

static ptr_stack free_lists[NCLASSES];
static quarantined *ring;               /* FIFO: [head, head+count) modulo cap */
static size_t ring_cap, ring_head, ring_count;
static size_t quarantine_bytes;

static int stack_push(ptr_stack *st, void *p)
{
    if (st->n == st->cap) {
        size_t cap = st->cap ? st->cap * 2 : 64;
        void **items = realloc(st->items, cap * sizeof *items);
        if (!items)
            return -1;
        st->items = items;
        st->cap = cap;
    }
    st->items[st->n++] = p;
    return 0;
}

static int ring_push(quarantined q)
{
    if (ring_count == ring_cap) {
        size_t cap = ring_cap ? ring_cap * 2 : 1024;
        quarantined *r = malloc(cap * sizeof *r);
        if (!r)
            return -1;
        for (size_t i = 0; i < ring_count; i++)
            r[i] = ring[(ring_head + i) % ring_cap];
        free(ring);
        ring = r;
        ring_cap = cap;
        ring_head = 0;
    }
    ring[(ring_head + ring_count++) % ring_cap] = q;
    return 0;
}

void san_heap_fork(int lock)
{
    if (lock)
        pthread_mutex_lock(&heap_lock);
    else
        pthread_mutex_unlock(&heap_lock);
}

/* Where the address space is limited (ulimit -v) the region may not fit:
 * then region stays NULL, nothing is owned and every allocation fails
 * with ENOMEM (it stopped the process: crawlvm --sanitize under ulimit -v
 * 4 GB aborted; found by a hostile-input run). */
static void reserve_region(void)
{
    void *r = crawl__mmap(REGION_SIZE, PROT_READ | PROT_WRITE, MAP_NORESERVE);
    void *s = crawl__mmap(REGION_SIZE / GRANULE, PROT_READ | PROT_WRITE, MAP_NORESERVE);
    if (r == MAP_FAILED || s == MAP_FAILED) {
        if (r != MAP_FAILED)
            crawl__munmap(r, REGION_SIZE);
        if (s != MAP_FAILED)
            crawl__munmap(s, REGION_SIZE / GRANULE);
        return;
    }
    shadow = s;
    region = r;
}

int crawl_heap_reserve(void)
{
    pthread_once(&heap_once, reserve_region);
    return region ? 0 : -ENOMEM;
}

/* bump only grows (under heap_lock); readers outside the lock load it once */
static size_t heap_end(void)
{
    return __atomic_load_n(&bump, __ATOMIC_ACQUIRE);
}

int crawl_heap_owns(const void *p)
{
    return region && (uintptr_t)p - (uintptr_t)region < heap_end();
}

static unsigned char *shadow_of(uintptr_t a)
{
    return shadow + (a - (uintptr_t)region) / GRANULE;
}

/* [a, a+n) with a and n multiples of 8 */
static void poison(uintptr_t a, size_t n, unsigned char value)
{
    memset(shadow_of(a), value, n / GRANULE);
}

/* user bytes [a, a+size) addressable; a is 16-aligned */
static void unpoison_user(uintptr_t a, size_t size)
{
    memset(shadow_of(a), 0, size / GRANULE);
    if (size % GRANULE)
        *shadow_of(a + size - size % GRANULE) = (unsigned char)(size % GRANULE);
}

static unsigned class_of(size_t total, size_t *class_size)
{
    if (total <= SMALL_CLASSES * 16) {
        unsigned c = (unsigned)((total + 15) / 16) - 1;
        *class_size = (size_t)(c + 1) * 16;
        return c;
    }
    unsigned b = 64 - (unsigned)__builtin_clzl(total - 1);     /* next power of two */
    *class_size = (size_t)1 << b;
    return SMALL_CLASSES + b - 12;
}

static size_t round16(size_t n) { return (n + 15) & ~(size_t)15; }

static void *allocate(size_t size, const crawl_regs *caller)
{
    const san_options *o = san_opts();
    if (size > MAX_ALLOC || crawl_heap_reserve() != 0) {
        errno = ENOMEM;
        return NULL;
    }
    uint32_t stack = san_capture_at(caller, o->malloc_context_size,
                                    o->fast_unwind_on_malloc ? CRAWL_WALK_FAST : 0);
    size_t left = round16(o->redzone > sizeof(chunk) ? o->redzone : sizeof(chunk));
    size_t right = o->redzone;
    size_t csize, total = left + round16(size) + right;
    unsigned cls = class_of(total, &csize);

    pthread_mutex_lock(&heap_lock);
    char *base;
    if (free_lists[cls].n) {
        base = free_lists[cls].items[--free_lists[cls].n];
    } else {
        if (bump + csize > REGION_SIZE) {
            pthread_mutex_unlock(&heap_lock);
            errno = ENOMEM;
            return NULL;
        }
        base = region + bump;
        __atomic_store_n(&bump, bump + csize, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&heap_lock);

    char *user = base + left;
    poison((uintptr_t)base, left, SH_LEFT);
    poison((uintptr_t)user, csize - left, SH_RIGHT);
    unpoison_user((uintptr_t)user, size);
    chunk *h = HDR(user);
    *h = (chunk){.state = ST_LIVE, .alloc_stack = stack, .cls = (uint16_t)cls,
                 .alloc_tid = san_thread_id(), .left = (uint16_t)left, .user_size = size};
    return user;
}

static size_t chunk_size(const chunk *h)
{
    size_t c;
    if (h->cls < SMALL_CLASSES)
        return (size_t)(h->cls + 1) * 16;
    class_of((size_t)1 << (h->cls - SMALL_CLASSES + 12), &c);
    return c;
}

/* The chunk whose header is right before user, if it is one: the magic
 * alone could be user data or a stale header inside another chunk, so the
 * shadow must also say that a left redzone ends exactly at user. */
static chunk *valid_header(uintptr_t user)
{
    if (!crawl_heap_owns((void *)user) || (user & 15) || user - (uintptr_t)region < sizeof(chunk))
        return NULL;
    if (*shadow_of(user - GRANULE) != SH_LEFT || *shadow_of(user) == SH_LEFT)
        return NULL;
    chunk *h = HDR(user);
    if (h->state != ST_LIVE && h->state != ST_QUARANTINED)
        return NULL;
    return h;
}

/* ---- locating an address for a report ------------------------------------------ */

typedef struct where {
    uintptr_t user;                     /* 0: no chunk found */
    chunk *h;
} where;

/* Walk the shadow to the chunk an address belongs to or borders: in a left
 * redzone, the chunk to the right; anywhere else, the chunk to the left. */
static where locate(uintptr_t a)
{
    where w = {0, NULL};
    uintptr_t lo = (uintptr_t)region, hi = (uintptr_t)region + heap_end();
    uintptr_t g = a & ~(uintptr_t)(GRANULE - 1);
    if (g < lo || g >= hi)
        return w;
    if (*shadow_of(g) == SH_LEFT) {
        while (g < hi && *shadow_of(g) == SH_LEFT)
            g += GRANULE;
    } else {
        while (g > lo && *shadow_of(g) == SH_RIGHT)
            g -= GRANULE;
        if (*shadow_of(g) == SH_LEFT)
            g += GRANULE;                /* a malloc(0) chunk: user starts where this ends */
        else
            while (g > lo && *shadow_of(g - GRANULE) != SH_LEFT)
                g -= GRANULE;
    }
    chunk *h = g < hi ? valid_header(g) : NULL;
    if (h) {
        w.user = g;
        w.h = h;
    }
    return w;
}

/* ---- describing an error (printed by heap_report.c) ------------------------------ */

static void describe_chunk(const where *w, san_heap_error *e)
{
    if (!w->h)
        return;
    const chunk *h = w->h;
    e->has_chunk = 1;
    e->chunk = (san_chunk_desc){.user = w->user, .size = h->user_size,
                                .freed = h->state != ST_LIVE, .alloc_stack = h->alloc_stack,
                                .free_stack = h->free_stack, .alloc_tid = h->alloc_tid,
                                .free_tid = h->free_tid};
}

/* The shadow rows around a's shadow byte, five before and four after. */
static void describe_shadow(uintptr_t a, san_shadow_desc *sh)
{
    unsigned char *bad = shadow_of(a);
    unsigned char *row = (unsigned char *)((uintptr_t)bad & ~(uintptr_t)15);
    unsigned char *lo = shadow, *hi = shadow_of((uintptr_t)region + heap_end());
    sh->bad = (uintptr_t)bad;
    sh->nrows = 0;
    for (int k = -5; k <= 4; k++) {
        unsigned char *line = row + k * 16;
        if (line < lo || line >= hi)
            continue;
        unsigned n = hi - line < 16 ? (unsigned)(hi - line) : 16;
        sh->row[sh->nrows].at = (uintptr_t)line;
        sh->row[sh->nrows].n = n;
        sh->row[sh->nrows].here = k == 0;
        memcpy(sh->row[sh->nrows].b, line, n);
        sh->nrows++;
    }
}

static void describe_access(uintptr_t access, uintptr_t bad, size_t size, int is_write,
                            san_heap_error *e)
{
    unsigned char s = *shadow_of(bad);
    if (s > 0 && s < GRANULE)            /* past a granule's addressable prefix: what follows says */
        s = *shadow_of(bad + GRANULE);
    *e = (san_heap_error){.kind = SAN_HEAP_BAD_ACCESS, .addr = bad, .access = access,
                          .access_size = size,
                          .is_write = is_write, .in_heap = 1, .has_shadow = 1,
                          .bug = s == SH_FREED ? "heap-use-after-free"
                                 : s == SH_USER ? "use-after-poison"
                                                : "heap-buffer-overflow"};
    where w = locate(bad);
    describe_chunk(&w, e);
    describe_shadow(bad, &e->shadow);
}

/* A free of p: freed is p's chunk when it was freed already (a double
 * free), NULL when p is no chunk's start (a bad free). */
static void describe_bad_free(uintptr_t p, chunk *freed, san_heap_error *e)
{
    *e = (san_heap_error){.addr = p};
    if (freed) {
        e->kind = SAN_HEAP_DOUBLE_FREE;
        e->bug = "double-free";
        e->in_heap = 1;
        describe_chunk(&(where){p, freed}, e);
    } else {
        e->kind = SAN_HEAP_BAD_FREE;
        e->bug = "bad-free";
        e->in_heap = crawl_heap_owns((void *)p);
        if (e->in_heap) {
            where w = locate(p);
            describe_chunk(&w, e);
        }
    }
}

__attribute__((noinline)) static void report_bad_free(const crawl_regs *entry, uintptr_t p,
                                                      chunk *freed)
{
    san_heap_error e;
    describe_bad_free(p, freed, &e);
    san_report_heap_error(entry, &e);
}

/* ---- the API -------------------------------------------------------------------------- */

static void release(const crawl_regs *entry, void *p)
{
    uintptr_t u = (uintptr_t)p;
    chunk *h = valid_header(u);
    if (!h) {
        report_bad_free(entry, u, NULL);
        return;
    }
    const san_options *o = san_opts();
    uint32_t stack = san_capture_at(entry, o->malloc_context_size,
                                    o->fast_unwind_on_malloc ? CRAWL_WALK_FAST : 0);
    pthread_mutex_lock(&heap_lock);
    if (h->state != ST_LIVE) {
        pthread_mutex_unlock(&heap_lock);
        report_bad_free(entry, u, h);
        return;
    }
    h->state = ST_QUARANTINED;
    h->free_stack = stack;
    h->free_tid = san_thread_id();
    size_t csize = chunk_size(h);
    /* the user bytes, and for a 0-byte chunk its first granule (what a
     * stale pointer to it reads: a use after free, as ASan reports) */
    size_t freed = h->user_size ? h->user_size : 1;
    poison(u, (freed + GRANULE - 1) / GRANULE * GRANULE, SH_FREED);   /* redzone stays */
    if (ring_push((quarantined){(char *)p - h->left, csize, h->cls}) == 0)
        quarantine_bytes += csize;
    /* else: out of memory for bookkeeping; the chunk is simply never reused */
    while (ring_count && quarantine_bytes > o->quarantine_bytes) {
        quarantined old = ring[ring_head];
        ring_head = (ring_head + 1) % ring_cap;
        ring_count--;
        quarantine_bytes -= old.csize;
        stack_push(&free_lists[old.cls], old.base);   /* (leaked if that fails) */
    }
    pthread_mutex_unlock(&heap_lock);
}

void *crawl_heap_malloc(size_t size)
{
    crawl_regs entry;
    crawl_capture_regs(&entry);
    return allocate(size, &entry);
}

void *crawl_heap_calloc(size_t n, size_t size)
{
    crawl_regs entry;
    crawl_capture_regs(&entry);
    size_t total;
    if (__builtin_mul_overflow(n, size, &total)) {
        errno = ENOMEM;
        return NULL;
    }
    void *p = allocate(total, &entry);
    if (p)
        memset(p, 0, total);
    return p;
}

void crawl_heap_free(void *p)
{
    crawl_regs entry;
    crawl_capture_regs(&entry);
    if (p)
        release(&entry, p);
}

void *crawl_heap_realloc(void *p, size_t size)
{
    crawl_regs entry;
    crawl_capture_regs(&entry);
    if (!p)
        return allocate(size, &entry);
    chunk *h = valid_header((uintptr_t)p);
    if (!h || h->state != ST_LIVE) {
        release(&entry, p);              /* reports the bad or double free */
        return NULL;
    }
    void *q = allocate(size, &entry);
    if (!q)
        return NULL;                     /* p stays valid, as realloc promises */
    memcpy(q, p, h->user_size < size ? h->user_size : size);
    release(&entry, p);
    return q;
}

size_t crawl_heap_size(const void *p)
{
    if (!crawl_heap_owns(p))
        return 0;
    pthread_mutex_lock(&heap_lock);
    const chunk *h = valid_header((uintptr_t)p);
    size_t n = h && h->state == ST_LIVE ? h->user_size : 0;
    pthread_mutex_unlock(&heap_lock);
    return n;
}

int crawl_heap_check(const void *addr, size_t size, int is_write)
{
    uintptr_t a = (uintptr_t)addr;
    if (size == 0 || !crawl_heap_owns(addr))
        return 0;
    uintptr_t end = a + size, limit = (uintptr_t)region + heap_end();
    if (end > limit || end < a)
        end = limit;
    for (uintptr_t g = a & ~(uintptr_t)(GRANULE - 1); g < end; g += GRANULE) {
        unsigned char s = *shadow_of(g);
        if (s == 0)
            continue;
        uintptr_t first = a > g ? a : g;              /* bytes of the access in this granule */
        uintptr_t last = (end < g + GRANULE ? end : g + GRANULE) - 1;
        if (s < GRANULE && last - g < s)
            continue;                                  /* within the addressable prefix */
        uintptr_t bad = s < GRANULE && first - g < s ? g + s : first;
        san_heap_error e;
        describe_access(a, bad, size, is_write, &e);
        crawl_regs entry;
        crawl_capture_regs(&entry);
        san_report_heap_error(&entry, &e);
        int reported = 1;
        CRAWL__NO_TAIL(reported);
        return reported;
    }
    return 0;
}

/* As AddressSanitizer's manual poisoning: whole granules change; in a
 * partly covered last granule (the shadow can only say "the first k bytes
 * are addressable"), poisoning takes the granule when it covers all its
 * addressable bytes, and unpoisoning makes at least the covered bytes
 * addressable. */
static int poison_range(const void *addr, size_t size, int on)
{
    uintptr_t a = (uintptr_t)addr;
    where w = locate(a);
    if (!w.h || w.h->state != ST_LIVE || a < w.user || size > w.user + w.h->user_size - a ||
        (a - w.user) % GRANULE)
        return -EINVAL;
    size_t whole = size / GRANULE * GRANULE, part = size % GRANULE;
    poison(a, whole, on ? SH_USER : 0);
    if (part) {
        unsigned char *sh = shadow_of(a + whole);
        int prefix = *sh == 0 ? GRANULE : *sh < GRANULE ? *sh : 0;   /* addressable bytes */
        if (on && prefix && prefix <= (int)part)
            *sh = SH_USER;
        else if (!on && prefix < (int)part)
            *sh = (unsigned char)part;
    }
    return 0;
}

int crawl_heap_poison(const void *addr, size_t size) { return poison_range(addr, size, 1); }
int crawl_heap_unpoison(const void *addr, size_t size) { return poison_range(addr, size, 0); }
