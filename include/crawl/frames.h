/* crawl — Frames: explicit records VM code links onto a per-thread chain.
 *
 * A Frame is a struct whose first member is `crawl_frame`, placed in the
 * stack frame of the C function that pushes it. Its address orders it
 * against the native frames a walk finds (docs/design.md, "the merge rule").
 * The layout is plain on purpose: a debugger or an out-of-process tool can
 * follow `next` and read `type->name` from memory.
 *
 * Thread safety: every function here acts on the calling thread's own chain
 * only; threads never see each other's Frames.
 * Signal safety: crawl_frame_push/pop/top and crawl_transition_push are
 * async-signal-safe on an attached thread (the chain is published with a
 * signal fence, so a handler on the same thread sees it consistent).
 * crawl_thread_attach/detach are not (they read /proc and take a lock).
 * Allocation: none, except crawl_thread_attach, and so a thread's first
 * push, which attaches implicitly (glibc's pthread_getattr_np allocates, and
 * the registry takes a lock).
 */
#ifndef CRAWL_FRAMES_H
#define CRAWL_FRAMES_H

#include <crawl/common.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct crawl_frame crawl_frame;
typedef struct crawl_frame_type crawl_frame_type;
typedef struct crawl_roots crawl_roots;      /* sink for enum_roots hooks (gcroots.h) */
typedef struct crawl_vm_frame crawl_vm_frame;

/* First member of the embedder's own Frame struct. */
struct crawl_frame {
    crawl_frame *next;                  /* the older Frame, or NULL */
    const crawl_frame_type *type;
};

/* What a Frame is for; the walker treats each kind as documented. */
typedef enum {
    CRAWL_FRAME_KIND_CUSTOM = 0,        /* an embedder's own Frame: reported as is */
    CRAWL_FRAME_KIND_TRANSITION = 1,    /* VM -> native call: saves the caller's registers */
    CRAWL_FRAME_KIND_ENTRY = 2,         /* native -> VM call */
    CRAWL_FRAME_KIND_INTERP = 3         /* interpreter segment: hosts VM activations */
} crawl_frame_kind;

/* crawl_frame_type.flags */
enum {
    CRAWL_FRAME_FUNCTION = 1u << 0,     /* the Frame stands for one VM method activation */
    CRAWL_FRAME_SAVES_REGS = 1u << 1    /* a crawl_regs lies at regs_offset: a walk can resume there */
};

/* One VM activation hosted by an interpreter segment Frame. */
struct crawl_vm_frame {
    const void *method;                 /* the VM's method/function object */
    uintptr_t pc;                       /* position in the method (bytecode address or index) */
    const void *activation;             /* the VM's own record of the activation, if any */
    uintptr_t iter;                     /* cursor owned by vm_next; 0 before the first call */
};

/* A Frame type: C's version of a CLR Frame vtable. Define it `const` with
 * designated initialisers; every hook may be NULL. Hooks run inside walks:
 * a hook used by a walk with CRAWL_WALK_SIGNAL_SAFE must itself be
 * async-signal-safe (read-only, no locks, no malloc). */
struct crawl_frame_type {
    const char *name;
    unsigned flags;                                         /* CRAWL_FRAME_* */
    const void *(*method)(const crawl_frame *f);
    int (*describe)(const crawl_frame *f, char *buf, size_t len);   /* snprintf-like */
    void (*enum_roots)(crawl_frame *f, crawl_roots *sink);
    /* --- members after enum_roots are crawl extensions --- */
    unsigned kind;                                          /* crawl_frame_kind */
    size_t regs_offset;                                     /* with CRAWL_FRAME_SAVES_REGS */
    /* Interpreter segments: fill *vf with the next activation, newest first,
     * and return 1; return 0 when there are no more. vf->iter is 0 on the
     * first call and is kept between calls for the hook's own use. */
    int (*vm_next)(const crawl_frame *f, crawl_vm_frame *vf);
    /* Interpreter segments: one printable line for an activation, e.g.
     * "fib demo.crawl:3" (function, then file:line). snprintf-like. */
    int (*vm_describe)(const crawl_frame *f, const crawl_vm_frame *vf, char *buf, size_t len);
    /* Describe an activation from what a stored stack keeps of it (the
     * sanitizer's allocation and free stacks outlive their Frames): the
     * method (vm_next's vf->method, or method() for CRAWL_FRAME_FUNCTION
     * Frames) and the position (vf->pc, or 0). Same text as vm_describe. */
    int (*describe_method)(const void *method, uintptr_t pc, char *buf, size_t len);
    /* CRAWL_FRAME_FUNCTION Frames: the activation's current position in its
     * method (bytecode address or index, what describe_method takes as pc).
     * A walk reports it as the Frame's crawl_cf_ip, and stored stacks keep
     * it, so allocation and free stacks name the line. */
    uintptr_t (*position)(const crawl_frame *f);
    /* Room for hooks of later versions, so the struct's size and every
     * member's offset stay as they are when hooks are added: leave it zero
     * (designated initialisers do). crawl never calls through it. */
    void (*crawl_reserved[6])(void);
};

/* Attach the calling thread: record its stack bounds and register it.
 * Idempotent. 0, or a negative errno value (-ENOMEM, or the error of
 * pthread_getattr_np). Pushing a Frame or walking attaches implicitly. */
CRAWL_API int crawl_thread_attach(void);

/* Detach the calling thread. Its Frame chain must be empty: detaching with
 * Frames still pushed is API misuse and stops the process with one line.
 * A thread that exits while attached is detached automatically, by a
 * thread-specific-data destructor; Frames still pushed then are dropped.
 * Until that destructor runs (pthread_exit and cancellation unwind the
 * stack first, and earlier destructors run before it) those Frames point
 * into a stack being reused, and a collector enumerating every thread's
 * roots in that window finds a corrupt chain: pop Frames before a thread
 * exits (crawl_frame_unwind_to in a pthread_cleanup_push handler). */
CRAWL_API void crawl_thread_detach(void);

/* 1 if the calling thread is attached, else 0. Async-signal-safe (one
 * thread-local load). */
CRAWL_API int crawl_thread_is_attached(void);

/* The calling thread's number: 0, 1, 2... in the order threads first
 * attached (reports call it T0, T1...; crawl_cf_thread gives it per frame).
 * -ENOENT if the thread is not attached. Async-signal-safe. */
CRAWL_API int crawl_thread_number(void);

/* The calling thread's stack as [*lo, *hi). 0, or -ENOENT if not attached.
 * Async-signal-safe. */
CRAWL_API int crawl_thread_stack_bounds(uintptr_t *lo, uintptr_t *hi);

/* Link f (which lives in the caller's stack frame) on top of the calling
 * thread's chain with the given type. Stops the process with one line if
 * type is NULL, if f is not on this thread's stack (a heap Frame, another
 * thread's), not pointer-aligned, or already the top Frame. Attaches implicitly (that
 * first push is not async-signal-safe). A Frame already on the chain below
 * the top is not detected (the check would cost a chain walk per push):
 * pushed again, it makes a cycle, and that thread's walks and root
 * enumerations return failure (never loop) until it is popped. */
CRAWL_API void crawl_frame_push(crawl_frame *f, const crawl_frame_type *type);

/* Unlink f, which must be the top Frame; otherwise (NULL, an empty chain,
 * another Frame) the process stops with one line naming both Frames' types. */
CRAWL_API void crawl_frame_pop(crawl_frame *f);

/* For debuggers (gdb/crawl.py calls it in a live process): index 0,
 * the Frame's description (its describe hook, else its type's name); for an
 * interpreter segment, index i >= 1, its i-th activation, newest first
 * (vm_next, vm_describe), or NULL past the last. One static buffer: not
 * thread-safe, not for programs; not async-signal-safe (a call in a handler
 * rewrites the buffer the interrupted call fills). */
CRAWL_API const char *crawl_debug_frame_text(const crawl_frame *f, unsigned index);

/* Pop every Frame newer than keep (keep stays on top; NULL empties the
 * chain): for longjmp-style error handling that skips the pops of the C
 * frames it abandons. Call it before the longjmp, while those Frames are
 * still alive. Stops the process with one line if keep is not on the
 * chain. Async-signal-safe. */
CRAWL_API void crawl_frame_unwind_to(crawl_frame *keep);

/* The newest Frame of the calling thread, or NULL. */
CRAWL_API crawl_frame *crawl_frame_top(void);

/* Number of Frames on the calling thread's chain. Async-signal-safe (one
 * thread-local load). */
CRAWL_API unsigned crawl_frame_count(void);

/* ---- built-in Frame types ---------------------------------------------- */

/* Transition (VM -> native). Push it right before VM code calls native code
 * that may not be unwindable (libc without frame pointers, JIT code without
 * unwind info): it saves the pushing function's registers, and a walk whose
 * native unwinding stops resumes there. */
typedef struct crawl_transition {
    crawl_frame frame;
    crawl_regs regs;                    /* the pusher's ip, sp, fp and callee-saved registers */
} crawl_transition;

CRAWL_API extern const crawl_frame_type crawl_transition_type;

/* Capture the caller's registers into t->regs and push t. type may be NULL
 * (crawl_transition_type) or an embedder's type with CRAWL_FRAME_SAVES_REGS
 * and regs_offset == offsetof(crawl_transition, regs); anything else stops
 * the process with one line. Pop with crawl_frame_pop(&t->frame). */
CRAWL_API void crawl_transition_push(crawl_transition *t, const crawl_frame_type *type);

/* Call fn after every crawl_transition_push, on the pushing thread, with
 * the new Frame linked (the GC stress of crawl-boehm's
 * gc_stress_transitions: a collection at every VM -> native call). fn runs
 * wherever the push does; a push from a signal handler calls it there.
 * NULL removes it. Costs one load per push while unset. Thread-safe; one
 * atomic store, allocates nothing. */
CRAWL_API void crawl_set_transition_hook(void (*fn)(crawl_frame *f));

/* Capture the caller's registers: ip is the return address into the
 * caller, sp the caller's stack pointer after the call returns. out must
 * not be NULL. Async-signal-safe; allocates nothing. */
CRAWL_API void crawl_capture_regs(crawl_regs *out);

/* Entry (native -> VM): push it where native code calls into the VM (a
 * callback trampoline). `target` is what the entry runs (a VM closure...);
 * the type's method() hook returns it. */
typedef struct crawl_entry {
    crawl_frame frame;
    const void *target;
} crawl_entry;

CRAWL_API extern const crawl_frame_type crawl_entry_type;

#ifdef __cplusplus
}
#endif
#endif
