/* crawlvm — the reference interpreter: the VM's state and its embedding API.
 *
 * The value stack and the call-info stack are mmap'ed, where Boehm never
 * looks: what they hold stays alive only because the interpreter segment
 * Frame reports it to crawl (crawl-boehm). Headers, each including only
 * what it needs (no cycle): value.h <- vm.h <- interp.h, trace.h,
 * builtins.h, ffi_bind.h, compile.h (and read.h). */
#ifndef CRAWLVM_VM_H
#define CRAWLVM_VM_H

#include <crawl/crawl.h>
#include <pthread.h>
#include <setjmp.h>

#include "vm/value.h"

/* One VM activation, on the mmap'ed call-info stack. */
typedef struct callinfo {
    closure *cl;
    uint32_t pc;                        /* index of the next instruction */
    uint32_t base;                      /* value-stack index of local 0 */
} callinfo;

/* The interpreter segment Frame: one per entry into the interpreter loop. */
typedef struct segment {
    crawl_frame frame;
    struct vm *vm;
    uint32_t ci_base;                   /* first callinfo of this segment */
    uint32_t ci_end;                    /* 0: up to vm->nci (innermost) */
    uint32_t v_base, v_end;             /* value-stack slots, v_end 0: up to vm->top */
    struct segment *outer;
} segment;

/* How native buffers get their memory: swapped for the checked heap by the
 * sanitizer layer. check may be NULL; it returns 0 if the access is fine. */
typedef struct vm_allocator {
    void *(*alloc)(size_t size);
    void (*release)(void *p);
    int (*check)(const void *addr, size_t size, int is_write);
    /* with check: 1 if the checker watches p's buffer (NULL: every one);
     * the VM's own freed-buffer errors stand for the others */
    int (*covers)(const void *p);
    /* with check: the size of a live allocation where p's buffer was, 0
     * when the checker knows that memory freed (NULL: always 0). A freed
     * buffer whose memory went to another buffer is the VM's to refuse: the
     * checker sees a live allocation there, and let a freed buffer write
     * and free the new one. */
    size_t (*live_size)(const void *p);
} vm_allocator;

/* 1 if an allocator's checker reports misuse of the buffer at p itself
 * (the VM's own "already freed" errors then step aside). */
static inline int vm_alloc_checks(const vm_allocator *a, const void *p)
{
    return a->check && (!a->covers || a->covers(p));
}

/* 1 if the checker reports misuse of the freed buffer at p (it still
 * knows that memory freed) */
static inline int vm_alloc_checks_freed(const vm_allocator *a, const void *p)
{
    return vm_alloc_checks(a, p) && !(a->live_size && a->live_size(p));
}

typedef struct vm {
    value *stack;                       /* mmap'ed, unscanned by Boehm */
    uint32_t top, stack_cap;
    callinfo *ci;                       /* mmap'ed */
    uint32_t nci, ci_cap;
    segment *seg;                       /* innermost interpreter segment */
    value *globals;                     /* GC_MALLOC_UNCOLLECTABLE */
    const char **global_names;
    int nglobals, globals_cap;
    int *global_slots;                  /* hash of names: index + 1, 0 empty; 2 * globals_cap */
    unsigned walk_flags;                /* CRAWL_WALK_FAST or 0 */
    int native_traces;                  /* --native */
    int withhold_roots;                 /* tests: don't report value-stack roots (prove they matter) */
    int check_objects;                  /* --sanitize: crawl_gc_check every object access */
    jmp_buf *on_error;
    crawl_frame *error_frame_top;       /* Frame chain top to restore on error */
    uint32_t error_top, error_nci;
    /* FFI calls in progress minus callbacks running: above 0 while this
     * thread runs C code the script called, the only time a callback may
     * run the VM (one from a signal handler that interrupted the
     * interpreter would run it on a stack and a heap in mid-change). Read
     * by signal handlers on this thread: volatile. */
    volatile int in_c, error_in_c;
    segment *error_seg;
    char error[512];
    vm_allocator alloc;
    int out_fd;                         /* where print and backtrace write */
    vm_handle *handle;
    /* native buffers' bytes, which Boehm does not see: a collection is
     * forced when they pass native_next_gc (buffer pacing, builtins.c) */
    size_t native_live, native_next_gc;
} vm_state;

/* ---- the embedding API (vm/vm.c) ------------------------------------------ */
/* A VM with no globals: open the builtins it should have (vm_open_libs for
 * all of them, builtins.h), as Lua's luaL_openlibs. NULL when out of memory.
 * It runs on one thread at a time: the one that made it, then the last to
 * call vm_eval; a callback that C calls on another thread warns and returns
 * 0 without running. */
vm_state *vm_new(void);
void vm_free(vm_state *vm);
/* Compile and run source; 0, or -1 with vm->error set (the traceback has
 * been printed to stderr). *result may be NULL. */
int vm_eval(vm_state *vm, const char *source, const char *file, value *result);
/* Call a callable value with args, from C. The call runs inside an
 * interpreter segment, so the arguments are GC roots during it. */
value vm_call(vm_state *vm, value fn, int argc, const value *argv);
int vm_global_index(vm_state *vm, const char *name);
/* A name's hash (FNV-1a), for the globals' and each function's locals'
 * indexes. */
static inline size_t vm_name_hash(const char *s)
{
    size_t h = 1469598103934665603u;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211u;
    return h;
}
/* Write all of [s, s+n) to fd (print, tracebacks): retries short writes,
 * stops at an error. 0, or that error's errno. */
int vm_write_all(int fd, const char *s, size_t n);
/* The errno of the first write vm_write_all could not finish (0: none):
 * crawlvm then exits 1, as coreutils do when their output is lost. */
int vm_write_error(void);
/* Stop the script with an error: the message and a traceback go to stderr,
 * and vm_eval returns -1 (without a vm_eval in progress the process exits). */
_Noreturn void vm_error(vm_state *vm, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void vm_set_global(vm_state *vm, const char *name, value v);
value vm_get_global(vm_state *vm, const char *name);
#ifdef CRAWLVM_NO_FRAMES
void vm_push_roots_directly(vm_state *vm);   /* bench/vm's build without crawl's Frames */
#endif

/* 1 when the calling thread's C stack has less than 256 KiB left: the
 * reader and the compiler, which recurse once per nesting level, stop there
 * with an error instead of overflowing (a small `ulimit -s`, or sanitizer
 * builds whose frames are larger). 0 on an unattached thread. */
#define VM_STACK_RESERVE ((uintptr_t)256 << 10)
static inline int vm_stack_low(void)
{
    uintptr_t lo, hi;
    return crawl_thread_stack_bounds(&lo, &hi) == 0 &&
           (uintptr_t)__builtin_frame_address(0) - lo < VM_STACK_RESERVE;
}

#endif
