/* crawlvm — the reference interpreter: shared definitions.
 *
 * Values are tagged words: fixnums have the low bit set; a few small even
 * constants are nil/#t/#f; everything else points to a Boehm-allocated
 * object. The value stack and the call-info stack are mmap'ed, where
 * Boehm never looks: what they hold stays alive only because the
 * interpreter segment Frame reports it to crawl (crawl-boehm). */
#ifndef CRAWLVM_VM_H
#define CRAWLVM_VM_H

#include <crawl/crawl.h>
#include <crawl/ffi.h>
#include <crawl/boehm.h>
#include <setjmp.h>
#include <stddef.h>
#include <stdint.h>

typedef uintptr_t value;

#define V_NIL ((value)2)
#define V_TRUE ((value)6)
#define V_FALSE ((value)10)
#define V_UNBOUND ((value)14)
#define IS_FIX(v) (((v)&1) != 0)
#define FIX(n) ((value)(((uintptr_t)(intptr_t)(n) << 1) | 1))
#define FIXVAL(v) ((intptr_t)(v) >> 1)
#define IS_OBJ(v) (((v)&7) == 0 && (v) > 4096)
#define FIX_MAX ((intptr_t)(INTPTR_MAX >> 1))
#define FIX_MIN ((intptr_t)(INTPTR_MIN >> 1))

/* Only #f and nil are false. A function, not a macro: callers pass *--sp. */
static inline int TRUTHY(value v) { return v != V_FALSE && v != V_NIL; }

typedef enum {
    T_STRING = 1, T_VECTOR, T_PROTO, T_CLOSURE, T_BUILTIN, T_FFI, T_CALLBACK, T_BUFFER, T_POINTER
} otype;

typedef struct obj {
    uint32_t type;
} obj;

typedef struct vstring {
    obj h;
    uint32_t len;
    char s[];                           /* NUL-terminated */
} vstring;

typedef struct vvector {
    obj h;
    uint32_t len;
    value items[];
} vvector;

typedef struct proto {
    obj h;
    const char *name;                   /* "fib", "lambda", "<toplevel>" */
    const char *file;
    int line;                           /* where it is defined */
    int nparams, nlocals, nfree;
    int maxstack;                       /* slots a call needs above its base */
    uint32_t *code;
    int ncode;
    int *lines;                         /* source line per instruction */
    value *consts;
    int nconsts;
    uint32_t *captures;                 /* per free variable: FROM_LOCAL | index */
} proto;

#define CAPTURE_FROM_LOCAL 0x80000000u
#define CAPTURE_SELF 0x40000000u       /* the closure being run when this one is made */

typedef struct closure {
    obj h;
    proto *p;
    value free[];
} closure;

struct vm;
typedef value (*builtin_fn)(struct vm *vm, int argc, value *argv);

typedef struct builtin {
    obj h;
    const char *name;
    int min_args, max_args;             /* max -1: variadic */
    builtin_fn fn;
} builtin;

typedef struct ffi_obj {
    obj h;
    crawl_ffi_fn *fn;
} ffi_obj;

/* What a callback reaches its VM through: malloc'ed, never freed; vm_free
 * clears it, so a callback that outlives its VM refuses to run. */
typedef struct vm_handle {
    struct vm *vm;
} vm_handle;

typedef struct callback_obj {
    obj h;
    crawl_ffi_closure *c;
    value closure;                      /* the VM closure it calls */
    vm_handle *handle;
} callback_obj;

typedef struct buffer_obj {
    obj h;
    size_t size;
    unsigned char *data;                /* from the VM's native allocator */
    int freed;
} buffer_obj;

typedef struct pointer_obj {
    obj h;
    void *p;
} pointer_obj;

static inline otype obj_type(value v) { return (otype)((obj *)v)->type; }
static inline int is_type(value v, otype t) { return IS_OBJ(v) && obj_type(v) == t; }

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
} vm_allocator;

typedef struct vm {
    value *stack;                       /* mmap'ed, unscanned by Boehm */
    uint32_t top, stack_cap;
    callinfo *ci;                       /* mmap'ed */
    uint32_t nci, ci_cap;
    segment *seg;                       /* innermost interpreter segment */
    value *globals;                     /* GC_MALLOC_UNCOLLECTABLE */
    const char **global_names;
    int nglobals, globals_cap;
    unsigned walk_flags;                /* CRAWL_WALK_FAST or 0 */
    int native_traces;                  /* --native */
    int withhold_roots;                 /* tests: don't report roots (prove they matter) */
    jmp_buf *on_error;
    crawl_frame *error_frame_top;       /* Frame chain top to restore on error */
    uint32_t error_top, error_nci;
    segment *error_seg;
    char error[512];
    vm_allocator alloc;
    int out_fd;                         /* where print and backtrace write */
    vm_handle *handle;
} vm_state;

/* ---- the embedding API (vm/vm.c) ------------------------------------------ */
vm_state *vm_new(void);
void vm_free(vm_state *vm);
/* Compile and run source; 0, or -1 with vm->error set (the traceback has
 * been printed to stderr). *result may be NULL. */
int vm_eval(vm_state *vm, const char *source, const char *file, value *result);
/* Call a callable value with args, from C. The call runs inside an
 * interpreter segment, so the arguments are GC roots during it. */
value vm_call(vm_state *vm, value fn, int argc, const value *argv);
int vm_global_index(vm_state *vm, const char *name);
void vm_set_global(vm_state *vm, const char *name, value v);
value vm_get_global(vm_state *vm, const char *name);
#ifdef CRAWLVM_NO_FRAMES
void vm_push_roots_directly(vm_state *vm);   /* bench/vm's build without crawl's Frames */
#endif

/* ---- errors and traces (vm/trace.c) --------------------------------------- */
_Noreturn void vm_error(vm_state *vm, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void vm_print_traceback(vm_state *vm, int fd, const char *title);
void vm_install_fatal_handlers(vm_state *vm);
extern const crawl_frame_type segment_type;

/* ---- values (vm/value.c) ---------------------------------------------------- */
value make_string(const char *s, size_t len);
value make_vector(uint32_t len, value init);
const char *type_name(value v);
/* Write a printable form of v into buf (snprintf-like). */
int format_value(value v, char *buf, size_t len, int quote);

/* ---- reader, compiler (vm/read.c, vm/compile.c) ------------------------------- */
typedef struct node node;
node *read_all(const char *src, const char *file, char *err, size_t errlen);
void free_nodes(node *n);
/* One proto per top-level form, in a NULL-terminated array (GC memory). */
proto **compile_program(vm_state *vm, node *forms, const char *file, char *err, size_t errlen);

/* ---- builtins (vm/builtins.c) ------------------------------------------------ */
void install_builtins(vm_state *vm);
/* Define a global builtin; max_args -1 for variadic. name must live forever. */
void vm_def_builtin(vm_state *vm, const char *name, int min_args, int max_args, builtin_fn fn);
value call_ffi(vm_state *vm, ffi_obj *f, int argc, value *argv);

/* ---- the interpreter (vm/interp.c) ------------------------------------------- */
value interp_run(vm_state *vm, uint32_t fn_slot, int argc);
/* Call a builtin or FFI function (argument checks, the one path for OP_CALL
 * and vm_call); args are on the value stack, inside a segment. */
value vm_call_native(vm_state *vm, value f, int argc, value *args);
/* Push / pop an interpreter segment whose value-stack slots start at v_base
 * (interp_run uses them; so does vm_call around builtins called from C). */
void segment_enter(vm_state *vm, segment *seg, uint32_t v_base);
void segment_leave(vm_state *vm, segment *seg);

/* 1 when the calling thread's C stack has less than 256 KiB left: the
 * reader and the compiler, which recurse once per nesting level, stop there
 * with an error instead of overflowing (a small `ulimit -s`, or sanitizer
 * builds whose frames are larger). 0 on an unattached thread. */
static inline int vm_stack_low(void)
{
    uintptr_t lo, hi;
    return crawl_thread_stack_bounds(&lo, &hi) == 0 &&
           (uintptr_t)__builtin_frame_address(0) - lo < ((uintptr_t)256 << 10);
}

#endif
