/* crawl-boehm's allocator and what it knows of the objects it returned:
 * stress collections, allocation stacks, and the quarantine of collected
 * objects (use-after-collect).
 *
 * Objects get an entry in a table keyed by base address when a diagnostic
 * needs one (gc_alloc_stacks, gc_poison_collected). Those objects come from
 * two object kinds of crawl's own (normal and pointer-free) with a disclaim
 * procedure, Boehm's hook that runs for each unreachable object before it
 * is reclaimed: it drops the entry, or, with gc_poison_collected, fills the
 * object with 0xdb, stamps it with the collection that found it
 * unreachable, and keeps it unreclaimed in a FIFO quarantine of
 * gc_quarantine_mb; the oldest leave it as new ones come.
 *
 * Locks: Boehm's allocation lock, then the table's. Nothing here calls
 * Boehm with the table lock held. */
#include <errno.h>
#include <gc/gc_disclaim.h>
#include <gc/gc_mark.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "gcroots/gc_internal.h"

#define POISON_BYTE 0xdb

/* ---- options ----------------------------------------------------------------- */

gc_opts gc_opt;
/* Nonzero while any diagnostic is on or reports wait: the allocator's one
 * check on its fast path. 1 until the options are first read. */
atomic_int gc_active = 1;
static pthread_once_t opts_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t opts_lock = PTHREAD_MUTEX_INITIALIZER;

static long option(const char *key)
{
    long v = 0;
    return crawl_sanitizer_get_option(key, &v) == 0 ? v : 0;
}

/* gc_stress_transitions: a collection at every VM -> native call, with
 * the transition Frame just pushed (its saved registers a root). */
static void stress_at_transition(crawl_frame *f)
{
    (void)f;
    gc_collect();
}

static void read_options(void)
{
    pthread_mutex_lock(&opts_lock);
    gc_opts o = {.stress = (unsigned long)option("gc_stress"),
                 .stress_transitions = option("gc_stress_transitions") != 0,
                 .verify = option("gc_verify") != 0,
                 .poison = option("gc_poison_collected") != 0,
                 .stacks = option("gc_alloc_stacks") != 0,
                 .quarantine_bytes = (size_t)option("gc_quarantine_mb") << 20,
                 .context = (unsigned)option("malloc_context_size"),
                 .fast = option("fast_unwind_on_malloc") != 0};
    /* the fields are read without a lock (inside collections too); a
     * reader racing this sees the old or the new value of each */
    __atomic_store_n(&gc_opt.stress, o.stress, __ATOMIC_RELAXED);
    __atomic_store_n(&gc_opt.stress_transitions, o.stress_transitions, __ATOMIC_RELAXED);
    static int hooked;                   /* leave an embedder's own hook alone otherwise */
    if (o.stress_transitions != hooked) {
        crawl_set_transition_hook(o.stress_transitions ? stress_at_transition : NULL);
        hooked = o.stress_transitions;
    }
    __atomic_store_n(&gc_opt.verify, o.verify, __ATOMIC_RELAXED);
    __atomic_store_n(&gc_opt.poison, o.poison, __ATOMIC_RELAXED);
    __atomic_store_n(&gc_opt.stacks, o.stacks, __ATOMIC_RELAXED);
    __atomic_store_n(&gc_opt.quarantine_bytes, o.quarantine_bytes, __ATOMIC_RELAXED);
    __atomic_store_n(&gc_opt.context, o.context, __ATOMIC_RELAXED);
    __atomic_store_n(&gc_opt.fast, o.fast, __ATOMIC_RELAXED);
    gc_update_active();
    pthread_mutex_unlock(&opts_lock);
    /* Collection stacks (gc_poison_collected) are captured inside
     * collections, where only compiled CFI may be used: compile every
     * loaded module's now, once (milliseconds; not paid otherwise). */
    static atomic_int warmed;
    if (o.poison && !atomic_exchange(&warmed, 1))
        crawl_cfi_cache_warm();
}

void gc_update_active(void)
{
    atomic_store_explicit(&gc_active,
                          gc_opt.stress || gc_opt.poison || gc_opt.stacks || gc_pending,
                          memory_order_relaxed);
}

static void first_read(void)
{
    /* libcrawl reads CRAWL_OPTIONS first (it would call the listener from
     * inside that, with opts_lock taken below) */
    (void)crawl_sanitizer_options_serial();
    crawl_sanitizer_on_options_change(read_options);
    read_options();
}

void gc_opts_refresh(void)
{
    pthread_once(&opts_once, first_read);
}

/* ---- the table ----------------------------------------------------------------- */

static pthread_mutex_t table_lock = PTHREAD_MUTEX_INITIALIZER;
static gc_obj *table;                   /* open addressing; base 0 empty, 1 deleted */
static size_t table_cap, table_used;    /* used counts deleted slots too */

#define DELETED ((uintptr_t)1)

static size_t slot_of(uintptr_t base, size_t cap)
{
    return (size_t)((base >> 4) * 0x9e3779b97f4a7c15ull >> 7) & (cap - 1);
}

static gc_obj *find_locked(uintptr_t base)
{
    if (!table)
        return NULL;
    for (size_t i = slot_of(base, table_cap);; i = (i + 1) & (table_cap - 1)) {
        if (table[i].base == base)
            return &table[i];
        if (table[i].base == 0)
            return NULL;
    }
}

static int grow_locked(void)
{
    size_t cap = table_cap ? table_cap * 2 : 4096;
    gc_obj *t = mmap(NULL, cap * sizeof *t, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (t == MAP_FAILED)
        return -ENOMEM;
    size_t used = 0;
    for (size_t i = 0; i < table_cap; i++) {
        if (table[i].base <= DELETED)
            continue;
        size_t j = slot_of(table[i].base, cap);
        while (t[j].base)
            j = (j + 1) & (cap - 1);
        t[j] = table[i];
        used++;
    }
    if (table)
        munmap(table, table_cap * sizeof *table);
    table = t;
    table_cap = cap;
    table_used = used;
    return 0;
}

static gc_obj *insert_locked(uintptr_t base)
{
    gc_obj *e = find_locked(base);
    if (e)
        return e;                        /* a stale entry at a reused address */
    if ((table_used + 1) * 2 > table_cap && grow_locked() != 0)
        return NULL;
    size_t i = slot_of(base, table_cap);
    while (table[i].base > DELETED)
        i = (i + 1) & (table_cap - 1);
    if (table[i].base == 0)
        table_used++;
    table[i] = (gc_obj){.base = base};
    return &table[i];
}

int gc_obj_find(uintptr_t base, gc_obj *out)
{
    pthread_mutex_lock(&table_lock);
    gc_obj *e = find_locked(base);
    if (e)
        *out = *e;
    pthread_mutex_unlock(&table_lock);
    return e != NULL;
}

int gc_obj_find_nowait(uintptr_t base, gc_obj *out)
{
    if (pthread_mutex_trylock(&table_lock) != 0)
        return -1;
    gc_obj *e = find_locked(base);
    if (e)
        *out = *e;
    pthread_mutex_unlock(&table_lock);
    return e != NULL;
}

uint32_t crawl_gc_alloc_stack(const void *obj)
{
    gc_obj e;
    return obj && gc_obj_find((uintptr_t)obj, &e) ? e.alloc_stack : 0;
}

/* ---- collections: which one found an object unreachable, and where ------------- */

static unsigned long collections;       /* marks finished (under Boehm's lock) */
static uint32_t starting_stack, marked_stack;
static unsigned starting_tid, marked_tid;
static GC_on_collection_event_proc previous_event;

static void GC_CALLBACK on_event(GC_EventType e)
{
    if (e == GC_EVENT_START) {
        /* the thread that triggered it: lock-free, allocation-free capture,
         * from the collector's frame that called this hook */
        crawl_regs here;
        crawl_capture_regs(&here);
        starting_stack = crawl_depot_capture_from(&here, gc_opt.context ? gc_opt.context : 30,
                                                  CRAWL_WALK_SIGNAL_SAFE);
        int t = crawl_thread_number();
        starting_tid = t < 0 ? 0 : (unsigned)t;
    } else if (e == GC_EVENT_MARK_END) {
        /* objects swept from now on (lazily, up to the next mark) were
         * found unreachable by this collection */
        collections++;
        marked_stack = starting_stack;
        marked_tid = starting_tid;
    }
    if (previous_event)
        previous_event(e);
}

/* ---- the quarantine ------------------------------------------------------------- */

typedef struct held {
    uintptr_t base;
    size_t bytes;
} held;
static held *fifo;                      /* ring: [head, head+count) modulo cap */
static size_t fifo_cap, fifo_head, fifo_count, fifo_bytes;

static void quarantine_locked(uintptr_t base, size_t bytes)
{
    if (fifo_count == fifo_cap) {
        size_t cap = fifo_cap ? fifo_cap * 2 : 1024;
        held *f = mmap(NULL, cap * sizeof *f, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (f == MAP_FAILED)
            return;                      /* not quarantined: reclaimed when evicted... never */
        for (size_t i = 0; i < fifo_count; i++)
            f[i] = fifo[(fifo_head + i) % fifo_cap];
        if (fifo)
            munmap(fifo, fifo_cap * sizeof *fifo);
        fifo = f;
        fifo_cap = cap;
        fifo_head = 0;
    }
    fifo[(fifo_head + fifo_count++) % fifo_cap] = (held){base, bytes};
    fifo_bytes += bytes;
    while (fifo_count && fifo_bytes > gc_opt.quarantine_bytes) {
        held old = fifo[fifo_head];
        fifo_head = (fifo_head + 1) % fifo_cap;
        fifo_count--;
        fifo_bytes -= old.bytes;
        gc_obj *e = find_locked(old.base);
        if (e && e->state == GC_OBJ_COLLECTED)
            e->state = GC_OBJ_EVICTED;   /* reclaimed the next time it is swept */
    }
}

/* Boehm's disclaim hook, with its allocation lock held: nonzero keeps the
 * object unreclaimed this cycle. */
static int GC_CALLBACK on_disclaim(void *obj)
{
    uintptr_t base = (uintptr_t)obj;
    int keep = 0;
    pthread_mutex_lock(&table_lock);
    gc_obj *e = find_locked(base);
    if (e && e->state == GC_OBJ_LIVE && gc_opt.poison && gc_opt.quarantine_bytes) {
        e->state = GC_OBJ_COLLECTED;
        e->collect_gc = collections;
        e->collect_stack = marked_stack;
        e->collect_tid = marked_tid;
        size_t bytes = GC_size(obj);
        memset(obj, POISON_BYTE, bytes);
        quarantine_locked(base, bytes);
        keep = e->state == GC_OBJ_COLLECTED;
    } else if (e && e->state == GC_OBJ_COLLECTED) {
        keep = 1;                        /* still quarantined */
    }
    if (e && !keep)
        e->base = DELETED;
    pthread_mutex_unlock(&table_lock);
    return keep;
}

/* ---- allocation ------------------------------------------------------------------ */

static pthread_once_t kinds_once = PTHREAD_ONCE_INIT;
static int kind_normal = -1, kind_atomic = -1;

static void make_kinds(void)
{
    /* normal: scanned conservatively over its whole size, cleared;
     * atomic: never scanned, not cleared (as GC_MALLOC_ATOMIC) */
    kind_normal = (int)GC_new_kind(GC_new_free_list(), GC_DS_LENGTH, 1, 1);
    kind_atomic = (int)GC_new_kind(GC_new_free_list(), GC_DS_LENGTH, 0, 0);
    GC_register_disclaim_proc(kind_normal, on_disclaim, 0);
    GC_register_disclaim_proc(kind_atomic, on_disclaim, 0);
    previous_event = GC_get_on_collection_event();
    GC_set_on_collection_event(on_event);
}

/* GC_try_to_collect runs GC_reclaim_all first unless the stop function is
 * GC_never_stop_func itself: this one never stops it either. */
static int GC_CALLBACK never_stop(void)
{
    return 0;
}

/* crawl-boehm's copy of libcrawl's crawl__clear_stack_below (frames/
 * scrub.c), which a glue library cannot reach: 32 KiB of the dead stack
 * below the caller zeroed, inside this frame so that a signal handler's
 * frame is never under the zeroing. */
static __attribute__((noinline)) void clear_stack_below(void)
{
    volatile char area[32768];
    explicit_bzero((char *)area, sizeof area);
    __asm__ volatile("" : : "r"(area) : "memory");
}

void gc_collect(void)
{
    /* the collector's own frames go below: slots they never write keep
     * what crawl's walks left there (a walk memo's check reloads stack
     * words it saw earlier, the object a why-alive was asked about among
     * them). After crawl_gc_why, examples/forgot_root's collected object
     * stayed alive through three such words 1.6 to 16 KiB below this
     * frame, as one layout of libcrawl had it. */
    clear_stack_below();
    GC_try_to_collect(never_stop);
}

void crawl_gc_collect(void)
{
    gc_collect();
}

int gc_public_kind(int kind)
{
    if (kind_normal >= 0 && kind == kind_normal)
        return 1;                        /* GC_I_NORMAL */
    if (kind_atomic >= 0 && kind == kind_atomic)
        return 0;                        /* GC_I_PTRFREE */
    return kind;
}

int gc_pointer_free(const void *base)
{
    int kind = GC_get_kind_and_size(base, NULL);
    return kind == 0 /* GC_I_PTRFREE */ || (kind_atomic >= 0 && kind == kind_atomic);
}

static atomic_ulong stress_count;

/* The slow path: stress, then an object of crawl's kinds with its entry.
 * Called (never tail-called) by the entry points, so the allocation stack,
 * captured from here, starts at the entry point and then its caller. */
__attribute__((noinline)) static void *tracked(size_t size, int atomic)
{
    crawl_regs here;
    crawl_capture_regs(&here);
    gc_opts_refresh();
    if (gc_pending)
        gc_flush_pending();
    if (gc_opt.stress &&
        atomic_fetch_add_explicit(&stress_count, 1, memory_order_relaxed) % gc_opt.stress == 0)
        gc_collect();
    if (!gc_opt.stacks && !gc_opt.poison)
        return atomic ? GC_MALLOC_ATOMIC(size) : GC_MALLOC(size);
    pthread_once(&kinds_once, make_kinds);
    void *p = GC_generic_malloc(size ? size : 1, atomic ? kind_atomic : kind_normal);
    if (!p)
        return NULL;
    uint32_t stack = gc_opt.stacks ? crawl_depot_capture_from(&here, gc_opt.context,
                                                              gc_opt.fast ? CRAWL_WALK_FAST : 0)
                                   : 0;
    int t = crawl_thread_number();
    pthread_mutex_lock(&table_lock);
    gc_obj *e = insert_locked((uintptr_t)p);
    if (e)
        *e = (gc_obj){.base = (uintptr_t)p, .size = size, .alloc_stack = stack,
                      .alloc_tid = t < 0 ? 0 : (unsigned)t, .state = GC_OBJ_LIVE};
    pthread_mutex_unlock(&table_lock);
    return p;
}

/* The fast path is GC_MALLOC and one load; anything else is tracked(). */
void *crawl_gc_malloc(size_t size)
{
    if (__builtin_expect(!atomic_load_explicit(&gc_active, memory_order_relaxed), 1))
        return GC_MALLOC(size);
    void *p = tracked(size, 0);
    __asm__ volatile("" : "+r"(p));      /* not a tail call: this frame is the stack's #0 */
    return p;
}

void *crawl_gc_malloc_atomic(size_t size)
{
    if (__builtin_expect(!atomic_load_explicit(&gc_active, memory_order_relaxed), 1))
        return GC_MALLOC_ATOMIC(size);
    void *p = tracked(size, 1);
    __asm__ volatile("" : "+r"(p));
    return p;
}
