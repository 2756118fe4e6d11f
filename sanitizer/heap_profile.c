/* Heap profiles: the live table of recorded allocations.
 *
 * 64 shards chosen by the pointer's hash, each an open-addressed table
 * (linear probing, deletion by moving entries back) under its own lock,
 * grown by mmap: a hook
 * takes one uncontended lock and never calls malloc. The mixed stack is
 * captured before the lock (a first walk through a module compiles its CFI
 * and allocates: those allocations come back here and are dropped by the
 * per-thread "inside" flag, as are any made while crawl holds one of its
 * own locks). */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/single_threaded.h>
#include <time.h>
#include <unistd.h>

#include <crawl/guarded.h>
#include <crawl/heap_profile.h>

#include "sanitizer/heap_output.h"
#include "sanitizer/heap_profile_internal.h"
#include "sanitizer/neg_log.h"

CRAWL_API struct crawl__hp_fast crawl__hp;
CRAWL_API __thread long crawl__hp_countdown __attribute__((tls_model("initial-exec")));
CRAWL_API int crawl__hook_kind;          /* CRAWL__HOOK_GPA (0) until the options are read */
CRAWL_API int crawl__free_kind;          /* CRAWL__FREE_* bits, set (FREE_ALL also cleared) */

typedef struct shard {
    atomic_int lock;                    /* shard_lock */
    hp_entry *t;                        /* cap entries, mmap'ed */
    size_t cap, live;
    size_t live_bytes;
    uint32_t made;                      /* entries made (their stamps) */
    int stuck;                          /* its filter slots all stuck (filter_saturate) */
} __attribute__((aligned(64))) shard;  /* a cache line each */

static shard shards[HP_SHARDS];
static atomic_ulong dropped;
static atomic_ulong sample_bytes;       /* heap_sample_bytes when started */
static __thread int inside __attribute__((tls_model("initial-exec")));
static __thread int counting __attribute__((tls_model("initial-exec")));   /* countdown set */
static __thread uint64_t rng __attribute__((tls_model("initial-exec")));

/* The tables hold each chunk's address complemented (its key; 0: an
 * empty slot), and hash and compare keys: a thread that a leak check's
 * walk signal stops in the middle of a probe holds, in its registers and
 * (in a -O0 build) its live frame, the key it was comparing, and the
 * check takes other threads' registers and stacks for roots. A raw
 * address there, another chunk's, hid that chunk's leak (one run in 100
 * of test_tables_grown_during_check_hide_no_leak in the debug build). The
 * only address a table operation holds raw is the one it was given (and
 * hp_snapshot's for the leak check, in the checking thread, writes them
 * all into its own mapping, which the check skips). */
static inline uintptr_t key_of(uintptr_t ptr) { return ~ptr; }

/* An address's hash, for its home slot in its shard's table: (address >>
 * 4) * 2^64/phi. Where only the key is at hand (a rehash, a deletion's
 * moves), hash_key makes the same from it. The shard is not chosen from
 * it but from the filter's slot (shard_of). */
static inline uint64_t hash_ptr(uintptr_t ptr)
{
    return (uint64_t)(ptr >> 4) * 0x9e3779b97f4a7c15ULL;
}

/* hash_ptr(~k), made without the raw address ever in a register (address
 * >> 4 is the key >> 4 with its 60 bits flipped) */
static inline uint64_t hash_key(uintptr_t k)
{
    uintptr_t high = k >> 4;
    __asm__("" : "+r"(high));            /* (not folded into ~k >> 4: ~k is the address) */
    return (uint64_t)(high ^ (UINTPTR_MAX >> 4)) * 0x9e3779b97f4a7c15ULL;
}

/* crawl__hp_filter_slot of the chunk whose key is k, made without its
 * address (the same product, its top 14 bits) */
static inline unsigned filter_slot_of_key(uintptr_t k) { return (unsigned)(hash_key(k) >> 50); }

/* A hash's slot in a table of cap entries (a power of 2): middle bits of
 * the product, which every bit of the pointer reaches (its low bits would
 * follow the pointer's own: page-aligned chunks would share one slot), and
 * apart from the top bits that choose the shard. */
static inline size_t home_of(uint64_t h, size_t cap)
{
    return (size_t)(h >> 24) & (cap - 1);
}

/* A shard's lock: a test-and-set lock that yields while it waits. A hook
 * holds it for one probe of one table (a rehash at worst), so the
 * uncontended case is what counts: one atomic exchange and one store,
 * where pthread_mutex_lock/unlock cost a hundred instructions a pair.
 * Nothing is ever taken inside it. */
static inline void shard_lock(atomic_int *l)
{
    /* No other thread exists (glibc's flag, as libstdc++ and glibc's own
     * malloc use it): none can hold or want the lock, and none can start
     * before this thread, inside the lock, creates it; a plain store then
     * takes it without the atomic exchange's 20 cycles. */
    if (__libc_single_threaded) {
        atomic_store_explicit(l, 1, memory_order_relaxed);
        return;
    }
    while (atomic_exchange_explicit(l, 1, memory_order_acquire)) {
        while (atomic_load_explicit(l, memory_order_relaxed))
            sched_yield();
    }
}

static inline void shard_unlock(atomic_int *l)
{
    atomic_store_explicit(l, 0, memory_order_release);
}

/* The free fast path's filter: a count of recorded pointers per hash (a
 * count that reaches 255 stays there: frees then always look), and a bit
 * per hash that says "not 0", the only part a free reads. A slot's count
 * and its bits word belong to one shard (slot and shard are the top bits
 * of one hash), and change under that shard's lock only. A free reads its
 * pointer's bit after the store its allocation made, in program order (or
 * after the program's own hand-over between threads). */
#define SLOT_SHARD(slot) ((slot) >> (14 - HP_SHARD_BITS))
#define SHARD_SLOTS (1u << (14 - HP_SHARD_BITS))   /* the slots a shard owns */
/* a bits word (64 slots) must lie inside one shard */
_Static_assert(HP_SHARD_BITS <= 14 - 6, "a filter word would span shards");

/* The shard of the chunk at ptr: the one that owns its filter slot, whose
 * lock guards that slot's count and bits word. (Chosen from the key's own
 * hash, 648109f put the pointers of one filter word, for a word in four,
 * in two shards, whose threads then wrote the word at once: a lost bit
 * let a free skip its entry, and a later allocation at that address
 * replaced it: test_threads_and_fork failed 1 run in 16.) */
static inline shard *shard_of(uintptr_t ptr)
{
    return &shards[SLOT_SHARD(crawl__hp_filter_slot((const void *)ptr))];
}

/* A pointer put in the filter: the bit of crawl__free_kind its free needs
 * (FREE_ALIGNED for one the preload placed where its free tells it,
 * placed; FREE_FILTER for any other, at a tellable address too: the
 * preload's free tells a placed sample by its chunk's shape as well),
 * set before the filter's bit, also when its slot's count is stuck (a
 * free of an unaligned pointer in a stuck slot went straight to glibc) */
static void note_free_kind(uintptr_t ptr, int placed)
{
    int kind = placed && crawl__hp_addr_tellable(ptr) ? CRAWL__FREE_ALIGNED : CRAWL__FREE_FILTER;
    if (!(__atomic_load_n(&crawl__free_kind, __ATOMIC_RELAXED) & kind))
        san_free_kind_or(kind);
}

static void filter_set(unsigned slot, unsigned char count)
{
    uint64_t *w = &crawl__hp.bits[slot / 64], m = (uint64_t)1 << (slot % 64);
    uint64_t was = __atomic_load_n(w, __ATOMIC_RELAXED);
    __atomic_store_n(&crawl__hp.counts[slot], count, __ATOMIC_RELAXED);
    if (!!(was & m) != (count != 0))
        __atomic_store_n(w, was ^ m, __ATOMIC_RELAXED);
}

/* Every slot stuck (filter_saturate), until filter_rebuild: the filter
 * is not kept. Changed under filter_lock; each shard's own flag (stuck)
 * under the shard's lock, which filter_add holds. */
static atomic_int saturated;
static atomic_int filter_lock;

/* delta +1 or -1; an entry added has its free kind noted before
 * (insert_as) */
static void filter_add(uintptr_t ptr, int delta)   /* under ptr's shard lock */
{
    if (shard_of(ptr)->stuck)
        return;
    unsigned slot = crawl__hp_filter_slot((const void *)ptr);
    unsigned char v = __atomic_load_n(&crawl__hp.counts[slot], __ATOMIC_RELAXED);
    if (v == 255 || (v == 0 && delta < 0))
        return;
    filter_set(slot, (unsigned char)(v + delta));
}

/* Whole process, every allocation recorded (libcrawl-preload.so): almost
 * every free is of a recorded chunk, so the filter would pass nearly all
 * of them, and keeping it cost each record and free a count and a bit
 * (paired, every stack: 4.31x glibc with it, 4.02x without). Every slot
 * is stuck instead, each shard's under its lock, while every allocation
 * is recorded: frees of any pointer look in the table, also the inline
 * hooks compiled against an older crawl, which read only the bits. Once
 * the profile no longer records every allocation (stopped, or sampled),
 * the preload's next free that looks up a pointer has the filter counted
 * again from the table (filter_rebuild). */
static int whole_process;

int crawl__hp_whole_process(void)
{
    int was = 0;
    return __atomic_compare_exchange_n(&whole_process, &was, 1, 0, __ATOMIC_SEQ_CST,
                                       __ATOMIC_SEQ_CST);
}

/* The pointers stuck in the filter for good (crawl__hp_filter_stick: the
 * preload's bootstrap blocks, at most 64), stuck again after a rebuild.
 * More than it holds (never, from the preload): no rebuild. */
#define STICKS 128
static const void *_Atomic sticks[STICKS];
static atomic_uint stick_count;

static void filter_saturate(void)
{
    shard_lock(&filter_lock);
    if (atomic_load(&saturated)) {
        shard_unlock(&filter_lock);
        return;
    }
    san_free_kind_or(CRAWL__FREE_FILTER | CRAWL__FREE_ALIGNED);   /* (before the bits) */
    for (unsigned i = 0; i < HP_SHARDS; i++) {
        shard_lock(&shards[i].lock);
        for (unsigned slot = i * SHARD_SLOTS; slot < (i + 1) * SHARD_SLOTS; slot++)
            __atomic_store_n(&crawl__hp.counts[slot], 255, __ATOMIC_RELAXED);
        for (unsigned w = i * SHARD_SLOTS / 64; w < (i + 1) * SHARD_SLOTS / 64; w++)
            __atomic_store_n(&crawl__hp.bits[w], ~(uint64_t)0, __ATOMIC_RELAXED);
        shards[i].stuck = 1;
        shard_unlock(&shards[i].lock);
    }
    atomic_store(&saturated, 1);
    san_free_kind_or(CRAWL__FREE_ALL);   /* (after the bits) */
    shard_unlock(&filter_lock);
}

/* The filter counted again from the tables, shard by shard under each
 * one's lock (a record or free meanwhile counts in a shard once it is
 * counted), the stuck pointers stuck again; crawl__hp_filter_unstick then
 * takes FREE_ALL off crawl__free_kind: a free tests the filter again. A
 * shard's counts are made apart and then stored, so that a slot's bit
 * goes from 1 (stuck) to what it is, never through 0 while the slot holds
 * a pointer (an inline hook reads the bits without the lock). Slots are
 * computed from the keys, without the addresses (filter_slot_of_key). */
static void filter_rebuild(void)
{
    for (unsigned i = 0; i < HP_SHARDS; i++) {
        shard *s = &shards[i];
        unsigned char c[SHARD_SLOTS] = {0};
        shard_lock(&s->lock);
        for (size_t j = 0; j < s->cap; j++)
            if (s->t[j].ptr) {
                unsigned slot = filter_slot_of_key(s->t[j].ptr) % SHARD_SLOTS;
                if (c[slot] != 255)
                    c[slot]++;
            }
        /* (each stick counted under its shard's lock, so all of this
         * shard's are read here) */
        unsigned nsticks = atomic_load(&stick_count);
        for (unsigned k = 0; k < nsticks && k < STICKS; k++) {
            /* (NULL: another shard's stick, counted and not yet stored) */
            const void *p = atomic_load_explicit(&sticks[k], memory_order_acquire);
            unsigned slot = crawl__hp_filter_slot(p);
            if (p && SLOT_SHARD(slot) == i)
                c[slot % SHARD_SLOTS] = 255;
        }
        for (unsigned slot = 0; slot < SHARD_SLOTS; slot++)
            filter_set(i * SHARD_SLOTS + slot, c[slot]);
        s->stuck = 0;
        shard_unlock(&s->lock);
    }
}

/* The filter is stuck whole, no longer needs to be (the profile does not
 * record every allocation), and can be counted again (its stuck pointers
 * all kept) */
static int unstick_due(void)
{
    return atomic_load(&saturated) && __atomic_load_n(&crawl__hp.mode, __ATOMIC_ACQUIRE) != 1 &&
           atomic_load(&stick_count) <= STICKS;
}

void crawl__hp_filter_unstick(void)
{
    if (!unstick_due())
        return;
    /* (held: a rebuild or a start at it, maybe in the thread this free
     * interrupts; this free looks its pointer up, as FREE_ALL says) */
    if (atomic_exchange_explicit(&filter_lock, 1, memory_order_acquire))
        return;
    /* (a start that records every allocation saturates under the lock,
     * or finds it saturated, before it sets the mode: one that set it
     * during the rebuild records with the filter counted, as a profile
     * the program starts itself does, which is slower, not wrong) */
    if (unstick_due()) {
        filter_rebuild();
        atomic_store(&saturated, 0);
        san_free_kind_clear(CRAWL__FREE_ALL);   /* (after the bits) */
    }
    shard_unlock(&filter_lock);
}

void crawl__hp_filter_stick(const void *p)
{
    unsigned slot = crawl__hp_filter_slot(p);
    shard *s = &shards[SLOT_SHARD(slot)];
    shard_lock(&s->lock);
    /* (placed: true of the preload's bootstrap blocks alone, which its
     * free tells apart by address; another pointer stuck here reaches
     * glibc's free, as before) */
    note_free_kind((uintptr_t)p, 1);
    filter_set(slot, 255);
    unsigned k = atomic_fetch_add(&stick_count, 1);
    if (k < STICKS)
        atomic_store_explicit(&sticks[k], p, memory_order_release);
    shard_unlock(&s->lock);
}

/* The first table of a shard: 16 entries (512 bytes), all 64 of them in
 * one 32 KiB block of crawl's own data, so that a sampled profile's few
 * live samples sit in 8 pages instead of a mapped page per shard (perf:
 * the load of a sample's home slot was half of what a sample cost, most
 * of it a TLB miss). A table doubles when half full, into a mapping of
 * its own; the first table keeps stale copies, and the leak check skips
 * the whole block (hp_table_ranges). Small tables keep a heap of a few
 * thousand chunks in the cache. */
#define SHARD_FIRST_CAP 16
static hp_entry first_tables[HP_SHARDS][SHARD_FIRST_CAP] __attribute__((aligned(64)));

/* 1 if s's table has grown out of its first table into a mapping of its own */
static int table_mapped(const shard *s) { return s->t && s->t != first_tables[s - shards]; }

/* Rehash s into a table of cap entries (under its lock). 0 or -ENOMEM. */
static int rehash(shard *s, size_t cap)
{
    hp_entry *t = crawl__mmap(cap * sizeof *t, PROT_READ | PROT_WRITE, 0);
    if (t == MAP_FAILED)
        return -ENOMEM;
    for (size_t i = 0; i < s->cap; i++) {
        const hp_entry *e = &s->t[i];
        if (e->ptr == 0)
            continue;
        size_t j = home_of(hash_key(e->ptr), cap);
        while (t[j].ptr)
            j = (j + 1) & (cap - 1);
        t[j] = *e;
    }
    if (table_mapped(s))                 /* (the leak check skips first_tables) */
        crawl__munmap(s->t, s->cap * sizeof *s->t);
    s->t = t, s->cap = cap;
    return 0;
}

/* Leak checks running (hp_tables_freeze): the tables do not grow. A table
 * grown meanwhile would be a mapping the check did not list to skip, or
 * one at an address its list of the process's mappings, read a moment
 * before, gave to something else (an old table, a freed chunk): scanned
 * as the program's memory, its copies of the chunks' addresses would hide
 * leaks. A table then fills to 7/8 instead of 1/2 (longer probes), and an
 * allocation that finds it that full is not recorded (counted as
 * dropped). Waiting instead could deadlock: a thread recording inside
 * dlopen holds the loader's lock, which the check takes too. */
static atomic_int frozen;

/* Whether s must grow before one more entry: 1 grow, 0 no, -1 full and
 * frozen (the entry is refused) */
static int full(const shard *s)
{
    if ((s->live + 1) * 2 <= s->cap)
        return 0;
    if (atomic_load_explicit(&frozen, memory_order_relaxed) <= 0)
        return 1;
    return (s->live + 1) * 8 > s->cap * 7 ? -1 : 0;
}

void hp_tables_freeze(int on)
{
    atomic_fetch_add_explicit(&frozen, on ? 1 : -1, memory_order_seq_cst);
}

/* flags with the next stamp of s (under its lock), or as they are (keep) */
static uint32_t stamped(shard *s, uint32_t flags, int keep)
{
    return keep ? flags : (flags & HP_FLAG_BITS) | ++s->made * HP_STAMP_ONE;
}

/* e: its ptr the chunk's address (stored as its key); with a new stamp,
 * or (keep_stamp) the one e's flags have: an entry put back as it was */
static int insert_as(const hp_entry *e, int keep_stamp)
{
    if (!e->ptr)                         /* (its key would be a real one: never recorded) */
        return 0;
    uintptr_t k = key_of(e->ptr);
    uint64_t h = hash_ptr(e->ptr);
    int placed = (e->flags & HP_PLACED) != 0;
    shard *s = shard_of(e->ptr);
    shard_lock(&s->lock);
    if (!s->t)
        s->t = first_tables[s - shards], s->cap = SHARD_FIRST_CAP;
    size_t j = home_of(h, s->cap);
    for (;; j = (j + 1) & (s->cap - 1)) {
        uintptr_t q = s->t[j].ptr;
        if (q == k) {                    /* recorded twice (a free we did not see): replace */
            if (keep_stamp) {            /* (put back over a newer record, a racing free and
                                            allocation: the newer stays) */
                shard_unlock(&s->lock);
                return 0;
            }
            /* (the new record's kind too: a placed sample replaced by a
             * record of a chunk glibc reshaped there, through its own
             * realloc, took the fast path to glibc) */
            note_free_kind(e->ptr, placed);
            s->live_bytes -= s->t[j].size;
            s->t[j] = *e;
            s->t[j].ptr = k;
            s->t[j].flags = stamped(s, e->flags, 0);
            s->live_bytes += e->size;
            shard_unlock(&s->lock);
            return 0;
        }
        if (q == 0)
            break;
    }
    /* a new entry: (a table always has an empty slot, so the probe ended) */
    int grow = full(s);
    if (grow < 0 || (grow && rehash(s, s->cap * 2) != 0)) {
        shard_unlock(&s->lock);
        return -ENOMEM;
    }
    if (grow)
        for (j = home_of(h, s->cap); s->t[j].ptr; j = (j + 1) & (s->cap - 1))
            ;
    note_free_kind(e->ptr, placed);      /* (before the filter's bit) */
    filter_add(e->ptr, 1);
    s->t[j] = *e;
    s->t[j].ptr = k;
    s->t[j].flags = stamped(s, e->flags, keep_stamp);
    s->live++;
    s->live_bytes += e->size;
    shard_unlock(&s->lock);
    return 0;
}

/* Take slot j out of s's run (under its lock): the entries after it that
 * probed past j move back (linear probing's deletion without tombstones,
 * Knuth's algorithm R), so every probe still ends at the first empty slot
 * and runs stay as short as the live entries make them. */
static void remove_at(shard *s, size_t j)
{
    size_t mask = s->cap - 1;
    for (size_t k = j;;) {
        s->t[j].ptr = 0;
        for (;;) {
            k = (k + 1) & mask;
            uintptr_t q = s->t[k].ptr;
            if (q == 0)
                return;
            size_t home = home_of(hash_key(q), s->cap);
            /* q stays if its home lies cyclically in (j, k] */
            if (j <= k ? (j < home && home <= k) : (j < home || home <= k))
                continue;
            s->t[j] = s->t[k];
            j = k;
            break;
        }
    }
}

/* ptr's entry taken out (copied to *out when out is not NULL, with ptr
 * and its whole flags): its flags' own bits (HP_FLAG_BITS), or -1 if it
 * had none */
static int erase_into(uintptr_t ptr, hp_entry *out)
{
    uintptr_t k = key_of(ptr);
    uint64_t h = hash_ptr(ptr);
    shard *s = shard_of(ptr);
    int flags = -1;
    shard_lock(&s->lock);
    if (s->cap) {
        for (size_t j = home_of(h, s->cap);; j = (j + 1) & (s->cap - 1)) {
            uintptr_t q = s->t[j].ptr;
            if (q == 0)
                break;
            if (q == k) {
                flags = (int)(s->t[j].flags & HP_FLAG_BITS);
                if (out) {
                    *out = s->t[j];
                    out->ptr = ptr;
                }
                filter_add(ptr, -1);
                s->live--;
                s->live_bytes -= s->t[j].size;
                remove_at(s, j);
                break;
            }
        }
    }
    shard_unlock(&s->lock);
    return flags;
}

static int insert(const hp_entry *e) { return insert_as(e, 0); }

static int erase(uintptr_t ptr) { return erase_into(ptr, NULL); }

int hp_still_recorded(const hp_entry *e)
{
    uintptr_t k = key_of(e->ptr);
    uint64_t h = hash_ptr(e->ptr);
    shard *s = shard_of(e->ptr);
    int same = 0;
    shard_lock(&s->lock);
    if (s->cap)
        for (size_t j = home_of(h, s->cap); s->t[j].ptr; j = (j + 1) & (s->cap - 1))
            if (s->t[j].ptr == k) {
                /* (the stamp wraps after 2^24 entries made in the shard:
                 * the rest of the entry too) */
                const hp_entry *t = &s->t[j];
                same = t->flags == e->flags && t->size == e->size && t->stack == e->stack &&
                       t->caller == e->caller;
                break;
            }
    shard_unlock(&s->lock);
    return same;
}

void crawl__hp_take(const void *p, crawl__hp_saved *out)
{
    out->had = 0;
    hp_entry e;
    if (crawl__hp_may_hold(p) && erase_into((uintptr_t)p, &e) >= 0)
        *out = (crawl__hp_saved){.ptr = e.ptr, .caller = e.caller, .size = e.size,
                                 .stack = e.stack, .flags = e.flags, .had = 1};
}

void crawl__hp_put_back(const crawl__hp_saved *saved)
{
    if (!saved->had)
        return;
    hp_entry e = {.ptr = saved->ptr, .size = saved->size, .caller = saved->caller,
                  .stack = saved->stack, .flags = saved->flags};
    if (insert_as(&e, 1) != 0)
        atomic_fetch_add_explicit(&dropped, 1, memory_order_relaxed);
}

/* ---- sampling by bytes (tcmalloc's heap sampler) -------------------------------------- */

static uint64_t next_random(void)
{
    if (!rng) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        rng = ((uint64_t)ts.tv_nsec << 20) ^ (uint64_t)(uintptr_t)&ts ^ ((uint64_t)gettid() | 1);
    }
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return rng;
}

/* Bytes until the next sample: exponential with mean n, so every byte is
 * equally likely to be the one sampled. */
static long next_interval(unsigned long n)
{
    double u = ((double)(next_random() >> 11) + 0.5) / 9007199254740992.0;   /* (0, 1]: 1 rounds up */
    double x = crawl__neg_log(u) * (double)n;
    return x < 1 ? 1 : x > 1e15 ? (long)1e15 : (long)x;
}

/* A sample's insert touches lines that the program's own work has pushed
 * out of the cache since the last one (60 to 80 us between samples at 512
 * KiB in bench/heap_profile): its shard, the home slot in the shard's
 * first table, and the free filter's count and bits. Asked for before the
 * stack walk, they arrive while it runs instead of one after another
 * after it (perf: the shard's line and the slot were nine tenths of
 * record's own time). A table that has grown is not in first_tables:
 * that prefetch is then wasted, never wrong. Only for samples: recording
 * every allocation, these lines are warm. */
static inline void insert_prefetch(uintptr_t ptr)
{
    uint64_t h = hash_ptr(ptr);
    unsigned slot = crawl__hp_filter_slot((const void *)ptr);
    size_t i = SLOT_SHARD(slot);
    __builtin_prefetch(&shards[i], 1);
    __builtin_prefetch(&first_tables[i][home_of(h, SHARD_FIRST_CAP)], 1);
    __builtin_prefetch(&crawl__hp.counts[slot], 1);
    __builtin_prefetch(&crawl__hp.bits[slot / 64], 1);
}

/* The stack from `from`'s caller as the options say (its depth; CFI or
 * frame pointers), inside crawl */
static uint32_t capture_as_told(const san_options *o, const crawl_regs *from)
{
    return san_capture_at(from, o->malloc_context_size, o->heap_stack_fast ? CRAWL_WALK_FAST : 0);
}

/* Record p with a stack from `from` (the hook's caller's frame). */
static void record(const void *p, size_t size, uintptr_t caller, const crawl_regs *from,
                   uint32_t flags)
{
    int was_errno = errno;               /* a hook leaves errno as the allocator set it */
    int was = hp_inside_enter();
    const san_options *o = san_opts();
    int sample = (flags & HP_SAMPLED) != 0;
    hp_entry e = {.ptr = (uintptr_t)p, .size = size, .caller = caller, .flags = flags};
    if (sample)
        insert_prefetch(e.ptr);
    if (sample || size >= o->heap_stack_min_size)   /* (inside already) */
        e.stack = capture_as_told(o, from);
    if (insert(&e) != 0)
        atomic_fetch_add_explicit(&dropped, 1, memory_order_relaxed);
    hp_inside_leave(was);
    errno = was_errno;
}

/* Sampled mode, the countdown ran out: 1 if this allocation is a sample.
 * A thread's first time here only starts its count. */
static int take_sample(void)
{
    unsigned long n = atomic_load_explicit(&sample_bytes, memory_order_relaxed);
    crawl__hp_countdown = next_interval(n ? n : 1);
    if (!counting) {
        counting = 1;
        return 0;
    }
    return 1;
}

void crawl__heap_profile_slow_from(const void *p, size_t size, uintptr_t caller,
                                   const crawl_regs *from)
{
    if (inside || crawl__busy)
        return;                          /* crawl's own, not the program's */
    int sample = crawl__hp.sampled;
    if (sample && !take_sample())
        return;
    record(p, size, caller, from, sample ? HP_SAMPLED : 0);
}

void crawl__heap_profile_slow(const void *p, size_t size, uintptr_t caller)
{
    crawl_regs here;
    crawl_capture_regs(&here);
    crawl__heap_profile_slow_from(p, size, caller, &here);
    CRAWL__NO_TAIL(size);
}

/* Samples are made aligned (libcrawl-preload.so) only when they are at
 * least this many bytes apart on average: the alignment costs up to
 * CRAWL__HP_ALIGN bytes of glibc's heap around each (1.6% here at most) */
#define ALIGNED_SAMPLES_FROM (64 * CRAWL__HP_ALIGN)

int crawl__hp_decide(size_t size)
{
    if (__atomic_load_n(&crawl__hp.on, __ATOMIC_RELAXED) != 1 || inside || crawl__busy)
        return 0;
    if (!crawl__hp.sampled)
        return CRAWL__HP_RECORD;
    crawl__hp_countdown = crawl__hp_countdown_less(crawl__hp_countdown, size);
    if (crawl__hp_countdown > 0 || !take_sample())
        return 0;
    return atomic_load_explicit(&sample_bytes, memory_order_relaxed) >= ALIGNED_SAMPLES_FROM
               ? CRAWL__HP_SAMPLE_ALIGNED
               : CRAWL__HP_SAMPLE;
}

void crawl__hp_record_from(const void *p, size_t size, uintptr_t caller, const crawl_regs *from,
                           int how)
{
    if (p && how && !inside && !crawl__busy)
        record(p, size, caller, from,
               how == CRAWL__HP_RECORD           ? 0
               : how == CRAWL__HP_SAMPLE_ALIGNED ? HP_SAMPLED | HP_PLACED
                                                 : HP_SAMPLED);
}

void crawl__hp_record(const void *p, size_t size, uintptr_t caller, int how)
{
    crawl_regs here;
    crawl_capture_regs(&here);
    crawl__hp_record_from(p, size, caller, &here, how);
    CRAWL__NO_TAIL(size);
}

void crawl_heap_profile_alloc(const void *p, size_t size, uintptr_t caller)
{
    int how = p ? crawl__hp_decide(size) : 0;
    if (!how)
        return;
    if (!caller)
        caller = (uintptr_t)__builtin_return_address(0);
    crawl_regs here;
    crawl_capture_regs(&here);
    record(p, size, caller, &here, how != CRAWL__HP_RECORD ? HP_SAMPLED : 0);   /* (never placed) */
    CRAWL__NO_TAIL(size);
}

void crawl_heap_profile_free(const void *p)
{
    if (p)
        erase((uintptr_t)p);             /* takes a shard lock only: safe at any depth */
}

int crawl__hp_forget_sample(const void *p)
{
    if (!p)
        return 0;
    int flags = erase((uintptr_t)p);
    return flags >= 0 && (flags & HP_SAMPLED);
}

int crawl_heap_profile_start(void)
{
    unsigned n = san_opts()->heap_sample_bytes;
    if (n && san_opts()->leak_check) {
        /* the leak check needs every chunk in the table (one reachable
         * only through a chunk not sampled would be reported) */
        static atomic_int told;
        if (!atomic_exchange(&told, 1)) {
            char line[120];
            int len = snprintf(line, sizeof line,
                               "crawl: leak_check=1 records every allocation: "
                               "heap_sample_bytes=%u is ignored\n", n);
            crawl__write_all(STDERR_FILENO, line, (size_t)len);
        }
        n = 0;
    }
    if (n == 0 && whole_process)
        filter_saturate();
    atomic_store(&sample_bytes, n);
    if (n) {
        /* the caller's count drawn for this interval: what is left of a
         * count drawn for another would delay its first sample, by up to
         * that interval (the rest of an exponential draw is one of the
         * same mean, so with the same interval this changes nothing).
         * Other threads' counts go on: README, Limits. */
        crawl__hp_countdown = next_interval(n);
        counting = 1;
    }
    __atomic_store_n(&crawl__hp.sampled, n != 0, __ATOMIC_RELAXED);
    __atomic_store_n(&crawl__hp.mmap, san_opts()->heap_profile_mmap != 0, __ATOMIC_RELAXED);
    __atomic_store_n(&crawl__hp.on, 1, __ATOMIC_RELEASE);
    __atomic_store_n(&crawl__hp.mode, n != 0 ? 2 : 1, __ATOMIC_RELEASE);
    san_hook_kind_update();
    return 0;
}

void crawl_heap_profile_stop(void)
{
    __atomic_store_n(&crawl__hp.mode, 0, __ATOMIC_RELEASE);
    if (__atomic_load_n(&crawl__hp.on, __ATOMIC_RELAXED))
        __atomic_store_n(&crawl__hp.on, 2, __ATOMIC_RELEASE);
    san_hook_kind_update();
}

/* ---- what the preload's malloc does (crawl__hook_kind) ---------------------------------- */

/* The preload's copies of the two words (crawl__hp_mirror_kinds): one
 * pair for each copy of libcrawl-preload.so in the process (a program
 * that also dlopens a copy of it by another path has two: each must see
 * every change, or its free hands the pool's chunks to glibc). A slot is
 * claimed by its free word's pointer (compare-and-swap), its hook word's
 * stored after; writers skip what is not there yet. */
#define KIND_COPIES 8
static struct {
    int *hook, *free;
} copies[KIND_COPIES];

/* bits set (set) or taken off in crawl__free_kind, then in each copy */
static void free_kind_change(int bits, int set)
{
    if (set)
        __atomic_fetch_or(&crawl__free_kind, bits, __ATOMIC_SEQ_CST);
    else
        __atomic_fetch_and(&crawl__free_kind, ~bits, __ATOMIC_SEQ_CST);
    for (int i = 0; i < KIND_COPIES; i++) {
        int *w = __atomic_load_n(&copies[i].free, __ATOMIC_SEQ_CST);
        if (!w)
            continue;
        if (set)
            __atomic_fetch_or(w, bits, __ATOMIC_RELAXED);
        else
            __atomic_fetch_and(w, ~bits, __ATOMIC_RELAXED);
    }
}

void san_free_kind_or(int bits) { free_kind_change(bits, 1); }

void san_free_kind_clear(int bits) { free_kind_change(bits, 0); }

static void hook_kind_store(int k)
{
    __atomic_store_n(&crawl__hook_kind, k, __ATOMIC_RELAXED);
    for (int i = 0; i < KIND_COPIES; i++) {
        int *w = __atomic_load_n(&copies[i].hook, __ATOMIC_ACQUIRE);
        if (w)
            __atomic_store_n(w, k, __ATOMIC_RELAXED);
    }
}

/* A change made while a pair is published is stored in it too, or read
 * here after (Dekker's pattern, as san_hook_kind_update's): the bits are
 * set (FREE_ALL, taken off meanwhile, may stay in the new copy: its frees
 * then look every pointer up, slower, not wrong), and the kind is settled
 * again. Lock-free: the preload calls it from its first malloc. */
int crawl__hp_mirror_kinds(int *hook_kind, int *free_kind)
{
    if (!hook_kind || !free_kind)
        return -EINVAL;
    int i = 0;
    for (; i < KIND_COPIES; i++) {
        int *at = __atomic_load_n(&copies[i].free, __ATOMIC_ACQUIRE);
        if (!at && __atomic_compare_exchange_n(&copies[i].free, &at, free_kind, 0,
                                               __ATOMIC_SEQ_CST, __ATOMIC_ACQUIRE))
            at = free_kind;              /* (claimed; else at is the winner's) */
        if (at == free_kind) {
            /* (claimed, or found: registered again, maybe by another thread
             * at this moment, whose hook pointer may not be there yet) */
            __atomic_store_n(&copies[i].hook, hook_kind, __ATOMIC_RELEASE);
            break;
        }
    }
    if (i == KIND_COPIES)
        return -ENOSPC;
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    __atomic_fetch_or(free_kind, __atomic_load_n(&crawl__free_kind, __ATOMIC_SEQ_CST),
                      __ATOMIC_RELAXED);
    san_hook_kind_update();
    return 0;
}

static int hook_kind_now(void)
{
    int mode = __atomic_load_n(&crawl__hp.mode, __ATOMIC_ACQUIRE);
    /* the pool, once made, stays: its reports need its countdown */
    int gpa = san_gpa_rate_now() != 0 ||
              __atomic_load_n(&crawl__gpa_bounds.span, __ATOMIC_ACQUIRE) != 0;
    if (mode == 1)
        return CRAWL__HOOK_SLOW;
    if (mode == 2)
        return gpa ? CRAWL__HOOK_BOTH : CRAWL__HOOK_SAMPLED;
    return gpa ? CRAWL__HOOK_GPA : CRAWL__HOOK_PLAIN;
}

/* After a change of what it depends on. Lock-free (stop calls it from
 * signal handlers): whoever stores last looks again after its store, so
 * the kind left is the one the last state asks for. Two full fences make
 * that hold (Dekker's pattern: a store, then loads of what another thread
 * stores): the caller's change of state is seen by every thread whose
 * kind store comes later, and this thread's kind store is not still in
 * its store buffer while it looks again (on x86 a release store followed
 * by acquire loads lets the loads pass it: a thread could look, see the
 * old state, and its stale kind land after the last updater's). */
void san_hook_kind_update(void)
{
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    for (;;) {
        int k = hook_kind_now();
        hook_kind_store(k);
        __atomic_thread_fence(__ATOMIC_SEQ_CST);
        if (hook_kind_now() == k)
            return;
    }
}

/* ---- reading the table ----------------------------------------------------------------- */

void hp_wipe_on_fork(void *p, size_t len)
{
#ifdef MADV_WIPEONFORK
    madvise(p, len, MADV_WIPEONFORK);
#else
    (void)p, (void)len;
#endif
}

int hp_snap_reserve(hp_snap *s, size_t more)
{
    if (s->n + more <= s->cap)
        return 0;
    size_t ncap = (s->n + more) * 2 + 1024;
    hp_entry *bigger = crawl__mmap(ncap * sizeof *bigger, PROT_READ | PROT_WRITE, 0);
    if (bigger == MAP_FAILED)
        return -ENOMEM;
    hp_wipe_on_fork(bigger, ncap * sizeof *bigger);
    if (s->e) {
        memcpy(bigger, s->e, s->n * sizeof *bigger);
        crawl__munmap(s->e, s->cap * sizeof *s->e);
    }
    s->e = bigger, s->cap = ncap;
    return 0;
}

int hp_snapshot(hp_snap *out, int addresses)
{
    memset(out, 0, sizeof *out);
    out->sample_bytes = atomic_load(&sample_bytes);
    for (int i = 0; i < HP_SHARDS; i++) {
        shard *s = &shards[i];
        shard_lock(&s->lock);
        if (hp_snap_reserve(out, s->live) != 0) {
            shard_unlock(&s->lock);
            hp_snapshot_free(out);
            return -ENOMEM;
        }
        for (size_t j = 0; j < s->cap; j++)
            if (s->t[j].ptr) {
                out->e[out->n] = s->t[j];
                out->e[out->n].ptr = addresses ? key_of(s->t[j].ptr) : 0;
                out->n++;
            }
        shard_unlock(&s->lock);
    }
    out->dropped = atomic_load(&dropped);
    return 0;
}

size_t hp_table_ranges(uintptr_t (*out)[2], size_t max)
{
    size_t k = 0;
    if (max > 0) {
        out[0][0] = (uintptr_t)first_tables;
        out[0][1] = (uintptr_t)(first_tables + HP_SHARDS);
        k = 1;
    }
    for (int i = 0; i < HP_SHARDS && k < max; i++) {
        shard *s = &shards[i];
        shard_lock(&s->lock);
        if (table_mapped(s)) {
            out[k][0] = (uintptr_t)s->t;
            out[k][1] = (uintptr_t)(s->t + s->cap);
            k++;
        }
        shard_unlock(&s->lock);
    }
    return k;
}

void hp_snapshot_free(hp_snap *s)
{
    if (s->e)
        crawl__munmap(s->e, s->cap * sizeof *s->e);
    s->e = NULL;
}

int hp_inside_now(void) { return inside; }

/* A shard's lock is held for a probe: one still held after ms is this
 * thread's, taken by a free that a signal handler calling exit
 * interrupted. (Counting the locks each thread holds cost every record
 * and free 10 instructions; this costs them nothing.) In a process
 * without other threads any lock held is this thread's: no waiting (the
 * hook would take it again by a plain store, and read a table half way
 * through a deletion). */
static int shard_locks_free_within(int ms)
{
    if (__libc_single_threaded)
        ms = 0;
    struct timespec tick = {0, 1000000};
    int waited = 0;
    for (int i = 0; i < HP_SHARDS; i++)
        while (atomic_load_explicit(&shards[i].lock, memory_order_relaxed)) {
            if (waited++ >= ms)
                return 0;
            nanosleep(&tick, NULL);
        }
    return 1;
}

int hp_interrupted_inside(void) { return inside || !shard_locks_free_within(500); }

uint32_t hp_capture_stack(const crawl_regs *from)
{
    int was = hp_inside_enter();
    uint32_t id = capture_as_told(san_opts(), from);
    hp_inside_leave(was);
    return id;
}

/* crawl's own allocations meanwhile (libdw compiling CFI, glibc's qsort
 * in an output) go through the preload's malloc, whose fast path takes
 * them off the thread's byte countdown: the program's next allocation
 * would then be sampled early. The countdown is put back as it was. */
static __thread long countdown_outside __attribute__((tls_model("initial-exec")));

int hp_inside_enter(void)
{
    int was = inside;
    if (!was)
        countdown_outside = crawl__hp_countdown;
    inside = 1;
    return was;
}
void hp_inside_leave(int was)
{
    if (!was)
        crawl__hp_countdown = countdown_outside;
    inside = was;
}

void crawl_heap_profile_totals(crawl_heap_totals *out)
{
    memset(out, 0, sizeof *out);
    for (int i = 0; i < HP_SHARDS; i++) {
        shard *s = &shards[i];
        shard_lock(&s->lock);
        out->live_bytes += s->live_bytes;
        out->live_objects += s->live;
        shard_unlock(&s->lock);
    }
    out->dropped = atomic_load(&dropped);
    hp_snap snap;
    int was = hp_inside_enter();
    if (hp_snapshot(&snap, 0) == 0) {
        out->stacks = hp_count_stacks(&snap);
        hp_snapshot_free(&snap);
    }
    hp_inside_leave(was);
}

/* fork(): the shards are leaves (nothing is taken inside them). */
void san_hp_fork(int lock)
{
    if (lock) {
        hp_mmap_fork(1);
        /* (before the shards, as filter_rebuild takes them: a child of a
         * fork made as a rebuild ends, after its last shard and before its
         * unlock, would find it held for good, and its next start that
         * records every allocation would wait for ever. The shards' locks
         * taken below leave only that window, too narrow for a test.) */
        shard_lock(&filter_lock);
    }
    for (int i = 0; i < HP_SHARDS; i++) {
        if (lock)
            shard_lock(&shards[i].lock);
        else
            shard_unlock(&shards[i].lock);
    }
    if (!lock) {
        shard_unlock(&filter_lock);
        hp_mmap_fork(0);
    }
}

/* (the checks that froze the tables ran in the parent's other threads) */
void san_hp_fork_child(void)
{
    atomic_store(&frozen, 0);
    ho_fork_child();
}

/* ---- at exit ------------------------------------------------------------------------------ */

/* Set once the exit hook runs: a signal taken after that writes nothing
 * (exit would cut the file off half way) */
static int exiting;

static void at_exit(void);
static void dump_now(void *unused);
static void register_exit(void) { atexit(at_exit); }

/* heap_profile_path written, or one line saying why not (it failed in
 * silence: a directory that does not exist, a closed /dev/stdout) */
static void write_profile(const char *path)
{
    int rc = crawl_heap_profile_write(path);
    if (rc == 0)
        return;
    char line[700];
    int n = snprintf(line, sizeof line, "crawl: cannot write the heap profile to '%.500s': %s\n",
                     path, strerror(-rc));
    san_log_write(line, (size_t)n);
}

static void at_exit(void)
{
    crawl_regs regs;                     /* (the callee-saved ones are the callers') */
    crawl_capture_regs(&regs);
    /* this frame's own slots are no one's roots: one left unwritten held a
     * stale copy of a leaked chunk's address */
    uintptr_t above = (uintptr_t)__builtin_frame_address(0) + 2 * sizeof(void *);
    const san_options *o = san_opts();
    /* a profile heap_profile_signal's helper is writing, or about to
     * write (a signal already taken), is finished first, and no signal
     * starts one after this (the process ended it half way, and its
     * temporary file stayed beside the path; found by an outside test).
     * Only the heap profile's helper: a thread dump's made exit wait 5 s
     * for threads that block signals. */
    __atomic_store_n(&exiting, 1, __ATOMIC_RELEASE);
    ho_closing();                        /* (no other thread starts a temporary file) */
    /* exit called in the middle of this thread's own write (a Frame
     * type's describe hook, libdw's out-of-memory handler): that write
     * never ends, and the others may wait for a lock it holds, so nothing
     * waits: the writes' temporary files go, and nothing more is written
     * or checked (it waited 5 s and left the file; then, with the file
     * gone, it left the helper's, and wrote again a profile it was writing
     * to a device or a /dev/fd path) */
    /* Or exit called while this thread was inside crawl: from a signal
     * handler that interrupted a record (its stack walk, the table) or a
     * free holding a shard's lock (a SIGINT handler that ends the
     * program), or from a callback crawl was running (a describe hook of
     * a leak check's report): the profile and the check need what it may
     * hold, and waited for it for ever (7 children in 40 hung:
     * test_preload_exit_in_handler). */
    int own_write = ho_in_own_write();
    int interrupted = !own_write && hp_interrupted_inside();
    if (own_write || interrupted) {
        ho_remove_temporaries();
        if (o->heap_profile_path[0] || o->leak_check) {   /* (not in silence: the exit code) */
            char line[200];
            int n = snprintf(line, sizeof line, "crawl: the program exited inside %s: %s%s%s\n",
                             interrupted ? "crawl (a signal handler or callback called exit)"
                                         : "a heap profile write",
                             o->heap_profile_path[0] ? "no profile written at exit" : "",
                             o->heap_profile_path[0] && o->leak_check ? ", " : "",
                             o->leak_check ? "no leak check" : "");
            san_log_write(line, (size_t)n);
        }
        return;
    }
    struct timespec tick = {0, 1000000};
    for (int i = 0; i < 5000 && (sw_signal_work_pending(dump_now) || ho_writes_in_flight()); i++)
        nanosleep(&tick, NULL);
    ho_remove_temporaries();             /* (of writers still blocked after 5 s) */
    if (o->heap_profile_path[0])
        write_profile(o->heap_profile_path);
    int leaked = o->leak_check && san_leak_check_at_exit(-1, above, &regs) > 0;
    ho_remove_temporaries();             /* (any listed since: the process ends them) */
    if (leaked && o->leak_check_exitcode) {
        fflush(NULL);
        _exit((int)o->leak_check_exitcode);
    }
}

/* heap_profile_signal: written by a helper thread, in normal context. */
static void dump_now(void *unused)
{
    (void)unused;
    if (__atomic_load_n(&exiting, __ATOMIC_ACQUIRE))
        return;
    const san_options *o = san_opts();
    if (o->heap_profile_path[0]) {
        ho_awaited(1);                   /* (the exit hook waits for this one) */
        write_profile(o->heap_profile_path);
        ho_awaited(0);
        return;
    }
    int opened;
    int fd = san_log_open(&opened);
    crawl_heap_profile_write_fd(fd, CRAWL_HEAP_TEXT);
    if (opened)
        close(fd);
}

int crawl_heap_profile_from_options(void)
{
    static pthread_once_t exit_once = PTHREAD_ONCE_INIT;
    const san_options *o = san_opts();
    if (!o->heap_profile && !o->leak_check) {
        /* (the signal would then end the program, as without crawl) */
        if (o->heap_profile_signal) {
            char line[120];
            int n = snprintf(line, sizeof line,
                             "crawl: heap_profile_signal=%u does nothing without heap_profile=1\n",
                             o->heap_profile_signal);
            crawl__write_all(STDERR_FILENO, line, (size_t)n);
        }
        return 0;
    }
    int rc = crawl_heap_profile_start();
    if (rc)
        return rc;
    san_keep_stderr();                   /* the exit report outlives a closed stderr */
    pthread_once(&exit_once, register_exit);
    static int dumping;
    if (o->heap_profile_signal && !__atomic_exchange_n(&dumping, 1, __ATOMIC_ACQ_REL)) {
        int was = hp_inside_enter();
        rc = sw_on_signal_run((int)o->heap_profile_signal, dump_now, NULL);
        hp_inside_leave(was);
        if (rc)
            return rc;
    }
    return 1;
}
