/* The stack depot: deduplicating, append-only storage of traces.
 *
 * A hash table of lock-free singly linked lists; nodes come from mmap'ed
 * arenas by bump allocation and are never freed, so readers need no lock
 * and a pointer handed out stays valid. A put that misses links its node
 * with one CAS on the bucket head; if another thread linked the same trace
 * first, it finds it on the retry and its own node is simply wasted. Ids
 * index a two-level table of node pointers, also installed with CAS.
 * Everything here is async-signal-safe: atomics, mmap, XXH3. */
#define XXH_INLINE_ALL
#include <errno.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/mman.h>
#include <xxhash.h>

#include "sanitizer/internal.h"

typedef struct node {
    struct node *next;                  /* older node in the bucket */
    uint64_t hash;
    uint32_t id;
    uint32_t n;
    uintptr_t frames[];
} node;

#define BUCKET_BITS 18
#define BUCKETS (1u << BUCKET_BITS)

/* The depot's tables are mmap'ed on first use, not static: a collector that
 * scans loaded libraries' data (Boehm does) would otherwise scan megabytes
 * of depot pointers at every collection and size its heap by them. Small
 * pages: a process that stores a few traces then holds a page of buckets
 * per trace, not a 2 MiB huge page of them (hits with 100,000 traces
 * stored measured the same either way; bench/depot). */
static void *map_table(size_t bytes)
{
    void *p = crawl__mmap(bytes, PROT_READ | PROT_WRITE, 0);
    return p == MAP_FAILED ? NULL : p;
}

/* Install a table once, lock-free (async-signal-safe: mmap and a CAS). */
static void *lazy_table(_Atomic(void *) *slot, size_t bytes)
{
    void *t = atomic_load_explicit(slot, memory_order_acquire);
    if (t)
        return t;
    void *fresh = map_table(bytes);
    if (!fresh)
        return NULL;
    if (atomic_compare_exchange_strong(slot, &t, fresh))
        return fresh;
    crawl__munmap(fresh, bytes);         /* another thread won */
    return t;
}

static _Atomic(void *) bucket_table;
static _Atomic(node *) *buckets_get(void)
{
    return lazy_table(&bucket_table, BUCKETS * sizeof(node *));
}

/* ---- arenas --------------------------------------------------------------- */
/* The first arena is small and of small pages, so that a process that
 * stores a few hundred traces holds only the pages they fill (a huge page
 * is 2 MiB of memory zeroed at its first touch); later ones are 4 MiB and
 * huge pages where the kernel allows: with many traces stored, a lookup's
 * node is rarely cached and a TLB miss on top of it costs a lot, and a new
 * trace then costs one page fault every 2 MiB, not every 4 KiB. */
#define FIRST_ARENA_SIZE (256u << 10)
#define ARENA_SIZE (4u << 20)

typedef struct arena {
    _Atomic size_t used;
    size_t size;
    char data[];
} arena;

static _Atomic(arena *) current_arena;
static atomic_size_t bytes_used, drops, stored;
static atomic_size_t budget = (size_t)256 << 20;   /* set by options, read by puts */

static arena *new_arena(size_t need, int first)
{
    size_t unit = first ? FIRST_ARENA_SIZE : ARENA_SIZE;
    size_t size = need + sizeof(arena) > unit ? need + sizeof(arena) : unit;
    arena *a = crawl__mmap(size, PROT_READ | PROT_WRITE, 0);
    if (a == MAP_FAILED)
        return NULL;
    if (!first)
        madvise(a, size, MADV_HUGEPAGE); /* advisory */
    atomic_init(&a->used, 0);
    a->size = size - sizeof(arena);
    return a;
}

static void *arena_alloc(size_t bytes)
{
    bytes = (bytes + 15) & ~(size_t)15;
    if (atomic_fetch_add(&bytes_used, bytes) + bytes >
        atomic_load_explicit(&budget, memory_order_relaxed)) {
        atomic_fetch_sub(&bytes_used, bytes);
        return NULL;
    }
    for (;;) {
        arena *a = atomic_load(&current_arena);
        if (a) {
            size_t off = atomic_fetch_add(&a->used, bytes);
            if (off + bytes <= a->size)
                return a->data + off;
        }
        arena *fresh = new_arena(bytes, a == NULL);
        if (!fresh) {
            atomic_fetch_sub(&bytes_used, bytes);
            return NULL;
        }
        size_t off = atomic_fetch_add(&fresh->used, bytes);
        if (atomic_compare_exchange_strong(&current_arena, &a, fresh))
            return fresh->data + off;
        /* another thread installed an arena first: ours stays unused */
        crawl__munmap(fresh, fresh->size + sizeof(arena));
    }
}

/* ---- ids ------------------------------------------------------------------- */
#define PAGE_BITS 16
#define PAGE_IDS (1u << PAGE_BITS)
#define ID_PAGES (1u << (32 - PAGE_BITS))
typedef _Atomic(_Atomic(node *) *) id_page_slot;
static _Atomic(void *) id_page_table;     /* ID_PAGES slots, mmap'ed on first use */
static atomic_uint next_id = 1;

static id_page_slot *id_pages_get(void)
{
    return lazy_table(&id_page_table, ID_PAGES * sizeof(id_page_slot));
}

static int set_id(uint32_t id, node *nd)
{
    id_page_slot *pages = id_pages_get();
    if (!pages)
        return -1;
    id_page_slot *slot = &pages[id >> PAGE_BITS];
    _Atomic(node *) *page = atomic_load(slot);
    if (!page) {
        _Atomic(node *) *fresh = crawl__mmap(PAGE_IDS * sizeof(node *), PROT_READ | PROT_WRITE, 0);
        if (fresh == MAP_FAILED)
            return -1;
        if (atomic_compare_exchange_strong(slot, &page, fresh))
            page = fresh;
        else
            crawl__munmap(fresh, PAGE_IDS * sizeof(node *));
    }
    atomic_store_explicit(&page[id & (PAGE_IDS - 1)], nd, memory_order_release);
    return 0;
}

/* ---- the API ----------------------------------------------------------------- */

/* Touch every cache line of a node at once: with many traces stored the
 * node is rarely cached, and one miss after another through its header and
 * frames is what separates a lookup from the bare hash-and-probe bound. */
static inline void prefetch_node(const node *nd)
{
    /* Five lines: the header and the first 37 frames, more than most
     * traces have. A prefetch past a shorter node's end never faults. */
    const char *p = (const char *)nd;
    for (int i = 0; i < 5; i++)
        __builtin_prefetch(p + 64 * i);
}

/* a[0..n) == b[0..n): a loop the compiler vectorizes (for the short
 * traces most puts compare, the call to memcmp cost more than the compare) */
static inline int same_words(const uintptr_t *a, const uintptr_t *b, unsigned n)
{
    uintptr_t diff = 0;
    for (unsigned i = 0; i < n; i++)
        diff |= a[i] ^ b[i];
    return diff == 0;
}

static node *find(node *from, node *until, uint64_t h, const uintptr_t *frames, unsigned n)
{
    for (node *nd = from; nd != until; nd = nd->next) {
        prefetch_node(nd);
        if (nd->hash == h && nd->n == n && same_words(nd->frames, frames, n))
            return nd;
    }
    return NULL;
}

/* A thread's recent traces, by a cheap fingerprint: a program that
 * allocates from a few call paths in turn finds its trace without hashing
 * it whole or walking a bucket. Only a hint: a node found here is compared
 * in full before its id is used, and a slot is one pointer stored whole,
 * so a signal handler's put between a load and a store leaves at worst a
 * hint that misses. */
#define MEMO_BITS 4
#define MEMO_SLOTS (1u << MEMO_BITS)
static __thread node *memo[MEMO_SLOTS] __attribute__((tls_model("initial-exec")));

static inline unsigned memo_slot(const uintptr_t *frames, unsigned n)
{
    uint64_t f = frames[n > 1] ^ (frames[n > 2 ? 2 : 0] << 7) ^ (frames[n / 2] << 17) ^
                 (frames[n * 3 / 4] << 29) ^ ((uint64_t)n << 56);
    return (unsigned)((f * 0x9E3779B97F4A7C15u) >> (64 - MEMO_BITS));
}

static inline uint32_t remember(unsigned slot, node *nd)
{
    memo[slot] = nd;
    return nd->id;
}

uint32_t crawl_depot_put(const uintptr_t *frames, unsigned n)
{
    if (!frames || n == 0 || n > CRAWL_DEPOT_MAX_FRAMES)
        return 0;
    unsigned ms = memo_slot(frames, n);
    node *seen_here = memo[ms];
    if (seen_here && seen_here->n == n && same_words(seen_here->frames, frames, n))
        return seen_here->id;
    uint64_t h = XXH3_64bits(frames, n * sizeof *frames);
    _Atomic(node *) *table = buckets_get();
    if (!table) {
        atomic_fetch_add(&drops, 1);
        return 0;
    }
    _Atomic(node *) *bucket = &table[h & (BUCKETS - 1)];
    node *head = atomic_load_explicit(bucket, memory_order_acquire);
    node *hit = find(head, NULL, h, frames, n);
    if (hit)
        return remember(ms, hit);

    node *nd = arena_alloc(sizeof *nd + n * sizeof *frames);
    uint32_t id = nd ? atomic_fetch_add(&next_id, 1) : 0;
    if (!nd || id == 0) {
        atomic_fetch_add(&drops, 1);
        return 0;
    }
    /* filled before anyone can reach it, through the id table or a bucket */
    nd->hash = h;
    nd->n = n;
    nd->id = id;
    memcpy(nd->frames, frames, n * sizeof *frames);
    if (set_id(id, nd) != 0) {
        atomic_fetch_add(&drops, 1);
        return 0;
    }
    for (;;) {
        nd->next = head;
        node *seen = head;
        if (atomic_compare_exchange_weak_explicit(bucket, &head, nd, memory_order_release,
                                                  memory_order_acquire)) {
            atomic_fetch_add(&stored, 1);
            return remember(ms, nd);
        }
        /* head moved: did the newcomers bring this very trace? */
        hit = find(head, seen, h, frames, n);
        if (hit)
            return remember(ms, hit);    /* (our id still resolves to an equal trace) */
    }
}

unsigned crawl_depot_get(uint32_t id, const uintptr_t **frames)
{
    id_page_slot *pages = atomic_load_explicit(&id_page_table, memory_order_acquire);
    if (id == 0 || !pages)
        return 0;
    _Atomic(node *) *page = atomic_load(&pages[id >> PAGE_BITS]);
    node *nd = page ? atomic_load_explicit(&page[id & (PAGE_IDS - 1)], memory_order_acquire)
                    : NULL;
    if (!nd)
        return 0;
    if (frames)
        *frames = nd->frames;
    return nd->n;
}

void crawl_depot_get_stats(crawl_depot_stats *out)
{
    out->ids = atomic_load(&stored);
    out->bytes = atomic_load(&bytes_used);
    out->drops = atomic_load(&drops);
    out->budget = atomic_load_explicit(&budget, memory_order_relaxed);
}

void san_depot_set_budget(size_t bytes)
{
    atomic_store_explicit(&budget, bytes, memory_order_relaxed);
}
