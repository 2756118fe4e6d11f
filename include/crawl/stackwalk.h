/* crawl — the mixed stack walk: Frames merged with native frames.
 *
 * A walk reports, newest first, every native frame found by unwinding and
 * every Frame on the calling thread's chain, each Frame right before the
 * native frame that contains it (the merge rule in docs/design.md). Interpreter
 * segment Frames report their VM activations in their place.
 *
 * Two native unwinders, chosen by flag. Precise (the default): each
 * module's DWARF CFI compiled once into rule tables (see "the CFI cache"
 * below), libunwind only for what a rule cannot express, in normal context.
 * Fast (CRAWL_WALK_FAST): the frame-pointer chain, except where frame
 * pointers mislead: the interrupted frame of a signal context, a step that
 * fails or leads to a value that is not code, and a step that would pass a
 * Frame are taken by the CFI rules. Both place every Frame by true frame
 * boundaries; a value that is not code (a loaded module's executable
 * segment or a registered code range) is never reported as a frame. Where
 * unwinding cannot go on, the walk resumes at the next transition Frame and
 * flags the first frame after the gap CRAWL_CF_AFTER_GAP. What fast mode
 * still gets wrong without frame pointers (README, "Building your VM for
 * crawl"): native frames of frameless code between two frames that keep
 * frame pointers can be missing; their order and the Frames' never are.
 *
 * Thread safety: a walk reads only the calling thread's chain and stack;
 * any number of threads may walk at once. Code ranges may be added and
 * removed, and modules loaded and unloaded, while other threads walk.
 * Signal safety: crawl_walk, crawl_walk_context and crawl_backtrace with
 * CRAWL_WALK_SIGNAL_SAFE allocate nothing, take no lock, and never call
 * libunwind or dl_iterate_phdr, in both modes; they may be called from a
 * signal handler on an attached thread (without the flag an unattached
 * thread is attached, which is not signal-safe). They unwind only by rules
 * compiled beforehand in normal context (crawl_cfi_cache_warm(), or any
 * normal-context crawl_walk or crawl_backtrace through the module; the
 * sanitizer's stack captures read a module's rules one pc at a time first,
 * and make only those pcs usable) and only through modules that can
 * never be unloaded (the program, the libraries it was linked against, the
 * vDSO, libraries linked -z nodelete, and those pinned with
 * crawl_module_pin()); elsewhere the native part stops and resumes at the
 * next transition Frame. Printing and symbolizing are not signal-safe.
 * Allocation: a normal-context walk may allocate the first time it meets a
 * module (its rule table) or a change in the loaded modules; a thread's
 * first normal-context crawl_backtrace on an attached thread maps its walk
 * memo (12 KiB, by the mmap system call, never an interposed mmap;
 * unmapped when the thread exits or detaches; unattached threads have
 * none).
 */
#ifndef CRAWL_STACKWALK_H
#define CRAWL_STACKWALK_H

#include <crawl/frames.h>
#include <ucontext.h>
#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct crawl_cf crawl_cf;       /* valid only during the callback */

typedef enum { CRAWL_CONTINUE = 0, CRAWL_ABORT = 1 } crawl_action;

/* DONE: the walk reached the end of the stack (see CRAWL_CF_AFTER_GAP for
 *       native frames it could not see).
 * ABORTED: the callback returned CRAWL_ABORT.
 * FAILED: bad arguments (NULL callback, NULL context, a signal-safe walk on
 *       an unattached thread, CRAWL_WALK_NO_CFI_CACHE without libunwind or
 *       with CRAWL_WALK_SIGNAL_SAFE), or the stack was inconsistent: a
 *       frame whose unwind rule leads backwards or off the stack, or a
 *       Frame whose address or type is not valid. Junk in rbp under fast
 *       mode is not inconsistency (code without frame pointers uses rbp
 *       freely): the native part stops there instead. A walk that finds
 *       inconsistency still reports what it safely can before failing. */
typedef enum { CRAWL_WALK_DONE = 0, CRAWL_WALK_ABORTED = 1, CRAWL_WALK_FAILED = -1 } crawl_walk_status;

typedef enum {
    CRAWL_CF_NATIVE,                    /* a native frame found by unwinding */
    CRAWL_CF_FRAME,                     /* a Frame on the chain */
    CRAWL_CF_VM,                        /* a VM activation hosted by an interpreter segment */
    CRAWL_CF_JIT                        /* a native frame inside a registered code range */
} crawl_kind;

typedef crawl_action (*crawl_walk_fn)(const crawl_cf *cf, void *ctx);

/* Walk flags. */
enum {
    CRAWL_WALK_SKIP_NATIVE = 1u << 0,    /* don't report CRAWL_CF_NATIVE frames */
    CRAWL_WALK_SKIP_FRAMES = 1u << 1,    /* don't report Frames nor the VM activations they host */
    CRAWL_WALK_FUNCTIONS_ONLY = 1u << 2, /* report Frames only with CRAWL_FRAME_FUNCTION (VM activations always) */
    CRAWL_WALK_FAST = 1u << 3,           /* frame pointers, with the CFI where they mislead */
    CRAWL_WALK_SIGNAL_SAFE = 1u << 4,    /* no allocation, no lock, no libunwind, no attach */
    CRAWL_WALK_NO_VM = 1u << 5,          /* report interpreter segments as one CRAWL_CF_FRAME */
    CRAWL_WALK_NO_CFI_CACHE = 1u << 6    /* precise: every step through libunwind (normal
                                            context only; for comparisons and debugging) */
};

/* crawl_cf_flags() */
enum {
    CRAWL_CF_EXACT_IP = 1u << 0,   /* ip is the exact pc (first frame, signal-interrupted frame) */
    CRAWL_CF_AFTER_GAP = 1u << 1,  /* native unwinding stopped before this frame and was resumed
                                      from a transition Frame (or not at all): native frames are
                                      missing between this one and the previous report */
    CRAWL_CF_HAS_REGS = 1u << 2    /* crawl_cf_regs() is not NULL */
};

/* Walk the calling thread from the function that called crawl_walk (the
 * first frame reported; none of crawl's own frames are). The callback must
 * return (CRAWL_ABORT to stop early): a walk left by longjmp stays counted
 * as running, and code-table memory replaced after a dlclose is then never
 * freed. */
CRAWL_API crawl_walk_status crawl_walk(crawl_walk_fn fn, void *ctx, unsigned flags);

/* Walk the calling thread from a saved context, typically the third
 * argument of an SA_SIGINFO handler. The first frame reported is the
 * interrupted one (no handler, no signal trampoline frames). uc must come
 * from the calling thread. */
CRAWL_API crawl_walk_status crawl_walk_context(const ucontext_t *uc, crawl_walk_fn fn, void *ctx,
                                               unsigned flags);

/* Collect the pcs of the calling thread's native (and JIT) frames, like
 * glibc's backtrace() but in crawl's two modes: pcs[0] is a return address
 * inside the function that called crawl_backtrace, then one per caller,
 * outwards. Frames are not reported, but native unwinding that stops resumes
 * at the next transition Frame, as in crawl_walk. Only CRAWL_WALK_FAST and
 * CRAWL_WALK_SIGNAL_SAFE are honoured. Returns the number of pcs stored
 * (at most max; 0 for NULL pcs or max <= 0). No per-frame callback: this is
 * the fastest way to capture a stack (bench/walk). In normal context, on a
 * thread with no Frame pushed, it remembers its last few stacks (up to 62
 * pcs) and the words it read on the stack: a stack that starts where one of
 * them starts is checked word by word instead of unwound again (the same
 * pcs, a fraction of the time). Signal safety and allocation as crawl_walk. */
CRAWL_API int crawl_backtrace(uintptr_t *pcs, int max, unsigned flags);

/* Walk another attached thread of this process (tid as gettid() gives it):
 * the target is stopped with a signal (crawl_set_walk_signal; SIGRTMIN+3
 * by default), its handler walks its own stack from the interrupted
 * context (a signal-safe walk: modules' rules are compiled ahead, once, by
 * crawl_cfi_cache_warm on the first call) into a buffer of at most 256
 * frames, and waits; fn then gets each frame on the calling thread, in
 * order, while the target stays stopped; then the target goes on. The
 * target may be stopped anywhere, holding any lock (malloc's included): fn
 * must not take locks the target could hold -- copy what it needs (Frame
 * descriptions are fine: crawl_print_all_threads symbolizes native frames
 * only after the target went on). cf->thread is the target's number.
 * Returns the walk's crawl_walk_status (DONE, ABORTED when fn aborted or
 * the stack had more than 256 frames: the first 256 were reported, FAILED
 * when the target's stack was inconsistent: what could be walked was
 * reported), or a negative errno: -EINVAL (bad arguments), -ESRCH (no
 * attached thread with that tid, or it exited before it stopped),
 * -ETIMEDOUT (it did not stop within 1 s: the signal is blocked, or it is
 * stuck in the kernel with the signal pending). The time-out bounds the
 * wait for the target to take the request: once its handler has begun to
 * walk, the walk is waited for (it is bounded by the 256 frames, and by
 * the Frame types' vm_next hooks), since a target must never be left
 * waiting for a requester that has gone. The calling thread itself
 * is walked directly. Thread-safe (one walk of another thread at a time);
 * not async-signal-safe. */
CRAWL_API int crawl_walk_thread(pid_t tid, crawl_walk_fn fn, void *ctx, unsigned flags);
/* The same with the time-out in milliseconds (0 or more). */
CRAWL_API int crawl_walk_thread_timeout(pid_t tid, crawl_walk_fn fn, void *ctx, unsigned flags,
                                        int timeout_ms);
/* The signal crawl_walk_thread sends (installs its handler). 0 or a
 * negative errno value: -EINVAL for SIGKILL, SIGSTOP and SIGPROF (the
 * profiler's), -EBUSY for a signal a helper takes (crawl_install_thread_dump,
 * heap_profile_signal). Thread-safe (it waits for a walk of another thread
 * under way); not async-signal-safe (that lock); allocates nothing. */
CRAWL_API int crawl_set_walk_signal(int sig);
/* A thread dump in Java's jstack shape: a header line, then per attached
 * thread, oldest first, a '"name" TN tid=TID' line (name from
 * /proc/self/task/TID/comm) and its mixed stack, one "    #N ..." line a
 * frame (native frames symbolized with file:line), or a line saying why it
 * was not walked, then "end of crawl thread dump: N of M thread(s)
 * walked" last. The number of threads walked, or -EINVAL. Not
 * async-signal-safe; thread-safe; a fork child may dump (the locks a
 * parent's thread held at the fork are reset in the child). */
CRAWL_API int crawl_print_all_threads(int fd, unsigned flags);
/* Opt-in: on signal sig (SIGQUIT, as the JVM), a helper thread (which
 * takes no signal itself) writes crawl_print_all_threads to fd. The
 * handler only writes a byte to a pipe. 0 or a negative errno value:
 * -EINVAL for fd < 0 and for a signal it cannot take: SIGKILL, SIGSTOP,
 * those a fault raises (SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP, SIGSYS,
 * SIGABRT: a crash would dump and fault again, for ever), SIGPROF (the
 * profiler's), glibc's 32 and 33, and crawl's walk signal
 * (crawl_set_walk_signal).
 * The helper thread does not survive fork: in a child the signal does
 * nothing until the child installs the dump again. Thread-safe (a lock);
 * not async-signal-safe; allocates: the helper thread (pthread_create),
 * once per signal (a later call for the same signal only changes fd). */
CRAWL_API int crawl_install_thread_dump(int sig, int fd);

/* ---- the crawl frame handed to the callback (async-signal-safe) ---------
 * A callback runs once per frame, so the accessors are inline: the layout
 * below is part of crawl's ABI (it changes only with the SONAME). Read it
 * through the accessors; the same names are exported as functions for
 * callers that cannot use the header (dlsym, other languages). */
struct crawl_cf {
    crawl_kind kind;
    unsigned flags;                     /* CRAWL_CF_* */
    unsigned depth;
    uintptr_t ip, sp;
    crawl_frame *frame;
    const void *method;
    const crawl_regs *regs;
    const crawl_vm_frame *vm;
    const char *name;
    unsigned thread;                    /* the walked thread's number (T0, T1... as reports say) */
};

#if defined(CRAWL_BUILDING) || defined(CRAWL_NO_INLINE_ACCESSORS)
#define CRAWL_CF_ACCESSOR(type, name, expr) CRAWL_API type name(const crawl_cf *cf);
#else
#define CRAWL_CF_ACCESSOR(type, name, expr) \
    static inline type name(const crawl_cf *cf) { return expr; }
#endif

/* The kind of frame. */
CRAWL_CF_ACCESSOR(crawl_kind, crawl_cf_kind, cf->kind)
/* Exact pc for the first frame, return address for the others (native and
 * JIT); the VM position for CRAWL_CF_VM and for function Frames whose type
 * has a position hook; a transition Frame's saved ip; 0 for other Frames. */
CRAWL_CF_ACCESSOR(uintptr_t, crawl_cf_ip, cf->ip)
/* The frame's stack pointer (native, JIT); the Frame's address (Frames, and
 * the hosting Frame's address for CRAWL_CF_VM). */
CRAWL_CF_ACCESSOR(uintptr_t, crawl_cf_sp, cf->sp)
/* The Frame (CRAWL_CF_FRAME; the hosting Frame for CRAWL_CF_VM), else NULL. */
CRAWL_CF_ACCESSOR(crawl_frame *, crawl_cf_frame, cf->frame)
/* The VM/JIT method, or the Frame type's method(), else NULL. */
CRAWL_CF_ACCESSOR(const void *, crawl_cf_method, cf->method)
/* 0, 1, 2, ... in report order. */
CRAWL_CF_ACCESSOR(unsigned, crawl_cf_depth, cf->depth)
/* CRAWL_CF_* bits. */
CRAWL_CF_ACCESSOR(unsigned, crawl_cf_flags, cf->flags)
/* Registers of the frame: for native and JIT frames ip/sp/fp are always
 * set; the callee-saved ones only for frames libunwind unwound (precise
 * walks use compiled CFI rules, which track ip/sp/fp, and ask libunwind
 * only for what a rule cannot express); a transition Frame's saved
 * registers. NULL for other Frames and VM activations. */
CRAWL_CF_ACCESSOR(const crawl_regs *, crawl_cf_regs, cf->regs)
/* The VM activation (CRAWL_CF_VM), else NULL. */
CRAWL_CF_ACCESSOR(const crawl_vm_frame *, crawl_cf_vm_frame, cf->vm)
/* The name of a JIT code range or of a Frame type, else NULL. */
CRAWL_CF_ACCESSOR(const char *, crawl_cf_name, cf->name)
/* The number of the thread whose stack or Frames this is: 0, 1, 2... in
 * the order threads attached (reports call them T0, T1...). Root
 * enumeration of every thread tells the threads apart by it. */
CRAWL_CF_ACCESSOR(unsigned, crawl_cf_thread, cf->thread)
#undef CRAWL_CF_ACCESSOR

/* ---- JIT code ranges ---------------------------------------------------- */

typedef enum {
    /* The code keeps a standard frame: push rbp; mov rsp, rbp. Caller's
     * registers: ip = [fp+8], sp = fp+16, fp = [fp]. */
    CRAWL_UNWIND_FRAME_POINTER = 1,
    /* The code keeps a fixed-size frame: CFA = sp + frame_size, return
     * address at CFA-8; the caller's fp is at CFA + saved_fp_offset, or
     * unchanged when saved_fp_offset is 0. */
    CRAWL_UNWIND_FIXED_FRAME = 2
} crawl_unwind_kind;

typedef struct crawl_unwind_rule {
    crawl_unwind_kind kind;
    uint32_t frame_size;
    int32_t saved_fp_offset;
} crawl_unwind_rule;

typedef struct crawl_code_range {
    uintptr_t start, end;               /* [start, end) */
    const void *method;
    crawl_unwind_rule rule;
    const char *name;                   /* not copied: must outlive the range */
} crawl_code_range;

/* Register JIT code [start, end). 0; -EINVAL for an empty range, a NULL or
 * unknown rule; -EEXIST if it overlaps a registered range; -ENOMEM.
 * Takes a lock and allocates: not signal-safe. */
CRAWL_API int crawl_code_range_add(uintptr_t start, uintptr_t end, const void *method,
                                   const crawl_unwind_rule *rule, const char *name);
/* Unregister the range starting at start. 0 or -ENOENT. Not signal-safe.
 * Walks running on other threads keep a consistent view. */
CRAWL_API int crawl_code_range_remove(uintptr_t start);
/* Find the range holding ip: 1 and *out filled, or 0. Lock-free, O(log n),
 * async-signal-safe. */
CRAWL_API int crawl_code_range_find(uintptr_t ip, crawl_code_range *out);
/* perf's map of JIT code: with on, every code range (those registered so
 * far, then each one added) gets a line "START SIZE name" (hex) in
 * /tmp/perf-PID.map, so `perf report` names JIT frames; a fork child writes
 * its own file. Removals are not written (the format has none): perf takes
 * the last line covering an address, so a range added later at the same
 * place replaces the old name. CRAWL_OPTIONS=perf_map=1 turns it on when
 * libcrawl loads. 0, or a negative errno value when the file cannot be
 * opened. Thread-safe; not async-signal-safe. The file is left for perf
 * to read after the process exits, as perf expects. */
CRAWL_API int crawl_perf_map(int on);
/* The GDB JIT interface (on by default): each code range added with a name
 * is announced through __jit_debug_register_code with an in-memory ELF
 * symbol file (a .text section at the range, one function symbol over it,
 * written with libelf), and withdrawn when it is removed, so gdb names the
 * range's frames ("jit_hello") and unwinds through code with a
 * frame-pointer prologue. Off, ranges added meanwhile are not announced.
 * Returns the previous setting. Thread-safe. (The two interface names are
 * the only ones libcrawl exports without the crawl_ prefix; a process
 * should have one JIT interface provider.) */
CRAWL_API int crawl_gdb_jit(int on);

/* 1 if pc lies in a loaded module's executable segment (as of the last
 * normal-context walk's view of the loaded modules) or in a registered
 * code range, else 0; -ENOENT on a thread that is not attached (it reads
 * the module snapshot as a walk does). Lock-free, allocates nothing,
 * async-signal-safe: usable with other threads stopped (a collector
 * naming where another thread's Frames live). */
CRAWL_API int crawl_is_code(uintptr_t pc);

/* ---- symbols and printing (not signal-safe: they allocate and lock) ----- */

typedef struct crawl_symbol {
    const char *function;               /* NULL if unknown; C++ names demangled */
    const char *file;                   /* NULL without line info */
    int line, column;
    const char *module;                 /* path of the ELF module, NULL if none */
    uintptr_t module_offset;            /* pc - module load bias */
} crawl_symbol;

/* Symbolize pc through elfutils libdw; strings point into buf (len bytes).
 * 0, -ENOENT if pc is in no module, -ENOSPC if buf is too small. C++
 * names come demangled ("operator new[](unsigned long)") through the
 * process's own __cxa_demangle (libstdc++, loaded in every C++ program;
 * libcrawl links none): in a process without it they stay mangled, as
 * when the demangled name would not fit in buf. Symbol versions
 * ("@@GLIBC_2.34") are cut. out and buf must not be NULL. Thread-safe:
 * libdw runs under crawl's lock. */
CRAWL_API int crawl_symbolize(uintptr_t pc, crawl_symbol *out, char *buf, size_t len);

/* One printable description of a frame, without the "#N" prefix: the
 * Frame type's describe() or vm_describe() text, the JIT range name, or
 * "function file:line" / "function (module+0xoff)" for native frames.
 * snprintf-like return value. cf must not be NULL. Thread-safe (native
 * frames as crawl_symbolize; Frames as their type's describe hooks). */
CRAWL_API int crawl_cf_describe(const crawl_cf *cf, char *buf, size_t len);

/* One line in the AddressSanitizer frame shape:
 *   "    #N 0xPC in function file:line"  (native, JIT)
 *   "    #N in text"                     (Frames, VM activations)
 * with no trailing newline. snprintf-like. cf must not be NULL.
 * Thread-safe, as crawl_cf_describe. */
CRAWL_API int crawl_cf_format(const crawl_cf *cf, char *buf, size_t len);

/* Print the calling thread's stack (from the caller of this function) to
 * fd, one crawl_cf_format line per frame. Returns the walk status.
 * Thread-safe (each line is written with write(2); traces printed at once
 * to one fd may interleave line by line). */
CRAWL_API crawl_walk_status crawl_print_trace(int fd, unsigned flags);
/* The same from a saved context (a signal handler's). */
CRAWL_API crawl_walk_status crawl_print_trace_context(const ucontext_t *uc, int fd, unsigned flags);

/* ---- the CFI cache ----------------------------------------------------------
 * A module's DWARF CFI (.eh_frame, through elfutils libdw) is compiled whole
 * into a sorted table of rules (CFA = rsp/rbp + N, return address and
 * caller's rbp at fixed offsets; signal trampolines; the outermost frame),
 * the first time a normal-context walk meets the module, or for every
 * loaded module by crawl_cfi_cache_warm(). Tables are immutable and read
 * lock-free; a rule cache in front of them makes a step a few loads. Loading
 * and unloading code is noticed by normal-context walks (the loader's
 * counters); rules of a module that can be unloaded are used only after that
 * check, never in signal context. Frames a rule cannot express (DWARF
 * expressions, code without CFI) go to libunwind in normal context and end
 * the native part in signal context. */

/* Compile the CFI of every loaded module now: what a profiler or a crash
 * handler should call at start-up, so that signal-safe walks find every
 * rule. It costs milliseconds per module (about 7 ms for libc; tens for
 * large programs). Returns the number of modules with CFI, or a negative
 * errno value. Not signal-safe (allocates, takes locks). */
CRAWL_API int crawl_cfi_cache_warm(void);
/* Steps served by the rule cache, rule look-ups that missed it, and steps
 * handed to libunwind (normal context only: a signal-safe walk never adds
 * to it). Any argument may be NULL. Async-signal-safe, allocates nothing;
 * counts of threads still running are approximate while they walk. */
CRAWL_API void crawl_cfi_cache_stats(unsigned long *hits, unsigned long *misses,
                                     unsigned long *fallbacks);

/* Pin the module (shared library) that holds addr, e.g. a plugin's function:
 * it is made undeletable (RTLD_NODELETE: dlclose leaves it mapped, as
 * -z nodelete does), so signal-safe walks may use its rules from now on.
 * For plugins a profiler or crash handler should see through. 0, or
 * -ENOENT if addr is in no loaded module. Not signal-safe. Thread-safe
 * (the module list's lock); allocates (the module snapshot is rebuilt:
 * malloc). */
CRAWL_API int crawl_module_pin(const void *addr);

/* 1 if libunwind was found: precise walks can then hand it, in normal
 * context, the frames no compiled rule expresses. Precise walks work
 * without it. One load of a flag set when libcrawl loaded:
 * async-signal-safe, thread-safe, allocates nothing. */
CRAWL_API int crawl_walk_precise_available(void);

#ifdef __cplusplus
}
#endif
#endif
