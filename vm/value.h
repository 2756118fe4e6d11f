/* crawlvm values and heap objects.
 *
 * Values are tagged words: fixnums have the low bit set; a few small even
 * constants are nil/#t/#f; everything else points to a Boehm-allocated
 * object. */
#ifndef CRAWLVM_VALUE_H
#define CRAWLVM_VALUE_H

#include <crawl/ffi.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

/* Heap objects come from crawl-boehm's allocator (GC_MALLOC, plus the
 * GC diagnostics when they are on: allocation stacks, GC stress, the
 * quarantine of collected objects), except in bench/vm's build without
 * crawl, which allocates as a VM without crawl would. */
#ifdef CRAWLVM_NO_FRAMES
#include <gc/gc.h>
#define VM_ALLOC(n) GC_MALLOC(n)
#define VM_ALLOC_ATOMIC(n) GC_MALLOC_ATOMIC(n)
#else
#include <crawl/boehm.h>
#define VM_ALLOC(n) crawl_gc_malloc(n)
#define VM_ALLOC_ATOMIC(n) crawl_gc_malloc_atomic(n)
#endif

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
static inline int vm_truthy(value v) { return v != V_FALSE && v != V_NIL; }

typedef enum {
    T_STRING = 1, T_VECTOR, T_PROTO, T_CLOSURE, T_BUILTIN, T_FFI, T_CALLBACK, T_BUFFER, T_POINTER
} otype;

typedef struct obj {
    uint32_t type;
} obj;

#define VM_STRING_MAX UINT32_MAX         /* bytes a string holds at most */
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

/* The source line of the instruction before pc (the call being made, or
 * the one that failed), or the line the function is defined on. */
static inline int vm_proto_line(const proto *p, uint32_t pc)
{
    return pc > 0 && (int)pc <= p->ncode ? p->lines[pc - 1] : p->line;
}

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

/* Malloc'ed and never freed: what outlives its VM (callbacks C keeps,
 * buffers finalized after vm_free) reaches the VM through it; vm_free
 * clears vm, so a callback that outlives its VM refuses to run. */
typedef struct vm_handle {
    struct vm *vm;                      /* NULL once freed */
    pthread_t owner;                    /* the thread that runs it (atomic loads and stores) */
} vm_handle;

typedef struct callback_obj {
    obj h;
    crawl_ffi_closure *c;
    struct callback_cell *cell;         /* the closure's user pointer (ffi_bind.c) */
    value closure;                      /* the VM closure it calls */
    vm_handle *handle;
} callback_obj;

typedef struct buffer_obj {
    obj h;
    size_t size;
    unsigned char *data;                /* from the VM's native allocator */
    void (*release)(void *data);        /* that allocator's (it may outlive the VM) */
    int freed;
} buffer_obj;

typedef struct pointer_obj {
    obj h;
    void *p;
} pointer_obj;

static inline otype vm_obj_type(value v) { return (otype)((obj *)v)->type; }
static inline int vm_is_type(value v, otype t) { return IS_OBJ(v) && vm_obj_type(v) == t; }

/* ---- values (vm/value.c) ---------------------------------------------------- */
value vm_make_string(const char *s, size_t len);
value vm_make_vector(uint32_t len, value init);
const char *vm_type_name(value v);
/* Write a printable form of v into buf (snprintf-like: what fits, NUL-
 * terminated; returns the whole form's length). */
size_t vm_format_value(value v, char *buf, size_t len, int quote);

#endif
