/* The sampled guard-page allocator: GWP-ASan's design with mixed stacks.
 *
 * The pool is one mapping of 2N+1 pages, all PROT_NONE at first: guard,
 * slot 0, guard, slot 1, ..., guard. An allocation takes a free slot at
 * random, makes its page accessible and sits against its left or right
 * guard (at random); freeing makes the page inaccessible again. So an
 * access past either end of an allocation, or to a freed one, faults, and
 * the SIGSEGV handler tells which slot it was and reports it.
 *
 * Each slot's record keeps its allocation's size, threads and both stacks,
 * compressed (zigzag varint deltas of the trace words) into a fixed budget,
 * so reports need neither the depot nor malloc to find them. A freed slot
 * keeps its record until it is reused, which happens at random among the
 * free slots, as GWP-ASan does. */
#include <errno.h>
#include <stdlib.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <crawl/guarded.h>

#include "sanitizer/heap_profile_internal.h"
#include "sanitizer/internal.h"

#define TRACE_BYTES 256                  /* per stack, compressed */
#define TRACE_WORDS 64                   /* frames kept per stack */

enum { SLOT_NEVER = 0, SLOT_LIVE = 1, SLOT_FREED = 2 };

typedef struct gslot {
    uintptr_t ptr;
    size_t size;
    int state;
    int reported;                        /* recoverable mode: one report per slot */
    unsigned alloc_tid, free_tid;
    uint16_t alloc_len, free_len;        /* compressed bytes */
    unsigned char alloc_trace[TRACE_BYTES], free_trace[TRACE_BYTES];
} gslot;

static struct {
    uintptr_t base, end;
    size_t page;
    unsigned n;
    gslot *slot;                         /* mmap'ed */
    unsigned *free;                      /* free slot numbers */
    unsigned nfree;
    pthread_mutex_t lock;
    int ready;
} pool = {.lock = PTHREAD_MUTEX_INITIALIZER};
static pthread_once_t pool_once = PTHREAD_ONCE_INIT;

/* initial-exec: a plain %fs-relative load, no __tls_get_addr call (the
 * not-sampled path is this decrement and a branch) */
#define GPA_TLS __attribute__((tls_model("initial-exec")))
__thread uint32_t crawl__gpa_next GPA_TLS;     /* 0: not running on this thread (never "sample") */
#define next_sample crawl__gpa_next
struct crawl__gpa_bounds crawl__gpa_bounds;   /* the pool, for crawl_gpa_owns_inline */
static __thread int inside GPA_TLS;             /* recursion guard */
static __thread int reporting GPA_TLS;          /* the fault handler writes a report */

/* The report arena: memory for the allocations a fault report makes
 * (symbolization), so the handler does not call the process's malloc,
 * which the interrupted code may be inside of. While `reporting`, every
 * call samples and crawl_gpa_allocate serves from here: an allocator built
 * on the stubs (the preload) then never reaches its usual allocator from
 * the handler. It lies at the end of the pool's mapping (crawl_gpa_owns
 * is true for it), reserved at start-up, touched only by reports; a block
 * is never reused (symbolizers cache what they allocate), its free
 * ignored. When it is used up, allocations fall back to the caller. */
#define ARENA_BYTES ((size_t)32 << 20)
static atomic_size_t arena_used;
static uintptr_t arena_lo;

static int in_arena(uintptr_t a) { return arena_lo && a >= arena_lo && a < pool.end; }

static void *arena_alloc(size_t size, size_t alignment)
{
    /* a 16-byte header below each block holds its size */
    size_t at = atomic_load(&arena_used), start, end;
    do {
        start = (at + 16 + alignment - 1) & ~(alignment - 1);
        end = (start + size + 15) & ~(size_t)15;
        if (end > ARENA_BYTES || end < start)
            return NULL;
    } while (!atomic_compare_exchange_weak(&arena_used, &at, end));
    *(size_t *)(arena_lo + start - 16) = size;
    return (void *)(arena_lo + start);
}
static __thread uint64_t rng GPA_TLS;

static uint64_t rand64(void)
{
    if (!rng)
        rng = (uint64_t)(uintptr_t)&rng ^ ((uint64_t)getpid() << 32) ^ 0x9e3779b97f4a7c15ull;
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

/* ---- compressed traces ------------------------------------------------------------- */

static size_t pack(const uintptr_t *w, unsigned n, unsigned char *out, size_t cap)
{
    size_t used = 0;
    uintptr_t prev = 0;
    for (unsigned i = 0; i < n; i++) {
        int64_t d = (int64_t)(w[i] - prev);
        uint64_t z = ((uint64_t)d << 1) ^ (uint64_t)(d >> 63);   /* zigzag */
        unsigned char tmp[10];
        size_t k = 0;
        do {
            tmp[k++] = (unsigned char)((z & 0x7f) | (z > 0x7f ? 0x80 : 0));
            z >>= 7;
        } while (z);
        if (used + k > cap)
            break;                       /* the budget is spent: keep the frames so far */
        memcpy(out + used, tmp, k);
        used += k;
        prev = w[i];
    }
    return used;
}

static unsigned unpack(const unsigned char *in, size_t len, uintptr_t *w, unsigned cap)
{
    unsigned n = 0;
    uintptr_t prev = 0;
    size_t i = 0;
    while (i < len && n < cap) {
        uint64_t z = 0;
        int shift = 0;
        while (i < len) {
            unsigned char b = in[i++];
            z |= (uint64_t)(b & 0x7f) << shift;
            shift += 7;
            if (!(b & 0x80))
                break;
        }
        int64_t d = (int64_t)(z >> 1) ^ -(int64_t)(z & 1);
        prev += (uintptr_t)d;
        w[n++] = prev;
    }
    return n;
}

/* ---- the pool ---------------------------------------------------------------------- */

static uintptr_t slot_page(unsigned i)
{
    return pool.base + (2 * (uintptr_t)i + 1) * pool.page;
}

static void on_fault(int sig, siginfo_t *si, void *uc);
static struct sigaction prev_segv, prev_bus;

static void install_handlers(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_fault;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_NODEFER;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGSEGV, &sa, &prev_segv);
    sigaction(SIGBUS, &sa, &prev_bus);
}

static void make_pool(void)
{
    const san_options *o = san_opts();
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    unsigned n = o->gpa_max_allocations;
    size_t slots = (2 * (size_t)n + 1) * page, bytes = slots + ARENA_BYTES;
    void *base = crawl__mmap(bytes, PROT_NONE, MAP_NORESERVE);
    void *meta = crawl__mmap(n * (sizeof(gslot) + sizeof(unsigned)), PROT_READ | PROT_WRITE, 0);
    if (base == MAP_FAILED || meta == MAP_FAILED) {
        if (base != MAP_FAILED)
            crawl__munmap(base, bytes);
        if (meta != MAP_FAILED)
            crawl__munmap(meta, n * (sizeof(gslot) + sizeof(unsigned)));
        return;                          /* no pool: nothing is ever sampled */
    }
    pool.base = (uintptr_t)base;
    pool.end = pool.base + bytes;
    arena_lo = pool.base + slots;
    mprotect((void *)arena_lo, ARENA_BYTES, PROT_READ | PROT_WRITE);   /* NORESERVE: costs what reports touch */
    san_free_kind_or(CRAWL__FREE_POOL);   /* before the bounds */
    crawl__gpa_bounds.lo = pool.base;   /* lo first: a reader that loads span first sees it */
    __atomic_store_n(&crawl__gpa_bounds.span, pool.end - pool.base, __ATOMIC_RELEASE);
    san_hook_kind_update();
    pool.page = page;
    pool.n = n;
    pool.slot = meta;
    pool.free = (unsigned *)(pool.slot + n);
    for (unsigned i = 0; i < n; i++)
        pool.free[i] = i;
    pool.nfree = n;
    if (o->gpa_install_signal_handlers)
        install_handlers();
    __atomic_store_n(&pool.ready, 1, __ATOMIC_RELEASE);
}

static int ensure_pool(void)
{
    pthread_once(&pool_once, make_pool);
    return __atomic_load_n(&pool.ready, __ATOMIC_ACQUIRE);
}

/* fork: options.c's handlers take the pool lock around fork, so the child
 * never inherits it held (the pool itself is shared memory state both
 * processes keep). */
void san_gpa_fork(int lock)
{
    if (lock)
        pthread_mutex_lock(&pool.lock);
    else
        pthread_mutex_unlock(&pool.lock);
}

void san_gpa_meta(uintptr_t *lo, uintptr_t *hi)
{
    *lo = (uintptr_t)pool.slot;
    *hi = pool.slot ? (uintptr_t)(pool.free + pool.n) : 0;
}

int crawl_gpa_owns(const void *p)
{
    uintptr_t a = (uintptr_t)p;
    return pool.base && a >= pool.base && a < pool.end;
}

/* The slot whose page holds a, or -1 (a guard page). */
static long slot_of(uintptr_t a)
{
    size_t k = (a - pool.base) / pool.page;
    return k % 2 ? (long)(k / 2) : -1;
}

size_t crawl_gpa_size(const void *p)
{
    if (!crawl_gpa_owns(p))
        return 0;
    if (in_arena((uintptr_t)p))
        return *(const size_t *)((uintptr_t)p - 16);
    long s = slot_of((uintptr_t)p);
    return s >= 0 && pool.slot[s].state == SLOT_LIVE && pool.slot[s].ptr == (uintptr_t)p
               ? pool.slot[s].size
               : 0;
}

size_t crawl__gpa_slot_size(const void *p)
{
    if (!crawl_gpa_owns(p) || in_arena((uintptr_t)p))
        return 0;
    long s = slot_of((uintptr_t)p);
    return s >= 0 && pool.slot[s].state == SLOT_LIVE ? pool.slot[s].size : 0;
}

/* ---- sampling ---------------------------------------------------------------------- */

/* The countdown ran out, or is not running: re-read the rate (a change,
 * 0 included, applies here), start it, and say whether this call samples. */
__attribute__((noinline, cold)) int crawl__gpa_sample_slow(void)
{
    if (reporting)
        return 1;                        /* next_sample stays 0: every call comes here */
    /* reading the options may itself allocate (the first read parses them):
     * that allocation is not sampled, and does not come back here */
    if (inside)
        return 0;
    inside = 1;
    unsigned rate = san_opts()->gpa_sample_rate;
    inside = 0;
    if (rate == 0) {
        next_sample = 1u << 20;          /* off: look at the rate again in a million calls */
        return 0;
    }
    if (next_sample == 0)
        next_sample = rate == 1 ? 1 : (uint32_t)(rand64() % (2 * (uint64_t)rate)) + 1;
    return --next_sample == 0;
}

/* gpa_sample_rate changed (crawl_sanitizer_set_options): this thread's
 * countdown, drawn for the old rate, is dropped, so that its next call
 * draws one for the new rate. Another thread's runs out first (at most
 * twice the old rate's calls, a million when it was 0). */
void san_gpa_rate_changed(void)
{
    next_sample = 0;
}

int crawl_gpa_should_sample(void)
{
    if (__builtin_expect(next_sample > 1, 1)) {
        next_sample--;
        return 0;
    }
    return crawl__gpa_sample_slow();
}/* ---- allocation ---------------------------------------------------------------------- */

/* The allocation and free stacks compile the CFI of the modules they pass
 * (samples are rare): the report of a fault, a signal-safe walk from the
 * faulting pc, then finds the rules of the code that touched the chunk. */
static unsigned capture(const crawl_regs *from, unsigned char *out)
{
    uintptr_t w[TRACE_WORDS];
    unsigned flags = SAN_CAPTURE_COMPILE | (san_opts()->fast_unwind_on_malloc ? CRAWL_WALK_FAST : 0);
    unsigned n = san_capture_words(from, TRACE_WORDS, flags, w, TRACE_WORDS);
    return (unsigned)pack(w, n, out, TRACE_BYTES);
}

static void *allocate(size_t size, size_t alignment, const crawl_regs *from);

void *crawl_gpa_allocate(size_t size, size_t alignment)
{
    crawl_regs entry;
    crawl_capture_regs(&entry);
    void *p = allocate(size, alignment, &entry);
    CRAWL__NO_TAIL(p);
    return p;
}

void *crawl__gpa_allocate_from(size_t size, size_t alignment, const crawl_regs *from)
{
    return allocate(size, alignment, from);
}

static void *allocate_in(size_t size, size_t alignment, const crawl_regs *from);

/* errno as the caller left it: a sample's capture and symbolization reach
 * files and libdw, and a program's malloc must not change errno. The
 * allocations made meanwhile (libdw compiling CFI, glibc's fopen when the
 * thread is first attached) are crawl's: out of the heap profile, and off
 * the thread's sampling countdown (the first sample took 11 MB off it, and
 * the program's next allocation was sampled early). */
static void *allocate(size_t size, size_t alignment, const crawl_regs *from)
{
    int e = errno, was = hp_inside_enter();
    void *p = allocate_in(size, alignment, from);
    hp_inside_leave(was);
    errno = e;
    return p;
}

static void *allocate_in(size_t size, size_t alignment, const crawl_regs *from)
{
    int asked = alignment != 0;          /* an alignment asked for is always kept */
    if (alignment == 0)
        alignment = 16;
    if (reporting && pool.ready && !(alignment & (alignment - 1)))
        return arena_alloc(size, alignment < 16 ? 16 : alignment);
    if (inside || crawl__busy || !ensure_pool() || size > pool.page || alignment > pool.page ||
        (alignment & (alignment - 1)))
        return NULL;
    inside = 1;
    pthread_mutex_lock(&pool.lock);
    if (pool.nfree == 0) {
        pthread_mutex_unlock(&pool.lock);
        inside = 0;
        return NULL;
    }
    unsigned k = (unsigned)(rand64() % pool.nfree);
    unsigned s = pool.free[k];
    pool.free[k] = pool.free[--pool.nfree];
    pthread_mutex_unlock(&pool.lock);
    uintptr_t page = slot_page(s);
    if (mprotect((void *)page, pool.page, PROT_READ | PROT_WRITE) != 0) {
        /* the kernel's limit on mappings (vm.max_map_count: each live slot
         * splits the pool's) or its memory: the slot goes back, and glibc
         * serves the allocation (a slot left PROT_NONE was reported as a
         * use after free at its first access) */
        pthread_mutex_lock(&pool.lock);
        pool.free[pool.nfree++] = s;
        pthread_mutex_unlock(&pool.lock);
        inside = 0;
        return NULL;
    }
    size_t sz = size ? size : 1;
    uintptr_t ptr;
    if (rand64() & 1) {
        ptr = page;                      /* against the left guard */
    } else {
        size_t align = san_opts()->gpa_perfectly_right_align && !asked ? 1 : alignment;
        ptr = (page + pool.page - sz) & ~(uintptr_t)(align - 1);   /* against the right */
    }
    gslot *g = &pool.slot[s];
    g->ptr = ptr;
    g->size = size;
    g->reported = 0;
    g->alloc_tid = san_thread_id();
    g->alloc_len = (uint16_t)capture(from, g->alloc_trace);
    g->free_len = 0;
    __atomic_store_n(&g->state, SLOT_LIVE, __ATOMIC_RELEASE);
    inside = 0;
    return (void *)ptr;
}

/* ---- reports ------------------------------------------------------------------------- */

static void print_trace(san_report *r, const unsigned char *t, unsigned len)
{
    uintptr_t w[TRACE_WORDS];
    unsigned n = unpack(t, len, w, TRACE_WORDS);
    if (n)
        san_print_words(r, w, n);
    else
        san_printf(r, "    <not recorded>\n");
}

/* kind, where, then the stack the caller prints, then the slot's stacks */
static void report_slot(const char *kind, uintptr_t at, const gslot *g, const crawl_regs *entry,
                        const ucontext_t *uc)
{
    san_report *r = san_report_begin_plain();
    san_printf(r, "*** GWP-ASan detected a memory error ***\n");
    unsigned long a = (unsigned long)at, p = (unsigned long)g->ptr;
    if (strcmp(kind, "Double Free") == 0)
        san_printf(r, "%s at 0x%lx (a %zu-byte allocation) by thread T%u here:\n", kind, a,
                   g->size, san_thread_id());
    else if (a < p)
        san_printf(r, "%s at 0x%lx (%lu byte%s to the left of a %zu-byte allocation at 0x%lx) by "
                      "thread T%u here:\n",
                   kind, a, p - a, p - a == 1 ? "" : "s", g->size, p, san_thread_id());
    else if (a >= p + g->size)
        san_printf(r, "%s at 0x%lx (%lu byte%s to the right of a %zu-byte allocation at 0x%lx) by "
                      "thread T%u here:\n",
                   kind, a, a - p - g->size, a - p - g->size == 1 ? "" : "s", g->size, p,
                   san_thread_id());
    else
        san_printf(r, "%s at 0x%lx (%lu byte%s into a %zu-byte allocation at 0x%lx) by thread T%u "
                      "here:\n",
                   kind, a, a - p, a - p == 1 ? "" : "s", g->size, p, san_thread_id());
    if (uc)
        san_print_stack_uc(r, uc);
    else
        san_print_stack_at(r, entry);
    if (g->state == SLOT_FREED) {
        san_printf(r, "0x%lx was deallocated by thread T%u here:\n", p, g->free_tid);
        print_trace(r, g->free_trace, g->free_len);
    }
    san_printf(r, "0x%lx was allocated by thread T%u here:\n", p, g->alloc_tid);
    print_trace(r, g->alloc_trace, g->alloc_len);
    san_printf(r, "*** End GWP-ASan report ***\n");
    san_report_emit(r);                  /* no halt here: the caller decides what follows */
}

/* ---- free ------------------------------------------------------------------------------ */

static void deallocate(void *p, const crawl_regs *from);

void crawl_gpa_deallocate(void *p)
{
    crawl_regs entry;
    crawl_capture_regs(&entry);
    deallocate(p, &entry);
    CRAWL__NO_TAIL(p);
}

void crawl__gpa_deallocate_from(void *p, const crawl_regs *from)
{
    deallocate(p, from);
}

/* The free stack starts at the caller of the frame whose registers are
 * *from. */
static void deallocate_in(void *p, const crawl_regs *from);

static void deallocate(void *p, const crawl_regs *from)
{
    int e = errno, was = hp_inside_enter();
    deallocate_in(p, from);
    hp_inside_leave(was);
    errno = e;
}

static void deallocate_in(void *p, const crawl_regs *from)
{
    if (!crawl_gpa_owns(p) || in_arena((uintptr_t)p))
        return;                          /* a report arena block: never reused */
    uintptr_t a = (uintptr_t)p;
    long s = slot_of(a);
    /* a pointer into a guard page: the nearest slot's allocation */
    if (s < 0) {
        size_t k = (a - pool.base) / pool.page;
        s = k > 0 && (k / 2 - 1) < pool.n ? (long)(k / 2 - 1) : 0;
    }
    gslot *g = &pool.slot[s];
    if (g->state == SLOT_LIVE && g->ptr == a) {
        inside = 1;
        g->free_tid = san_thread_id();
        g->free_len = (uint16_t)capture(from, g->free_trace);
        __atomic_store_n(&g->state, SLOT_FREED, __ATOMIC_RELEASE);
        mprotect((void *)slot_page((unsigned)s), pool.page, PROT_NONE);
        pthread_mutex_lock(&pool.lock);
        pool.free[pool.nfree++] = (unsigned)s;
        pthread_mutex_unlock(&pool.lock);
        inside = 0;
        return;
    }
    const char *kind = g->state == SLOT_FREED && g->ptr == a ? "Double Free" : "Invalid (Wild) Free";
    report_slot(kind, a, g, from, NULL);
    if (!san_opts()->gpa_recoverable)
        abort();                         /* as GWP-ASan: a bad free stops the process */
    __asm__ volatile("" ::: "memory");
}

/* ---- the fault handler ----------------------------------------------------------------- */

static void forward(int sig, siginfo_t *si, void *uc)
{
    const struct sigaction *prev = sig == SIGBUS ? &prev_bus : &prev_segv;
    if (prev->sa_flags & SA_SIGINFO) {
        prev->sa_sigaction(sig, si, uc);
        return;
    }
    if (prev->sa_handler == SIG_IGN || prev->sa_handler == SIG_DFL) {
        signal(sig, SIG_DFL);            /* the access faults again: the default action */
        return;
    }
    prev->sa_handler(sig);
}

static void on_fault(int sig, siginfo_t *si, void *uc)
{
    uintptr_t a = (uintptr_t)si->si_addr;
    if (!crawl_gpa_owns((void *)a) || in_arena(a) || inside || reporting) {
        forward(sig, si, uc);
        return;
    }
    long s = slot_of(a);
    const char *kind = "Use After Free";
    if (s < 0) {
        /* a guard page: the closer of the live allocations on either side */
        size_t k = (a - pool.base) / pool.page;
        long left = k >= 2 ? (long)(k / 2 - 1) : -1, right = k / 2 < pool.n ? (long)(k / 2) : -1;
        uintptr_t dl = UINTPTR_MAX, dr = UINTPTR_MAX;
        if (left >= 0 && pool.slot[left].state != SLOT_NEVER)
            dl = a - (pool.slot[left].ptr + pool.slot[left].size);
        if (right >= 0 && pool.slot[right].state != SLOT_NEVER)
            dr = pool.slot[right].ptr - a;
        s = dl <= dr ? left : right;
        kind = dl <= dr ? "Buffer Overflow" : "Buffer Underflow";
    }
    gslot *g = s >= 0 ? &pool.slot[s] : NULL;
    if (!g || g->state == SLOT_NEVER) {
        forward(sig, si, uc);
        return;
    }
    if (g->state == SLOT_FREED && (s == slot_of(a)))
        kind = "Use After Free";
    int recover = san_opts()->gpa_recoverable;
    if (!(recover && g->reported)) {
        g->reported = 1;
        reporting = 1;                   /* the report's allocations: from the arena */
        next_sample = 0;
        report_slot(kind, a, g, NULL, uc);
        reporting = 0;
        next_sample = 0;                 /* restarted on the next call */
    }
    if (recover) {                       /* make the page accessible and go on */
        mprotect((void *)(pool.base + (a - pool.base) / pool.page * pool.page), pool.page,
                 PROT_READ | PROT_WRITE);
        return;
    }
    const struct sigaction *prev = sig == SIGBUS ? &prev_bus : &prev_segv;
    if (!(prev->sa_flags & SA_SIGINFO) && prev->sa_handler == SIG_IGN)
        _exit(128 + sig);                /* ignored: GWP-ASan's rule, terminate after the report */
    forward(sig, si, uc);
}
