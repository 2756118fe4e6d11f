/* crawl heap profiles: who holds native memory, with script frames in the
 * stacks. An allocator's hooks (libcrawl-preload.so for a whole process, or
 * an embedder's own allocator) report each allocation and free; crawl keeps
 * a live table (size, the caller's pc, a mixed stack id from the depot) and
 * writes it as people read heaps: by caller module and by stack (text,
 * JSON), pprof, collapsed stacks, an SVG flame graph; and at exit a leak
 * report in LeakSanitizer's shape.
 *
 * Options (crawl/sanitizer.h; CRAWL_OPTIONS for the preload):
 *   heap_profile=1          record (the preload's switch; the API records
 *                           whenever crawl_heap_profile_start was called)
 *   heap_profile_path=FILE  write the live heap at exit, the format from the
 *                           extension: .pb.gz pprof, .json, .folded, .svg,
 *                           anything else text
 *   heap_profile_signal=N   on signal N (SIGUSR2 is 12) write the profile:
 *                           to heap_profile_path (replaced each time), else
 *                           as text to log_path; a helper thread writes it
 *                           (the handler writes a byte to a pipe). Not in a
 *                           fork child. Not 9, 19, a fault's (4-8, 11, 31),
 *                           27 (SIGPROF, the profiler's), glibc's 32 and
 *                           33, or crawl's walk signal.
 *   heap_stack_min_size=N   a stack only for allocations of N bytes or more
 *   heap_sample_bytes=N     a stack for one allocation every N bytes on
 *                           average (tcmalloc's heap sampler: the outputs
 *                           scale the sampled stacks back to unbiased totals);
 *                           0: every allocation (the default)
 *   heap_stack_fast=1       frame-pointer stacks (0: DWARF CFI, right in code
 *                           built without frame pointers)
 *   heap_profile_mmap=1     also record regions mapped by mmap/mremap until
 *                           munmap takes them back (crawl_heap_profile_mmap)
 *   leak_check=1            the leak report at exit (implies heap_profile=1)
 *   leak_check_exitcode=23  the exit status when leaks were found (0: keep
 *                           the program's own)
 *   leak_check_reachable=1  the report also lists what is still reachable
 */
#ifndef CRAWL_HEAP_PROFILE_H
#define CRAWL_HEAP_PROFILE_H

#include <stddef.h>
#include <stdint.h>

#include <crawl/common.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The hooks' fast paths, inline (their state is exported; not API):
 * on is 0 never started, 1 recording, 2 stopped (frees are still taken
 * out); sampled is 1 when heap_sample_bytes samples; mode, both in one
 * load: 0 recording nothing, 1 every allocation, 2 sampled by bytes;
 * mmap is 1 when heap_profile_mmap=1 records mapped regions too.
 * The free filter: counts has, per hash, how many recorded pointers have
 * it (255: stuck there); bits has a bit per hash, set while its count is
 * not 0, so that a free of memory never recorded costs one load from 2 KiB
 * that stay in the L1 cache. crawl__hp_countdown is the thread's bytes to
 * its next sample (an allocation of n bytes counts n + 1: one of 0 bytes
 * can be sampled too). */
CRAWL_API extern struct crawl__hp_fast {
    int on, sampled;
    unsigned char counts[1 << 14];      /* (where 0.1's inline hooks read it) */
    int mode, mmap;
    uint64_t bits[(1 << 14) / 64];
} crawl__hp __attribute__((aligned(64)));
CRAWL_API extern __thread long crawl__hp_countdown __attribute__((tls_model("initial-exec")));
/* A countdown less an allocation of n bytes, which counts n + 1, the
 * subtraction wrapping (n may be any size). Not API. */
static inline long crawl__hp_countdown_less(long countdown, size_t n)
{
    return (long)((unsigned long)countdown - n - 1);
}
/* What libcrawl-preload.so's malloc does before it calls glibc's, in one
 * load (of its own copy: crawl__hp_mirror_kinds), kept by crawl as the
 * heap profile starts and stops, the options change and the guarded pool
 * is made: PLAIN nothing (not recording, no
 * pool), GPA count down to the pool's next sample, SAMPLED count down the
 * bytes to the heap profile's next sample (no pool), BOTH both, SLOW go to
 * the slow path (recording every allocation). Not API. */
enum { CRAWL__HOOK_GPA, CRAWL__HOOK_PLAIN, CRAWL__HOOK_SAMPLED, CRAWL__HOOK_BOTH, CRAWL__HOOK_SLOW };
CRAWL_API extern int crawl__hook_kind;
/* What libcrawl-preload.so's free must test before it calls glibc's, in
 * one load: FREE_POOL once the guarded pool is made (an address in it goes
 * back to the pool), FREE_ALIGNED once a sample the preload placed where
 * its free tells it was put in the free filter (passed as
 * CRAWL__HP_SAMPLE_ALIGNED, which the preload does for such a chunk
 * only): 4 KiB-aligned, or 16 bytes past a page's start, where glibc puts
 * the memory of a chunk it maps whole (crawl__hp_addr_tellable), and of a
 * sample's shape (the preload's sample_shaped); FREE_FILTER once any other
 * pointer was (recorded, or stuck there), at such an address too. While
 * only placed samples were ever put there, a free tests its pointer's low
 * bits and then its chunk's shape, no filter. 0: none, glibc's free at
 * once. Bits are only ever set, each before what needs it is published
 * (the pool's bounds, the filter's bit), so a free of a pointer handed
 * over from the thread that got it sees them; FREE_ALL alone is taken off
 * again. Not API. */
/* FREE_ALL: the filter is stuck whole (the preload recording every
 * allocation): every pointer may be recorded, free looks each up without
 * the filter's test. Taken off once the filter is counted again
 * (crawl__hp_filter_unstick, after the profile stops recording every
 * allocation). */
enum { CRAWL__FREE_POOL = 1, CRAWL__FREE_FILTER = 2, CRAWL__FREE_ALIGNED = 4, CRAWL__FREE_ALL = 8 };
#define CRAWL__HP_ALIGN 4096
static inline int crawl__hp_addr_tellable(uintptr_t p) { return (p & 0xfef) == 0; }
CRAWL_API extern int crawl__free_kind;
/* Non-zero while the thread is inside pthread_getattr_np (counted by
 * libcrawl-preload.so's wrapper). glibc holds the thread's lock there and
 * allocates (fopen of /proc/self/maps, the CPU set): a walk made for such
 * an allocation must not attach the thread, which calls
 * pthread_getattr_np again and would wait for ever. Not API. */
CRAWL_API extern __thread int crawl__in_getattr __attribute__((tls_model("initial-exec")));
CRAWL_API void crawl__heap_profile_slow(const void *p, size_t size, uintptr_t caller);
/* libcrawl-preload.so's slow paths decide before they allocate, so that a
 * sample can be made CRAWL__HP_ALIGN-aligned: what to do with an
 * allocation of size bytes (the byte countdown taken down), 0 nothing,
 * CRAWL__HP_RECORD record it (every allocation), CRAWL__HP_SAMPLE record
 * it as a sample, CRAWL__HP_SAMPLE_ALIGNED the same, made aligned (the
 * sampling interval is wide enough for the memory it costs). Then
 * crawl__hp_record does it (how: the decision, SAMPLE_ALIGNED only for a
 * chunk the preload did place so, else SAMPLE), the stack starting at its
 * caller, or crawl__hp_record_from at the caller of *from's frame. */
enum { CRAWL__HP_RECORD = 1, CRAWL__HP_SAMPLE, CRAWL__HP_SAMPLE_ALIGNED };
CRAWL_API int crawl__hp_decide(size_t size);
CRAWL_API void crawl__hp_record(const void *p, size_t size, uintptr_t caller, int how);
CRAWL_API void crawl__hp_record_from(const void *p, size_t size, uintptr_t caller,
                                     const crawl_regs *from, int how);
/* libcrawl-preload.so's free, where crawl__hp_may_hold(p): p taken out
 * of the profile, as crawl_heap_profile_free; 1 if it was recorded as a
 * sample. */
CRAWL_API int crawl__hp_forget_sample(const void *p);
/* The preload's realloc: p's entry taken out before glibc's realloc (as a
 * free of p), and put back as it was when that fails (p stays, with its
 * own size, stack and flags, the live table's stamp among them: a leak
 * check that ran meanwhile finds it the same entry). Not API. */
typedef struct crawl__hp_saved {
    uintptr_t ptr, caller;
    size_t size;
    uint32_t stack, flags;
    int had;
} crawl__hp_saved;
CRAWL_API void crawl__hp_take(const void *p, crawl__hp_saved *out);
CRAWL_API void crawl__hp_put_back(const crawl__hp_saved *saved);
/* Put p in the free filter for good (a count stuck at 255, also after
 * the filter is counted again: crawl__hp_filter_unstick). */
CRAWL_API void crawl__hp_filter_stick(const void *p);
/* libcrawl-preload.so records the whole process: while a start that
 * records every allocation runs, frees look every pointer up (the filter
 * is stuck whole, and crawl__free_kind has FREE_ALL). 1 at the process's
 * first call, 0 after (a second copy of the preload, dlopened: the
 * options were read already). Not API. */
CRAWL_API int crawl__hp_whole_process(void);
/* The preload's free, with FREE_ALL: once the profile no longer records
 * every allocation (stopped, or sampled), the filter stuck whole is
 * counted again from the live table, and FREE_ALL taken off: later frees
 * test the filter again. Once; at once when there is nothing to do, or
 * when another thread (or the code this signal handler interrupted) is
 * counting it or starting the profile. Takes every shard's lock in turn,
 * as a free's lookup takes one (not async-signal-safe, as free is not);
 * allocates nothing. Not API. */
CRAWL_API void crawl__hp_filter_unstick(void);
/* libcrawl-preload.so's own copies of crawl__hook_kind and
 * crawl__free_kind, which its malloc and free read with no GOT load:
 * crawl stores each change in them too, the copies' first from its current
 * values. Each copy of the preload in the process registers its own (up
 * to 8; a pair registered again is kept once). 0, -EINVAL for NULL, or
 * -ENOSPC: the copies are not kept, and that preload must not rely on
 * them. Lock-free. Not API. */
CRAWL_API int crawl__hp_mirror_kinds(int *hook_kind, int *free_kind);
/* The same, the stack starting at the caller of the frame whose registers
 * are *from (an allocator whose slow path is a function of its own). */
CRAWL_API void crawl__heap_profile_slow_from(const void *p, size_t size, uintptr_t caller,
                                             const crawl_regs *from);
static inline unsigned crawl__hp_filter_slot(const void *p)
{
    return (unsigned)(((uint64_t)(uintptr_t)p >> 4) * 0x9e3779b97f4a7c15ULL >> 50);
}
/* 1 if p may be a recorded pointer (a free must then look it up). */
static inline int crawl__hp_filter_has(const void *p)
{
    unsigned slot = crawl__hp_filter_slot(p);
    return (int)(__atomic_load_n(&crawl__hp.bits[slot / 64], __ATOMIC_RELAXED) >> (slot % 64)) & 1;
}

/* 1 while recording. Async-signal-safe (one load). */
static inline int crawl_heap_profile_active(void) { return crawl__hp.on == 1; }

/* Start recording with the current options (they are read here, and again
 * at each option change). Idempotent. Sampled, the calling thread's count
 * of bytes to its next sample is drawn again for the interval read here;
 * another thread's goes on until it runs out (README, Limits). 0.
 * Thread-safe; not
 * async-signal-safe (reads the options: the process's first read
 * allocates); allocates nothing else (the live table starts in static
 * memory and grows by mmap as it records). */
CRAWL_API int crawl_heap_profile_start(void);
/* What libcrawl-preload.so calls when it loads: start recording when the
 * options say heap_profile=1 or leak_check=1, and at exit write
 * heap_profile_path and run the leak check (with leaks found, the process
 * exits with leak_check_exitcode, 23 by default, as LeakSanitizer's), and
 * with heap_profile_signal start the helper thread and its handler. 1 if
 * recording started, 0 if the options did not ask, or a negative errno.
 * Thread-safe; not async-signal-safe. Allocates: registering the exit
 * handler (atexit) may, and starting heap_profile_signal's helper thread
 * does (pthread_create). */
CRAWL_API int crawl_heap_profile_from_options(void);
/* Stop recording; what was recorded stays (outputs still work), frees of
 * recorded chunks are still taken out. Thread-safe, async-signal-safe,
 * allocates nothing (atomic stores). */
CRAWL_API void crawl_heap_profile_stop(void);

/* An allocator's hooks. crawl_heap_profile_alloc records p (size bytes;
 * caller: the return address into the allocating code, or 0 for "the frame
 * above the hook") with a mixed stack as the options say; the stack starts
 * at the function that called crawl_heap_profile_alloc. With
 * heap_sample_bytes=N only one allocation in every N bytes (on average) is
 * recorded, with its stack; the outputs scale the samples back to
 * estimates of the whole heap. crawl_heap_profile_free
 * takes p out (unknown pointers are ignored). Neither allocates through
 * malloc (the table and the depot grow by mmap) and both are re-entrancy
 * safe: an allocation made while crawl itself works (compiling CFI on a
 * first walk through a module) is not recorded. Thread-safe: the table is
 * sharded, no global lock. Not async-signal-safe. Fork-safe: the child
 * keeps the parent's table. */
/* (p is an address only: the memory behind it is never read, so GCC may not
 * warn that a fresh, uninitialized chunk is passed) */
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 11
#define CRAWL__ADDRESS_ONLY __attribute__((access(none, 1)))
#else
#define CRAWL__ADDRESS_ONLY
#endif
CRAWL_API void crawl_heap_profile_alloc(const void *p, size_t size,
                                        uintptr_t caller) CRAWL__ADDRESS_ONLY;
CRAWL_API void crawl_heap_profile_free(const void *p) CRAWL__ADDRESS_ONLY;

/* Mapped regions (heap_profile_mmap=1; Matrix's mmap hooks): a table of
 * their own, of whole pages. crawl_heap_profile_mmap records [addr,
 * addr + len) with a stack (every mapping: they are few), replacing what
 * it overlaps; crawl_heap_profile_munmap takes back any part of any
 * region (trimming or splitting it); crawl_heap_profile_mremap, given
 * mremap's flags, moves what was recorded at old to addr with the stack
 * that mapped it (with MREMAP_DONTUNMAP the old pages stay: addr is a new
 * region, with a stack of its own). caller as for
 * crawl_heap_profile_alloc. Recorded only while recording with the option
 * on; mappings crawl makes while it records or holds one of its locks are
 * left out. The
 * outputs list regions as objects whose stacks start at the mapping
 * function, weight 1 when sampling; the leak check ignores them, as
 * LeakSanitizer does. libcrawl-preload.so and the PLT hooks call these
 * from mmap, mmap64, munmap and mremap. Thread-safe (one lock); not
 * async-signal-safe; never call malloc. */
CRAWL_API void crawl_heap_profile_mmap(const void *addr, size_t len, uintptr_t caller);
CRAWL_API void crawl_heap_profile_munmap(const void *addr, size_t len);
CRAWL_API void crawl_heap_profile_mremap(const void *old, size_t old_len, const void *addr,
                                         size_t len, int flags);
/* Bytes and regions recorded now (either pointer may be NULL). Thread-safe
 * (the regions' lock); not async-signal-safe (that lock); allocates
 * nothing. */
CRAWL_API void crawl_heap_profile_mapped(size_t *bytes, size_t *regions);

/* An allocator's hooks, the inline forms: call after every allocation and
 * before every free (with the memory still allocated). Not sampled, an
 * allocation costs a decrement and a branch, and a free a load and a
 * branch; the rest is crawl_heap_profile_alloc/free's. */
/* (always inlined: the recorded stack starts at the allocator's own
 * function, never at a copy of this one a compiler chose not to inline) */
/* 1 if the allocation p of size bytes goes to the slow hook (recording,
 * and not sampling or with the byte countdown run out); takes the
 * countdown down. Not API: the inline hooks' and the preload's test. */
static inline __attribute__((always_inline)) int crawl__heap_profile_wants(const void *p,
                                                                           size_t size)
{
    if (__builtin_expect(crawl__hp.on != 1, 1) || !p)
        return 0;
    if (!crawl__hp.sampled)
        return 1;
    crawl__hp_countdown = crawl__hp_countdown_less(crawl__hp_countdown, size);
    return crawl__hp_countdown <= 0;
}
static inline __attribute__((always_inline)) void crawl_heap_profile_on_alloc(const void *p,
                                                                              size_t size,
                                                                              uintptr_t caller)
{
    if (crawl__heap_profile_wants(p, size))
        crawl__heap_profile_slow(p, size, caller);
}
/* 1 if the profile may hold p (recording, and its filter bit set): only
 * then has a free of p to look it up. Not API. */
static inline __attribute__((always_inline)) int crawl__hp_may_hold(const void *p)
{
    return !__builtin_expect(crawl__hp.on == 0, 1) && p && crawl__hp_filter_has(p);
}
static inline __attribute__((always_inline)) void crawl_heap_profile_on_free(const void *p)
{
    if (crawl__hp_may_hold(p))
        crawl_heap_profile_free(p);
}

/* Run-time PLT/GOT hooks (Matrix's memory hook, xhook), for a process that
 * is not started under libcrawl-preload.so or for chosen libraries only:
 * the GOT entries through which every loaded module whose path matches the
 * POSIX extended regex `include` and not `ignore` (NULL or "": nothing
 * ignored) calls or takes the address of malloc, calloc, realloc, free,
 * memalign, posix_memalign, aligned_alloc, valloc, pvalloc, strdup,
 * strndup, operator new/new[] (plain, nothrow) and delete/delete[] (plain,
 * sized) point at crawl's hooks, which call what the process would have
 * called and record while crawl_heap_profile_active(); with
 * heap_profile_mmap=1 at install, a table apart too: mmap, mmap64, munmap
 * and mremap (crawl_heap_profile_mmap and its kin). dlopen is hooked
 * too: a library loaded later through a hooked module is hooked when it
 * matches. libcrawl, libcrawl-preload.so and the dynamic loader are never
 * hooked, nor is a program that links libcrawl.a (crawl's own calls would
 * go through the hooks): hook such a program's libraries, or use the
 * shared library. Relocations are read from the module files with libelf; a
 * read-only RELRO page is made writable for the store and read-only again
 * (one found writable, in a module dlopen is still relocating, stays so;
 * the loader making it read-only between that look and the store is a
 * window left open). 0, -EINVAL
 * (NULL include, a bad regex), -EBUSY (installed already). Thread-safe (a
 * call racing with the store sees the old or the new entry); not
 * async-signal-safe. Allocates (the regexes, libelf reading the modules'
 * files, the list of entries written: malloc). Limits: a dlopen made
 * through the hook resolves a relative name with libcrawl's search path,
 * not its caller's. An entry bound to another definition than the
 * process's (a module loaded RTLD_DEEPBIND with an allocator of its own)
 * is left unhooked, but one such module's lazily bound entries, not yet
 * called, are hooked and reach the process's; a function the process
 * does not define (operator new in a C program that dlopened a C++
 * library RTLD_LOCAL) is not hooked in any module. */
CRAWL_API int crawl_heap_hooks_install(const char *include, const char *ignore);
/* Put back every GOT entry written, exactly its old value. Entries of
 * modules unloaded meanwhile are skipped, and so is any entry that no
 * longer holds crawl's hook (another module loaded at that address since:
 * its memory is left alone). A hooked module unloaded and loaded again is
 * hooked again at the next scan (install, a hooked dlopen). Frees made
 * after it are not seen: what was recorded while installed stays live in
 * the profile and the leak check until crawl_heap_profile_stop or a later
 * install's free of it. Thread-safe; not async-signal-safe (a lock,
 * dl_iterate_phdr); allocates nothing. */
CRAWL_API void crawl_heap_hooks_uninstall(void);
/* How many GOT entries point at crawl's hooks now (those of modules
 * unloaded since are forgotten). Thread-safe; not async-signal-safe (a
 * lock, dl_iterate_phdr); allocates nothing. */
CRAWL_API size_t crawl_heap_hooks_count(void);

typedef struct crawl_heap_totals {
    size_t live_bytes, live_objects;    /* recorded chunks not freed (sampled: the samples) */
    size_t stacks;                      /* distinct stacks among them */
    unsigned long dropped;              /* allocations not recorded (no memory for the table) */
} crawl_heap_totals;
/* The totals now; out must not be NULL. Thread-safe; takes each shard's
 * lock in turn, so not async-signal-safe. Allocates: a copy of the table
 * (mmap) that glibc's qsort sorts (it may malloc; not recorded). */
CRAWL_API void crawl_heap_profile_totals(crawl_heap_totals *out);

typedef enum crawl_heap_format {
    CRAWL_HEAP_TEXT,                    /* by caller module, then by stack */
    CRAWL_HEAP_JSON,                    /* the same, as one JSON object */
    CRAWL_HEAP_FOLDED,                  /* collapsed stacks: "root;...;leaf bytes" */
    CRAWL_HEAP_SVG,                     /* a self-contained flame graph of live bytes */
    CRAWL_HEAP_PPROF                    /* pprof's profile.proto, gzip-compressed */
} crawl_heap_format;

/* Write the live heap to fd in format. 0, -EINVAL (bad format or fd),
 * -ENOMEM, -EIO (a write failed). Not async-signal-safe (symbolizes,
 * allocates: those allocations are not recorded). Thread-safe: other
 * threads go on allocating; the output is a consistent copy of each shard. */
CRAWL_API int crawl_heap_profile_write_fd(int fd, crawl_heap_format format);
/* The same to path, the format from its extension as for
 * heap_profile_path. A regular file is written whole beside path (PATH.tmp.
 * PID.TID), then renamed over it: readers and other writers of the same
 * path never see it half written; a symbolic link stays (its target is
 * replaced); a device or FIFO, or a path in a directory where no file can
 * be made, is written in place. 0 or a negative errno value; -ECANCELED
 * for any path but a device, a FIFO or a descriptor's once the program
 * exits (crawl's exit hook runs, from another thread: a temporary file
 * started then would be cut off, and stay). Not
 * async-signal-safe, thread-safe and allocating as
 * crawl_heap_profile_write_fd (for a regular file each call writes its own
 * temporary file, and the last rename wins). */
CRAWL_API int crawl_heap_profile_write(const char *path);
/* The format heap_profile_path would choose for path. String compares
 * only: async-signal-safe, thread-safe, allocates nothing. */
CRAWL_API crawl_heap_format crawl_heap_format_for(const char *path);

/* LeakSanitizer's check, now: the stacks (from their stack pointer up; for
 * the calling thread from here), registers, static data (writable segments
 * of every module) and static TLS of the threads crawl knows (the caller and
 * every attached thread) are scanned conservatively for pointers into
 * recorded chunks, then the chunks reached, transitively. A chunk not
 * reached is a leak: "direct" when no other leaked chunk points to it,
 * "indirect" otherwise (a chunk's pointers to itself do not count). Other
 * attached threads give their stack pointer and every general-purpose
 * register through crawl's walk signal (crawl_walk_thread; those that block
 * it are asked last, each once it unblocks, all within 50 ms, and one that
 * still blocks it or does not answer within 200 ms has its whole stack
 * scanned). They are not stopped while
 * the scan runs: memory they may unmap meanwhile is read through
 * process_vm_readv, never faulting; a chunk of theirs freed meanwhile is
 * not reported (the chunks not reached are looked up again, after the
 * direct and after the indirect pass);
 * but a pointer another thread moves, while the scan runs, from memory
 * not yet scanned to memory already scanned is missed, and its chunk
 * reported, as is a live chunk whose only pointer was in a chunk freed
 * meanwhile (as an indirect leak under no direct one, when that chunk was
 * freed between the two passes) (LeakSanitizer stops every thread; crawl
 * does not): check
 * from a quiet moment for a report that depends on no timing. The report, grouped by allocation
 * stack, goes to fd (-1: the sanitizer's log_path), in LeakSanitizer's
 * wording ("Direct leak of N byte(s) in M object(s) allocated from:",
 * "SUMMARY: ..."). The number of leaked objects, or a negative errno
 * value: -EINVAL while the heap profile samples (heap_sample_bytes: the
 * table lacks most chunks; with leak_check=1 the profile records every
 * allocation whatever heap_sample_bytes says). Threads crawl does not know have their stacks scanned whole as
 * anonymous memory and no registers: run it when they are gone or idle
 * (at exit). A stack glibc made for an attached thread is left out below
 * the thread's descriptor while glibc's records say the thread has exited
 * and none runs there (glibc keeps such stacks for its next threads: stale
 * copies of an address there would hide a leak; a thread started there
 * later is on glibc's lists of live threads and is scanned; a stack no
 * longer laid out as glibc's, one the program gave or one without a guard
 * page are scanned whole); the descriptor, with the value pthread_join
 * returns, is still scanned. While the scan runs the live table does not
 * grow (a table grown then would be scanned as the program's memory, its
 * copies of chunk addresses hiding leaks): a shard fills to 7/8 instead
 * of 1/2, and past that another thread's allocation is not recorded
 * (counted with those made while crawl was busy). Checks from several
 * threads take turns scanning (each one's copy of the table holds every
 * chunk's address; the reports, which call describe_method hooks, are
 * written outside that turn); profiles written meanwhile copy no
 * addresses; a child of a fork made while a check runs does not inherit
 * its state (mapped MADV_WIPEONFORK), and in a child of a fork made while
 * other threads ran, the modules' static data is read from their files'
 * writable mappings in /proc/self/maps, not dl_iterate_phdr (whose lock
 * glibc leaves as the fork found it: held, if another thread was inside),
 * and the report's symbols come without separate debug info.
 * Cancellation is held off while it runs. Allocates; not async-signal-safe; thread-safe. */
CRAWL_API long crawl_leak_check(int fd);

#ifdef __cplusplus
}
#endif

#endif
