/* libcrawl-preload.so: the guarded pool and the heap profile for a whole
 * process, through LD_PRELOAD. The malloc family, strdup/strndup and the C++ operator
 * new/delete family are interposed: one allocation in gpa_sample_rate goes
 * to crawl's guarded pool, every other call to glibc's functions, found
 * with dlsym(RTLD_NEXT). dlsym itself may allocate before those are known:
 * such calls get memory from a small static bootstrap arena, which free
 * then ignores. Set-uid and set-gid programs are left alone: every call
 * goes straight to glibc.
 *
 * The pool's own work (a stack walk that compiles CFI, symbolization in a
 * report) allocates too: crawl_gpa_allocate refuses to sample while it is
 * inside itself, so those calls reach glibc. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdarg.h>
#include <sys/auxv.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <crawl/guarded.h>
#include <crawl/heap_profile.h>
#include <crawl/stackwalk.h>

#define EXPORT __attribute__((visibility("default")))
/* x is "changed" after the call that made it: the call cannot be a tail call */
#define NO_TAIL(x) __asm__ volatile("" : "+r"(x))

static void *resolving_malloc(size_t n);
static void resolving_free(void *p);
/* malloc and free start at resolvers, so that their fast paths need not
 * ask whether glibc's functions are known yet */
static void *(*real_malloc)(size_t) = resolving_malloc;
static void (*real_free)(void *) = resolving_free;
static void *(*real_calloc)(size_t, size_t);
static void *(*real_realloc)(void *, size_t);
static void *(*real_memalign)(size_t, size_t);
static size_t (*real_usable)(void *);
static void *(*real_mmap)(void *, size_t, int, int, int, off_t);
static int (*real_munmap)(void *, size_t);
static void *(*real_mremap)(void *, size_t, size_t, int, ...);
static int (*real_getattr)(pthread_t, pthread_attr_t *);
static int ready;                        /* 1: the real functions are known */
/* crawl__hook_kind and crawl__free_kind, as crawl keeps them here too
 * (crawl__hp_mirror_kinds, from the first resolve): the fast paths read
 * these with no GOT load (callgrind, bench_heap_work sampled: 2
 * instructions of about 250 a malloc/free pair). Both 0 until then, as
 * crawl's own start. */
static int hook_kind, free_kind;
static int secure;                       /* set-uid/set-gid: never sample */

/* ---- the bootstrap arena (dlsym's own allocations) ----------------------------------- */

static _Alignas(CRAWL__HP_ALIGN) char boot[1 << 18];
static atomic_size_t boot_used;

/* A bootstrap block is also marked for good in the heap profile's free
 * filter (a count stuck at 255): free's fast path then never hands it to
 * glibc, without a test of its own. Blocks are CRAWL__HP_ALIGN-aligned, as
 * samples are, so that they need no filter test (crawl__free_kind). */
static void *boot_alloc(size_t n)
{
    if (n > sizeof boot)
        return NULL;                     /* (rounded up, it would wrap) */
    size_t want = (n + CRAWL__HP_ALIGN - 1) & ~(size_t)(CRAWL__HP_ALIGN - 1);
    size_t at = atomic_fetch_add(&boot_used, want);
    if (at + want > sizeof boot)
        return NULL;
    crawl__hp_filter_stick(boot + at);
    return boot + at;
}

static int from_boot(const void *p)
{
    return (const char *)p >= boot && (const char *)p < boot + sizeof boot;
}

static __thread int resolving __attribute__((tls_model("initial-exec")));

static void resolve(void)
{
    if (ready || resolving)
        return;
    resolving = 1;
    /* (at the first call, before any kind can change: a constructor run
     * before ours may allocate, and a pool chunk made then must not reach
     * glibc's free) */
    if (crawl__hp_mirror_kinds(&hook_kind, &free_kind) != 0) {
        /* (copies crawl does not keep, a ninth copy of the preload: every
         * call takes the slow paths, which read crawl's own state) */
        hook_kind = CRAWL__HOOK_SLOW;
        free_kind = CRAWL__FREE_ALL;
    }
    void *(*m)(size_t) = (void *(*)(size_t))dlsym(RTLD_NEXT, "malloc");
    void (*f)(void *) = (void (*)(void *))dlsym(RTLD_NEXT, "free");
    real_calloc = (void *(*)(size_t, size_t))dlsym(RTLD_NEXT, "calloc");
    real_realloc = (void *(*)(void *, size_t))dlsym(RTLD_NEXT, "realloc");
    real_memalign = (void *(*)(size_t, size_t))dlsym(RTLD_NEXT, "memalign");
    real_usable = (size_t(*)(void *))dlsym(RTLD_NEXT, "malloc_usable_size");
    real_mmap = (void *(*)(void *, size_t, int, int, int, off_t))dlsym(RTLD_NEXT, "mmap");
    real_munmap = (int (*)(void *, size_t))dlsym(RTLD_NEXT, "munmap");
    real_mremap = (void *(*)(void *, size_t, size_t, int, ...))dlsym(RTLD_NEXT, "mremap");
    /* (here, with the others: a dlsym made later could run inside dlerror,
     * whose error string it frees, as a sampled allocation's first walk
     * attaches its thread) */
    real_getattr = (int (*)(pthread_t, pthread_attr_t *))dlsym(RTLD_NEXT, "pthread_getattr_np");
    secure = getauxval(AT_SECURE) != 0;
    if (m && f && real_calloc && real_realloc && real_memalign && real_usable) {
        real_malloc = m, real_free = f;
        ready = 1;
    }
    resolving = 0;
}

static void *resolving_malloc(size_t n)
{
    resolve();
    return ready ? real_malloc(n) : boot_alloc(n);
}

static void resolving_free(void *p)
{
    if (from_boot(p))
        return;
    resolve();
    if (ready)
        real_free(p);                    /* (else glibc is out of reach: the block stays) */
}

/* glibc's pthread_getattr_np allocates while it holds the thread's lock: a
 * stack captured for such an allocation must not attach the thread (which
 * calls pthread_getattr_np) if it is not yet. Boehm's GC_init does this on
 * the main thread before anything else allocated: every such program hung
 * under heap_profile=1. */
EXPORT int pthread_getattr_np(pthread_t t, pthread_attr_t *attr)
{
    if (!real_getattr)
        resolve();
    if (!real_getattr)
        return ENOSYS;
    crawl__in_getattr++;
    int rc = real_getattr(t, attr);
    crawl__in_getattr--;
    return rc;
}

/* CRAWL_OPTIONS' heap_profile=1 / leak_check=1: record from the start. */
__attribute__((constructor)) static void preload_init(void)
{
    resolve();
    /* never unloaded: walks through malloc need not ask the loader, and
     * crawl keeps pointers to this copy's kind words (also in a set-uid
     * program, where a copy dlopened and closed again left them dangling) */
    crawl_module_pin((const void *)preload_init);
    if (!ready || secure)
        return;
    /* (once: a copy dlopened later would start again a profile the
     * program has stopped) */
    if (crawl__hp_whole_process())
        crawl_heap_profile_from_options();
}

/* One in gpa_sample_rate: a pool allocation, else NULL. */
static void *sampled(size_t size, size_t alignment)
{
    if (secure || !crawl_gpa_should_sample_inline())
        return NULL;
    return crawl_gpa_allocate(size, alignment);
}

/* ---- the C entry points ----------------------------------------------------------------- */

/* The heap profile's hooks. decide, before an allocation of n bytes: what
 * the heap profile does with it (crawl__hp_decide: nothing, record it, a
 * sample, an aligned sample), taking the byte countdown down inline while
 * it is not at its end. recorded, after it: does that, the stack starting
 * at the entry point. forget: one going away, taken out before the memory
 * is handed back, so another thread cannot get the same address and
 * record it first. */
/* The heap profile's byte countdown taken down for an allocation of n
 * bytes (it counts n + 1), 1, while that leaves it above 0; else 0, the
 * countdown left as it was for the slow path (crawl__hp_decide) to end. */
static inline __attribute__((always_inline)) int countdown_passes(size_t n)
{
#if defined(__x86_64__) && defined(__GCC_ASM_FLAG_OUTPUTS__)
    /* n + 1 taken from the thread's word in one instruction (stc; sbb),
     * which leaves the flags of its result: 3 instructions fewer a malloc
     * than a load, an add, a test and a store (callgrind), and put back
     * on the slow branch. Between the two the word is at or below 0: a
     * signal handler's malloc there takes the sample the interrupted
     * allocation would have (the old load and store lost the handler's
     * count instead). n is signed here, as in the C below: an n of 2^63
     * or more (an allocation that fails) takes 2^64 - n - 1 bytes off
     * the count to the next sample, nothing for SIZE_MAX. */
    int passes;
    __asm__("stc\n\tsbbq %2, %0" : "+m"(crawl__hp_countdown), "=@ccg"(passes) : "r"(n));
    if (__builtin_expect(passes, 1))
        return 1;
    crawl__hp_countdown = (long)((unsigned long)crawl__hp_countdown + n + 1);
    return 0;
#else
    long left = crawl__hp_countdown_less(crawl__hp_countdown, n);
    if (__builtin_expect(left <= 0, 0))
        return 0;
    crawl__hp_countdown = left;
    return 1;
#endif
}

static inline __attribute__((always_inline)) int decide(size_t n)
{
    if (__builtin_expect(crawl__hp.on != 1, 1))
        return 0;
    if (crawl__hp.sampled && countdown_passes(n))
        return 0;
    return crawl__hp_decide(n);
}

/* Samples free can tell by their address (crawl__hp_addr_tellable): a
 * chunk glibc maps whole already is one (16 bytes past a page's start), so
 * a large sample is glibc's own calloc (fresh pages, not cleared again) or
 * realloc (mremap, not copied); a smaller one is made 4 KiB-aligned with
 * memalign. When memalign fails, the chunk glibc gave stays (free then
 * tests the filter) and errno is as it was. */
#define MAPPED_FROM (128 * 1024)        /* glibc's least mmap threshold */

/* ...and then by their chunk's shape, in glibc's size word before the
 * chunk (which glibc's free reads next anyway): a 4 KiB-aligned sample
 * asks glibc for PLACED_LEAST bytes at least (a chunk of 1,040), and one
 * 16 bytes past a page's start is a chunk glibc mapped whole (its
 * IS_MMAPPED bit). So an ordinary chunk that happens to start a page,
 * about 1 free in 200 here and twice that as samples move glibc's chunks
 * about (callgrind, bench_heap_work sampled every 512 KiB), goes from
 * free's fast path to glibc, where it went through free_slow's look in
 * the filter. p: tellable, glibc's (not the pool's, not a bootstrap
 * block). */
#define PLACED_LEAST 1024
#define CHUNK_SIZE_BITS (~(size_t)7)    /* glibc's size word: the size, then 3 flags */
#define CHUNK_MAPPED 2                  /* IS_MMAPPED */

static inline __attribute__((always_inline)) int sample_shaped(const void *p)
{
    size_t head = ((const size_t *)p)[-1];
    return ((uintptr_t)p & (CRAWL__HP_ALIGN - 1)) == 0
               ? (head & CHUNK_SIZE_BITS) >= PLACED_LEAST + 2 * sizeof(size_t)
               : (head & CHUNK_MAPPED) != 0;
}

/* p, glibc's: where and as free tells a placed sample */
static int placed(const void *p)
{
    return crawl__hp_addr_tellable((uintptr_t)p) && sample_shaped(p);
}

/* p, at a tellable address, freed: whether it may be a placed sample.
 * NULL and a bootstrap block take the slow path too (as before: free's
 * fast path keeps glibc's call a fall-through so); ordinary chunks go to
 * glibc. */
static inline __attribute__((always_inline)) int may_be_placed(const void *p)
{
    return !p || from_boot(p) || sample_shaped(p);
}

/* What an allocation p the heap profile decided `how` about is recorded
 * as: a sample decided SAMPLE_ALIGNED that is not where and as free tells
 * one (the pool's chunk, or glibc's when memalign failed) as a SAMPLE,
 * which crawl has free look for in the filter. */
static inline __attribute__((always_inline)) int placed_how(const void *p, int how)
{
    if (how == CRAWL__HP_SAMPLE_ALIGNED && (!p || crawl_gpa_owns_inline(p) || !placed(p)))
        return CRAWL__HP_SAMPLE;
    return how;
}

static inline __attribute__((always_inline)) void *recorded(void *p, size_t n, const void *caller,
                                                           int how)
{
    if (__builtin_expect(how != 0, 0))   /* (the stack starts at the entry point) */
        crawl__hp_record(p, n, (uintptr_t)caller, placed_how(p, how));
    return p;
}

/* Spare chunks for small samples. memalign costs glibc about 5,000
 * instructions here (callgrind, bench/heap_profile: its request is past
 * the small bins, so it first consolidates the fast bins), most of what a
 * sample cost. So a sample of up to SPARE_MAX bytes is made the size of
 * its class (a power of 2 from 1 KiB: at most its own size again, 1 KiB at
 * least), and when a sample whose chunk is a class's size is freed, free
 * keeps it (up to SPARES a class) for the next sample of that class: one
 * atomic exchange, the chunk aligned already. Only samples are kept: a
 * chunk the profile recorded is glibc's and live until that free. At most
 * 4 x 31 KiB are held so, for good. */
#define SPARE_MIN_SHIFT 10
_Static_assert(((size_t)1 << SPARE_MIN_SHIFT) >= PLACED_LEAST, "a class's sample is placed");
#define SPARE_CLASSES 5                  /* 1, 2, 4, 8, 16 KiB */
#define SPARE_MAX ((size_t)1 << (SPARE_MIN_SHIFT + SPARE_CLASSES - 1))
#define SPARES 4
static void *_Atomic spares[SPARE_CLASSES][SPARES];

/* the class of a sample of n bytes (n <= SPARE_MAX) */
static unsigned spare_class(size_t n)
{
    return n <= ((size_t)1 << SPARE_MIN_SHIFT)
               ? 0
               : (unsigned)(64 - __builtin_clzl(n - 1) - SPARE_MIN_SHIFT);
}

static void *spare_take(unsigned c)
{
    for (int i = 0; i < SPARES; i++)
        if (atomic_load_explicit(&spares[c][i], memory_order_relaxed)) {
            void *p = atomic_exchange_explicit(&spares[c][i], NULL, memory_order_acquire);
            if (p)
                return p;
        }
    return NULL;
}

/* The class whose spares p, a live 4 KiB-aligned chunk of glibc's, can
 * be one of (its usable size a class's size and up to 64 more: what
 * memalign gave for a sample of the class), else -1 */
static int spare_class_of(const void *p)
{
    size_t u = real_usable((void *)p);
    if (u < ((size_t)1 << SPARE_MIN_SHIFT) || u >= 2 * SPARE_MAX)
        return -1;
    unsigned c = (unsigned)(63 - __builtin_clzl(u) - SPARE_MIN_SHIFT);
    return u - ((size_t)1 << (SPARE_MIN_SHIFT + c)) < 64 ? (int)c : -1;
}

/* 1 if p, a 4 KiB-aligned sample being freed (recorded until now:
 * glibc's and live), is kept as a spare */
static int spare_keep(void *p)
{
    int c = spare_class_of(p);
    if (c < 0)
        return 0;
    for (int i = 0; i < SPARES; i++) {
        void *none = NULL;
        if (atomic_compare_exchange_strong_explicit(&spares[c][i], &none, p,
                                                    memory_order_release, memory_order_relaxed))
            return 1;
    }
    return 0;
}

/* p, 4 KiB-aligned and not a recorded sample, is freed while it is a
 * spare: a double free (kept, then freed again). Kept or freed to glibc,
 * it would be two allocations' memory: said, and the process aborted, as
 * glibc's free does for one it sees. A spare is a live chunk the size of
 * its class, so only that class's slots are looked at: an ordinary chunk
 * that happens to start a page (1 free in about 220 here) is told by its
 * size, where a scan of all 20 slots cost 0.7 instructions a malloc/free
 * pair (callgrind, bench_heap_work sampled every 512 KiB). */
static void spare_freed_again(const void *p)
{
    int c = spare_class_of(p);
    if (c < 0)
        return;
    for (int i = 0; i < SPARES; i++)
        if (atomic_load_explicit(&spares[c][i], memory_order_relaxed) == p) {
            char line[160];
            int n = snprintf(line, sizeof line,
                             "crawl: free(): double free of %p (freed before, and kept "
                             "for the heap profile's next sample)\n", p);
            ssize_t w = write(STDERR_FILENO, line, (size_t)n);
            (void)w;
            abort();
        }
}

static void *aligned_sample(size_t n, size_t alignment)
{
    if (n <= SPARE_MAX && alignment <= CRAWL__HP_ALIGN) {
        unsigned c = spare_class(n);
        void *p = spare_take(c);
        if (p)
            return p;
        n = (size_t)1 << (SPARE_MIN_SHIFT + c);
    } else if (n < PLACED_LEAST) {
        n = PLACED_LEAST;                /* (a wider alignment's: as big as free tells one) */
    }
    int e = errno;
    void *p = real_memalign(alignment > CRAWL__HP_ALIGN ? alignment : CRAWL__HP_ALIGN, n);
    if (!p)
        errno = e;
    return p;
}

static void *sample_malloc(size_t n)
{
    if (n >= MAPPED_FROM) {
        void *p = real_malloc(n);
        if (!p || placed(p))
            return p;
        real_free(p);                    /* (the threshold has grown past n) */
    }
    void *q = aligned_sample(n, 0);
    return q ? q : real_malloc(n);
}

static void *sample_calloc(size_t n, size_t size, size_t total)
{
    if (total >= MAPPED_FROM) {
        void *p = real_calloc(n, size);
        if (!p || placed(p))
            return p;
        real_free(p);
    }
    void *q = aligned_sample(total, 0);
    return q ? memset(q, 0, total) : real_calloc(n, size);
}

/* p: glibc's, taken out of the profile already; n > 0 */
static void *sample_realloc(void *p, size_t n)
{
    void *q = real_realloc(p, n);
    if (!q || placed(q))
        return q;
    void *a = aligned_sample(n, 0);
    if (!a)
        return q;
    memcpy(a, q, n);
    real_free(q);
    return a;
}

static inline __attribute__((always_inline)) void forget(void *p) { crawl_heap_profile_on_free(p); }

/* The common case, decided before glibc is called so that the call is a
 * tail call (no frame of the preload's own): as crawl__hook_kind says,
 * nothing to do, or the pool's countdown, or the heap profile's byte
 * countdown, or both, running and not at their end. 1 then, with the
 * countdowns taken down; 0 leaves them as they were, for alloc_slow() to
 * decide. The sampled heap profile's case comes first. */
static inline __attribute__((always_inline)) int plain_alloc(size_t n)
{
    int kind = __atomic_load_n(&hook_kind, __ATOMIC_RELAXED);
    if (__builtin_expect(kind == CRAWL__HOOK_SAMPLED, 1))
        return countdown_passes(n);
    if (kind == CRAWL__HOOK_GPA || kind == CRAWL__HOOK_BOTH) {
        uint32_t next = crawl__gpa_next;
        if (__builtin_expect(next <= 1, 0))
            return 0;
        if (kind == CRAWL__HOOK_BOTH && !countdown_passes(n))
            return 0;
        crawl__gpa_next = next - 1;
        return 1;
    }
    return kind == CRAWL__HOOK_PLAIN;
}

/* Everything but the common case, out of line: the entry points' fast
 * paths then need no registers saved. A real call from the entry point
 * (never a tail call: its frame stays), and captures skip this frame. */
__attribute__((noinline)) static void *alloc_slow(size_t n, const void *caller)
{
    crawl_regs here;
    crawl_capture_regs(&here);
    if (__builtin_expect(!ready, 0)) {
        resolve();
        if (!ready)
            return boot_alloc(n);
    }
    void *p = NULL;
    if (secure)
        crawl__gpa_next = UINT32_MAX;    /* never sampled: the fast path from now on */
    else if (crawl_gpa_should_sample_inline())
        p = crawl__gpa_allocate_from(n, 0, &here);
    int how = decide(n);
    if (!p)
        p = how == CRAWL__HP_SAMPLE_ALIGNED ? sample_malloc(n) : real_malloc(n);
    if (how)                             /* the stack starts above alloc_slow: at malloc, new... */
        crawl__hp_record_from(p, n, (uintptr_t)caller, &here, placed_how(p, how));
    NO_TAIL(p);
    return p;
}

/* alloc_slow through the entry point's own frame (never a tail call): the
 * stack starts there. */
__attribute__((always_inline)) static inline void *alloc_slow_kept(size_t n, const void *caller)
{
    void *p = alloc_slow(n, caller);
    NO_TAIL(p);
    return p;
}

/* Expanded into each entry point: stacks start at malloc, new, strdup...
 * The caller's address is taken in the slow branch only, so the fast path
 * needs no frame (the compiler makes it in that branch) and its call to
 * glibc is a tail call where the entry point allows. n is evaluated twice. */
#define ALLOC(n, caller)                                                                       \
    (__builtin_expect(plain_alloc(n), 1) ? real_malloc(n) : alloc_slow_kept((n), (caller)))

EXPORT void *malloc(size_t n) { return ALLOC(n, __builtin_return_address(0)); }

/* Called from free (never a tail call), so a pool chunk's free stack
 * starts at free, as its allocation stack starts at malloc. */
__attribute__((noinline)) static void free_slow(void *p)
{
    if (!p || from_boot(p))
        return;
    int all = __atomic_load_n(&free_kind, __ATOMIC_RELAXED) & CRAWL__FREE_ALL;
    if (all && __atomic_load_n(&crawl__hp.mode, __ATOMIC_RELAXED) != 1)
        crawl__hp_filter_unstick();      /* (a stopped whole-process profile: once) */
    int sample = (all ? crawl__hp.on != 0 : crawl__hp_may_hold(p)) && crawl__hp_forget_sample(p);
    if (__builtin_expect(crawl_gpa_owns_inline(p), 0)) {
        crawl_regs here;
        crawl_capture_regs(&here);
        crawl__gpa_deallocate_from(p, &here);
        NO_TAIL(p);
        return;
    }
    /* only a sample's chunk is kept: glibc's and live until now (a chunk
     * glibc has already, freed twice, still shows a class's size) */
    if (ready && ((uintptr_t)p & (CRAWL__HP_ALIGN - 1)) == 0) {
        if (sample && spare_keep(p))
            return;
        if (!sample)
            spare_freed_again(p);
    }
    real_free(p);                        /* (a resolver until glibc's is known) */
}

/* glibc's free unless p is the pool's or the free filter has it (a chunk
 * the heap profile holds, a bootstrap block), each tested only once
 * crawl__free_kind says it can be so: the sampled heap profile's frees
 * test the pointer's low bits, and for the few it passes the chunk's
 * shape (its samples are placed where free tells them: placed()),
 * GWP-ASan's the pool alone, recording every allocation the filter
 * (recording the whole process, no test: every pointer, FREE_ALL), and a
 * process with none goes straight to glibc. Each test branches off to
 * free_slow, so that glibc is reached without a frame. Expanded into free
 * and each operator delete, so that a free stack starts at the entry
 * point the program called. */
static inline __attribute__((always_inline)) void release(void *p)
{
    int kind = __atomic_load_n(&free_kind, __ATOMIC_RELAXED);
    if (__builtin_expect(kind == CRAWL__FREE_ALIGNED, 1)) {
        if (__builtin_expect(crawl__hp_addr_tellable((uintptr_t)p), 0)) {
            if (may_be_placed(p))
                goto slow;
        }
    } else if (kind != 0) {
        if (kind & CRAWL__FREE_ALL)
            goto slow;
        if ((kind & CRAWL__FREE_POOL) && __builtin_expect(crawl_gpa_owns_inline(p), 0))
            goto slow;
        if (kind & CRAWL__FREE_FILTER) {
            if (__builtin_expect(crawl__hp_filter_has(p), 0))
                goto slow;
        } else if ((kind & CRAWL__FREE_ALIGNED) && crawl__hp_addr_tellable((uintptr_t)p)) {
            goto slow;                   /* (the shape as well here, and GCC 12 gave free a
                                            frame before its first test) */
        }
    }
    real_free(p);
    return;
slow:
    free_slow(p);
    NO_TAIL(p);                          /* the entry point's frame stays: the stack starts there */
}

EXPORT void free(void *p) { release(p); }

EXPORT void *calloc(size_t n, size_t size)
{
    size_t total;
    if (__builtin_mul_overflow(n, size, &total)) {
        errno = ENOMEM;
        return NULL;
    }
    if (__builtin_expect(!ready, 0)) {
        resolve();
        if (!ready) {
            void *b = boot_alloc(total);
            return b ? memset(b, 0, total) : NULL;
        }
    }
    int how = decide(total);
    void *p = sampled(total, 0);
    if (p)
        memset(p, 0, total);
    else if (how == CRAWL__HP_SAMPLE_ALIGNED)
        p = sample_calloc(n, size, total);
    else
        p = real_calloc(n, size);
    return recorded(p, total, __builtin_return_address(0), how);
}

EXPORT size_t malloc_usable_size(void *p)
{
    if (!p || from_boot(p))
        return 0;
    if (crawl_gpa_owns_inline(p))
        return crawl_gpa_size(p);
    if (!ready)
        resolve();
    return ready ? real_usable(p) : 0;
}

EXPORT void *realloc(void *p, size_t n)
{
    const void *caller = __builtin_return_address(0);
    if (!p)
        return ALLOC(n, caller);
    if (from_boot(p) || crawl_gpa_owns_inline(p)) {
        /* move it: into a new allocation (which may be sampled again) */
        /* (a bootstrap block's size is not kept: copy no further than
         * the arena's end) */
        size_t old = from_boot(p) ? (size_t)(boot + sizeof boot - (char *)p) : crawl_gpa_size(p);
        if (n == 0) {
            free(p);
            return NULL;
        }
        void *q = ALLOC(n, caller);
        if (q)
            memcpy(q, p, old < n ? old : n);
        if (q && !from_boot(p)) {
            forget(p);
            crawl_gpa_deallocate(p);
        }
        return q;
    }
    if (!ready)
        resolve();
    crawl__hp_saved saved;
    crawl__hp_take(p, &saved);
    int how = decide(n);
    void *q = how == CRAWL__HP_SAMPLE_ALIGNED && n ? sample_realloc(p, n) : real_realloc(p, n);
    if (!q && n) {                       /* p stays: its entry as it was (size, stack) */
        crawl__hp_put_back(&saved);
        return NULL;
    }
    return recorded(q, n, caller, how);
}

static inline __attribute__((always_inline)) void *aligned(size_t alignment, size_t n,
                                                          const void *caller)
{
    if (__builtin_expect(!ready, 0)) {
        resolve();
        if (!ready)
            return NULL;
    }
    int how = decide(n);
    /* (the pool keeps an alignment it is given: a right-placed chunk of
     * 13 bytes at alignment 1 was at an odd address, where glibc gives
     * 16 at least, as the C standard wants for an object of that size) */
    void *p = sampled(n, alignment < 16 ? 16 : alignment);
    if (!p && how == CRAWL__HP_SAMPLE_ALIGNED)
        p = aligned_sample(n, alignment);
    return recorded(p ? p : real_memalign(alignment, n), n, caller, how);
}

EXPORT void *memalign(size_t alignment, size_t n)
{
    return aligned(alignment, n, __builtin_return_address(0));
}

EXPORT int posix_memalign(void **out, size_t alignment, size_t n)
{
    if (alignment < sizeof(void *) || (alignment & (alignment - 1)))
        return EINVAL;
    void *p = aligned(alignment, n, __builtin_return_address(0));
    if (!p)
        return ENOMEM;
    *out = p;
    return 0;
}

EXPORT void *aligned_alloc(size_t alignment, size_t n)
{
    return aligned(alignment, n, __builtin_return_address(0));
}

EXPORT void *valloc(size_t n)
{
    return aligned((size_t)sysconf(_SC_PAGESIZE), n, __builtin_return_address(0));
}

EXPORT void *pvalloc(size_t n)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    if (n > SIZE_MAX - (page - 1)) {     /* rounded up, it would wrap to 0 */
        errno = ENOMEM;
        return NULL;
    }
    return aligned(page, (n + page - 1) & ~(page - 1), __builtin_return_address(0));
}

EXPORT char *strdup(const char *s)
{
    size_t n = strlen(s) + 1;
    char *d = ALLOC(n, __builtin_return_address(0));
    return d ? memcpy(d, s, n) : NULL;
}

EXPORT char *strndup(const char *s, size_t max)
{
    size_t n = strnlen(s, max);
    char *d = ALLOC(n + 1, __builtin_return_address(0));
    if (!d)
        return NULL;
    memcpy(d, s, n);
    d[n] = '\0';
    return d;
}

/* ---- mappings (recorded with heap_profile_mmap=1) -------------------------------------
 * Before glibc's functions are known (dlsym itself may map), the system
 * calls themselves. */

static void *sys_mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
    if (real_mmap)
        return real_mmap(addr, len, prot, flags, fd, off);
    return (void *)syscall(SYS_mmap, addr, len, prot, flags, fd, off);
}

/* Inlined into each entry point: the stack starts at mmap or mmap64. */
static inline __attribute__((always_inline)) void *mapped(void *p, size_t len, const void *caller)
{
    if (__builtin_expect(crawl__hp.mmap, 0) && p != MAP_FAILED)
        crawl_heap_profile_mmap(p, len, (uintptr_t)caller);
    NO_TAIL(p);
    return p;
}

EXPORT void *mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
    return mapped(sys_mmap(addr, len, prot, flags, fd, off), len, __builtin_return_address(0));
}

EXPORT void *mmap64(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
    return mapped(sys_mmap(addr, len, prot, flags, fd, off), len, __builtin_return_address(0));
}

EXPORT int munmap(void *addr, size_t len)
{
    int rc = real_munmap ? real_munmap(addr, len) : (int)syscall(SYS_munmap, addr, len);
    if (__builtin_expect(crawl__hp.mmap, 0) && rc == 0)
        crawl_heap_profile_munmap(addr, len);
    return rc;
}

EXPORT void *mremap(void *old, size_t old_len, size_t len, int flags, ...)
{
    void *want = NULL;
    if (flags & MREMAP_FIXED) {          /* the new address, only then */
        va_list ap;
        va_start(ap, flags);
        want = va_arg(ap, void *);
        va_end(ap);
    }
    void *p = real_mremap ? real_mremap(old, old_len, len, flags, want)
                          : (void *)syscall(SYS_mremap, old, old_len, len, flags, want);
    if (__builtin_expect(crawl__hp.mmap, 0))
        crawl_heap_profile_mremap(old, old_len, p, len, flags);
    NO_TAIL(p);
    return p;
}

/* ---- the C++ operators (their mangled names) ------------------------------------------------ */

/* A throwing operator new that got nothing, as the C++ runtime's own
 * would go on: call the new_handler while there is one (it may free
 * memory, throw or end the program) and try again, then throw
 * std::bad_alloc. Both through libstdc++ (std::get_new_handler,
 * std::__throw_bad_alloc), found with dlsym: a program that calls
 * operator new has it loaded. The exception unwinds through this C frame
 * by its CFI. Without libstdc++: abort. */
/* operator new's allocation of size bytes (alignment 0: malloc's) */
#define NEW_TRY(size, alignment, caller)                                                       \
    ((alignment) ? aligned((alignment), (size), (caller)) : ALLOC((size), (caller)))

typedef void (*new_handler_fn)(void);

/* std::get_new_handler(), or NULL (none set, or no C++ runtime) */
static new_handler_fn current_new_handler(void)
{
    new_handler_fn (*get)(void) =
        (new_handler_fn(*)(void))dlsym(RTLD_DEFAULT, "_ZSt15get_new_handlerv");
    return get ? get() : NULL;
}

__attribute__((noinline)) static void *new_failed(size_t n, size_t alignment,
                                                   const void *caller)
{
    for (;;) {
        new_handler_fn h = current_new_handler();
        if (!h) {
            void (*throw_bad_alloc)(void) =
                (void (*)(void))dlsym(RTLD_DEFAULT, "_ZSt17__throw_bad_allocv");
            if (throw_bad_alloc)
                throw_bad_alloc();
            abort();
        }
        h();
        void *p = NEW_TRY(n, alignment, caller);
        if (p)
            return p;
    }
}

#define CALLER __builtin_return_address(0)
/* The throwing forms, in the entry point: n bytes (at least one), or what
 * new_failed makes of its failure */
#define NEW_OR_THROW(n, alignment)                                                             \
    ({                                                                                         \
        size_t new_n_ = (n) ? (n) : 1;                                                         \
        void *new_p_ = NEW_TRY(new_n_, (alignment), CALLER);                                   \
        __builtin_expect(new_p_ != NULL, 1) ? new_p_ : new_failed(new_n_, (alignment), CALLER); \
    })

EXPORT void *_Znwm(size_t n) { return NEW_OR_THROW(n, 0); }
EXPORT void *_Znam(size_t n) { return NEW_OR_THROW(n, 0); }
/* The nothrow forms: on failure, with a new_handler installed, the C++
 * runtime's own nothrow operator (RTLD_NEXT), which runs the handler,
 * tries again (through this malloc: recorded) and catches its bad_alloc,
 * which C cannot. Without a handler, NULL at once, as the runtime would. */
__attribute__((noinline)) static void *nothrow_retry(const char *name, size_t n, size_t a,
                                                     const void *t)
{
    if (!current_new_handler())
        return NULL;
    void *next = dlsym(RTLD_NEXT, name);
    if (!next)
        return NULL;
    return a ? ((void *(*)(size_t, size_t, const void *))next)(n, a, t)
             : ((void *(*)(size_t, const void *))next)(n, t);
}
#define NOTHROW(name, n, a, t)                                                                     ({                                                                                                 size_t nothrow_n_ = (n) ? (n) : 1;                                                             void *nothrow_p_ = (a) ? aligned((a), nothrow_n_, CALLER) : ALLOC(nothrow_n_, CALLER);         nothrow_p_ ? nothrow_p_ : nothrow_retry((name), nothrow_n_, (a), (t));                     })

EXPORT void *_ZnwmRKSt9nothrow_t(size_t n, const void *t)
{
    return NOTHROW("_ZnwmRKSt9nothrow_t", n, 0, t);
}
EXPORT void *_ZnamRKSt9nothrow_t(size_t n, const void *t)
{
    return NOTHROW("_ZnamRKSt9nothrow_t", n, 0, t);
}
EXPORT void *_ZnwmSt11align_val_t(size_t n, size_t a) { return NEW_OR_THROW(n, a); }
EXPORT void *_ZnamSt11align_val_t(size_t n, size_t a) { return NEW_OR_THROW(n, a); }
EXPORT void *_ZnwmSt11align_val_tRKSt9nothrow_t(size_t n, size_t a, const void *t)
{
    return NOTHROW("_ZnwmSt11align_val_tRKSt9nothrow_t", n, a, t);
}
EXPORT void *_ZnamSt11align_val_tRKSt9nothrow_t(size_t n, size_t a, const void *t)
{
    return NOTHROW("_ZnamSt11align_val_tRKSt9nothrow_t", n, a, t);
}
EXPORT void _ZdlPv(void *p) { release(p); }
EXPORT void _ZdaPv(void *p) { release(p); }
EXPORT void _ZdlPvm(void *p, size_t n) { (void)n; release(p); }
EXPORT void _ZdaPvm(void *p, size_t n) { (void)n; release(p); }
EXPORT void _ZdlPvRKSt9nothrow_t(void *p, const void *t) { (void)t; release(p); }
EXPORT void _ZdaPvRKSt9nothrow_t(void *p, const void *t) { (void)t; release(p); }
EXPORT void _ZdlPvSt11align_val_t(void *p, size_t a) { (void)a; release(p); }
EXPORT void _ZdaPvSt11align_val_t(void *p, size_t a) { (void)a; release(p); }
EXPORT void _ZdlPvmSt11align_val_t(void *p, size_t n, size_t a) { (void)n, (void)a; release(p); }
EXPORT void _ZdaPvmSt11align_val_t(void *p, size_t n, size_t a) { (void)n, (void)a; release(p); }
EXPORT void _ZdlPvSt11align_val_tRKSt9nothrow_t(void *p, size_t a, const void *t)
{
    (void)a, (void)t;
    release(p);
}
EXPORT void _ZdaPvSt11align_val_tRKSt9nothrow_t(void *p, size_t a, const void *t)
{
    (void)a, (void)t;
    release(p);
}
