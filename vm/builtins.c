/* Builtin functions: printing, integers, strings, vectors, native buffers,
 * and GC/trace hooks; the tables the host opens (the FFI's are in
 * ffi_bind.c). */
#define _GNU_SOURCE                     /* process_vm_readv */
#include <errno.h>
#include <gc/gc.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <unistd.h>

#include "vm/builtins.h"
#include "vm/ffi_bind.h"
#include "vm/trace.h"
#include "vm/value.h"
#include "vm/vm.h"

intptr_t vm_arg_int(vm_state *vm, value v, const char *who)
{
    if (!IS_FIX(v))
        vm_error(vm, "type error: %s expects an integer, got %s", who, vm_type_name(v));
    return FIXVAL(v);
}

value vm_int_result(vm_state *vm, long long n, const char *who)
{
    if (n > FIX_MAX || n < FIX_MIN)
        vm_error(vm, "integer overflow in %s", who);
    return FIX(n);
}

void *vm_arg_obj(vm_state *vm, value v, otype t, const char *who, const char *what)
{
#ifndef CRAWLVM_NO_FRAMES
    /* a collected object (a missing root) is reported before its type is read */
    if (vm->check_objects && IS_OBJ(v))
        crawl_gc_check((const void *)v, sizeof(obj), 0);
#endif
    if (!vm_is_type(v, t))
        vm_error(vm, "type error: %s expects a %s, got %s", who, what, vm_type_name(v));
    return (void *)v;
}

/* The script's output: one that cannot be written is a script error, so
 * that a script printing for ever stops once its reader has gone (with
 * SIGPIPE ignored it ran on; found by an outside test) */
static void out(vm_state *vm, const char *s, size_t n)
{
    int e = vm_write_all(vm->out_fd, s, n);
    if (e)
        vm_error(vm, "write error: %s", strerror(e));
}

/* ---- printing --------------------------------------------------------------- */

/* The printed form of v: in small when it fits, else in malloc'ed memory
 * (free it when it is not small). */
static char *formatted(vm_state *vm, value v, char *small, size_t len, size_t *n, size_t max)
{
    size_t need = vm_format_value(v, small, len, 0);
    *n = need;
    if (need < len)
        return small;
    if (need > max)
        return NULL;
    char *big = need < SIZE_MAX ? malloc(need + 1) : NULL;
    if (!big)
        vm_error(vm, "out of memory");
    vm_format_value(v, big, need + 1, 0);
    return big;
}

static void print_value(vm_state *vm, value v)
{
    if (vm_is_type(v, T_STRING)) {       /* (as it is, whatever its length) */
        out(vm, ((vstring *)v)->s, ((vstring *)v)->len);
        return;
    }
    char small[256];
    size_t n;
    char *text = formatted(vm, v, small, sizeof small, &n, SIZE_MAX - 1);
    out(vm, text, n);
    if (text != small)
        free(text);
}

VM_BUILTIN(b_print)
{
    for (int i = 0; i < argc; i++) {
        if (i)
            out(vm, " ", 1);
        print_value(vm, argv[i]);
    }
    out(vm, "\n", 1);
    return V_NIL;
}

VM_BUILTIN(b_display)
{
    VM_UNUSED_ARGS;
    print_value(vm, argv[0]);
    return V_NIL;
}

VM_BUILTIN(b_str)
{
    VM_UNUSED_ARGS;
    if (vm_is_type(argv[0], T_STRING))
        return argv[0];
    char small[256];
    size_t n;
    char *text = formatted(vm, argv[0], small, sizeof small, &n, VM_STRING_MAX);
    if (!text)                           /* (refused before it is made) */
        vm_error(vm, "str: the result, %zu bytes, is longer than a string holds (%u)", n,
                 (unsigned)VM_STRING_MAX);
    value str = vm_make_string(text, n);
    if (text != small)
        free(text);
    return str;
}

/* ---- integers ---------------------------------------------------------------- */

VM_BUILTIN(b_add)
{
    long long r = 0;
    for (int i = 0; i < argc; i++)
        if (__builtin_add_overflow(r, vm_arg_int(vm, argv[i], "+"), &r))
            vm_error(vm, "integer overflow in +");
    return vm_int_result(vm, r, "+");
}

VM_BUILTIN(b_sub)
{
    long long r = vm_arg_int(vm, argv[0], "-");
    if (argc == 1)
        return vm_int_result(vm, -r, "-");
    for (int i = 1; i < argc; i++)
        if (__builtin_sub_overflow(r, vm_arg_int(vm, argv[i], "-"), &r))
            vm_error(vm, "integer overflow in -");
    return vm_int_result(vm, r, "-");
}

VM_BUILTIN(b_mul)
{
    long long r = 1;
    for (int i = 0; i < argc; i++)
        if (__builtin_mul_overflow(r, vm_arg_int(vm, argv[i], "*"), &r))
            vm_error(vm, "integer overflow in *");
    return vm_int_result(vm, r, "*");
}

static value divide(vm_state *vm, value *argv, int rem, const char *who)
{
    intptr_t a = vm_arg_int(vm, argv[0], who), b = vm_arg_int(vm, argv[1], who);
    if (b == 0)
        vm_error(vm, "division by zero in %s", who);
    return vm_int_result(vm, rem ? a % b : a / b, who);
}

VM_BUILTIN(b_quotient) { VM_UNUSED_ARGS; return divide(vm, argv, 0, "quotient"); }
VM_BUILTIN(b_remainder) { VM_UNUSED_ARGS; return divide(vm, argv, 1, "remainder"); }

#define CMP_BUILTIN(cname, text, op)                                                             \
    VM_BUILTIN(cname)                                                                            \
    {                                                                                            \
        VM_UNUSED_ARGS;                                                                          \
        return vm_arg_int(vm, argv[0], text) op vm_arg_int(vm, argv[1], text) ? V_TRUE : V_FALSE;    \
    }
CMP_BUILTIN(b_lt, "<", <)
CMP_BUILTIN(b_le, "<=", <=)
CMP_BUILTIN(b_gt, ">", >)
CMP_BUILTIN(b_ge, ">=", >=)
CMP_BUILTIN(b_numeq, "=", ==)

VM_BUILTIN(b_not) { VM_UNUSED_ARGS; (void)vm; return vm_truthy(argv[0]) ? V_FALSE : V_TRUE; }

/* 1 equal, 0 not, -1 nested deeper than any acyclic data should be, -2
 * more element comparisons than MAX_EQUAL_STEPS (shared structure compared
 * with a copy is exponential: two 40-level DAGs of shared halves) */
#define MAX_EQUAL_DEPTH 10000
#define MAX_EQUAL_STEPS 10000000ul
static int equal(value a, value b, int depth, unsigned long *steps)
{
    if (a == b)
        return 1;
    if (depth > MAX_EQUAL_DEPTH)
        return -1;
    if ((depth & 63) == 63 && vm_stack_low())
        return -3;                       /* (10,000 levels overflowed a 512 KiB stack) */
    if (++*steps > MAX_EQUAL_STEPS)
        return -2;
    if (vm_is_type(a, T_STRING) && vm_is_type(b, T_STRING)) {
        vstring *x = (vstring *)a, *y = (vstring *)b;   /* strings may hold NUL bytes */
        return x->len == y->len && memcmp(x->s, y->s, x->len) == 0;
    }
    if (vm_is_type(a, T_VECTOR) && vm_is_type(b, T_VECTOR)) {
        vvector *x = (vvector *)a, *y = (vvector *)b;
        if (x->len != y->len)
            return 0;
        for (uint32_t i = 0; i < x->len; i++) {
            int e = equal(x->items[i], y->items[i], depth + 1, steps);
            if (e != 1)
                return e;
        }
        return 1;
    }
    return 0;
}

VM_BUILTIN(b_eq) { VM_UNUSED_ARGS; (void)vm; return argv[0] == argv[1] ? V_TRUE : V_FALSE; }
VM_BUILTIN(b_equal)
{
    VM_UNUSED_ARGS;
    unsigned long steps = 0;
    int e = equal(argv[0], argv[1], 0, &steps);
    if (e == -1)
        vm_error(vm, "equal?: vectors nested more than %d deep (do they contain themselves?)",
                 MAX_EQUAL_DEPTH);
    if (e == -2)
        vm_error(vm, "equal?: more than %lu element comparisons (shared or cyclic vectors?)",
                 MAX_EQUAL_STEPS);
    if (e == -3)
        vm_error(vm, "equal?: vectors nested too deeply for the C stack");
    return e ? V_TRUE : V_FALSE;
}

#define TYPE_PRED(cname, test)                                                                   \
    VM_BUILTIN(cname)                                                                            \
    {                                                                                            \
        VM_UNUSED_ARGS;                                                                          \
        (void)vm;                                                                                \
        value v = argv[0];                                                                       \
        return (test) ? V_TRUE : V_FALSE;                                                        \
    }
TYPE_PRED(b_integerp, IS_FIX(v))
TYPE_PRED(b_stringp, vm_is_type(v, T_STRING))
TYPE_PRED(b_vectorp, vm_is_type(v, T_VECTOR))
TYPE_PRED(b_nilp, v == V_NIL)
TYPE_PRED(b_procedurep,
          vm_is_type(v, T_CLOSURE) || vm_is_type(v, T_BUILTIN) || vm_is_type(v, T_FFI))

/* ---- strings and vectors ------------------------------------------------------- */

VM_BUILTIN(b_string_length)
{
    VM_UNUSED_ARGS;
    return FIX(((vstring *)vm_arg_obj(vm, argv[0], T_STRING, "string-length", "string"))->len);
}

VM_BUILTIN(b_string_append)
{
    size_t len = 0;
    for (int i = 0; i < argc; i++)
        len += ((vstring *)vm_arg_obj(vm, argv[i], T_STRING, "string-append", "string"))->len;
    if (len > VM_STRING_MAX)             /* (argc is small: no overflow of len itself) */
        vm_error(vm, "string-append: the result, %zu bytes, is longer than a string holds (%u)",
                 len, (unsigned)VM_STRING_MAX);
    vstring *s = VM_ALLOC_ATOMIC(sizeof *s + len + 1);
    if (!s)
        vm_error(vm, "out of memory");
    s->h.type = T_STRING;
    s->len = (uint32_t)len;
    size_t at = 0;
    for (int i = 0; i < argc; i++) {
        vstring *part = (vstring *)argv[i];
        memcpy(s->s + at, part->s, part->len);
        at += part->len;
    }
    s->s[len] = '\0';
    return (value)s;
}

VM_BUILTIN(b_vector)
{
    (void)vm;
    value v = vm_make_vector((uint32_t)argc, V_NIL);
    for (int i = 0; i < argc; i++)
        ((vvector *)v)->items[i] = argv[i];
    return v;
}

VM_BUILTIN(b_make_vector)
{
    intptr_t n = vm_arg_int(vm, argv[0], "make-vector");
    if (n < 0 || n > (1 << 28))
        vm_error(vm, "make-vector: bad length %ld", (long)n);
    return vm_make_vector((uint32_t)n, argc > 1 ? argv[1] : V_NIL);
}

static value *vector_slot(vm_state *vm, value *argv, const char *who)
{
    vvector *v = vm_arg_obj(vm, argv[0], T_VECTOR, who, "vector");
    intptr_t i = vm_arg_int(vm, argv[1], who);
    if (i < 0 || (uintptr_t)i >= v->len)
        vm_error(vm, "index out of range: %s index %ld of a %u-element vector", who, (long)i,
                 v->len);
#ifndef CRAWLVM_NO_FRAMES
    if (vm->check_objects)
        crawl_gc_check(&v->items[i], sizeof(value), 0);
#endif
    return &v->items[i];
}

VM_BUILTIN(b_vector_ref) { VM_UNUSED_ARGS; return *vector_slot(vm, argv, "vector-ref"); }
VM_BUILTIN(b_vector_set)
{
    VM_UNUSED_ARGS;
    *vector_slot(vm, argv, "vector-set!") = argv[2];
    return V_NIL;
}
VM_BUILTIN(b_vector_length)
{
    VM_UNUSED_ARGS;
    return FIX(((vvector *)vm_arg_obj(vm, argv[0], T_VECTOR, "vector-length", "vector"))->len);
}

/* ---- errors, traces, the collector ---------------------------------------------- */

VM_BUILTIN(b_error)
{
    char msg[400];
    size_t n = 0;
    for (int i = 0; i < argc && n < sizeof msg; i++) {
        if (i)
            n += (size_t)snprintf(msg + n, sizeof msg - n, " ");
        if (n < sizeof msg)
            n += vm_format_value(argv[i], msg + n, sizeof msg - n, i > 0);
    }
    /* a NUL byte in the message is shown as \0, not where it ends (the
     * rest was lost; found by an outside test) */
    size_t len = n < sizeof msg ? n : sizeof msg - 1;
    char shown[2 * sizeof msg];
    size_t k = 0;
    for (size_t i = 0; i < len; i++) {
        if (msg[i] == '\0')
            shown[k++] = '\\', shown[k++] = '0';
        else
            shown[k++] = msg[i];
    }
    shown[k] = '\0';
    vm_error(vm, "%s", shown);
}

VM_BUILTIN(b_assert)
{
    if (!vm_truthy(argv[0])) {
        char what[300] = "";
        if (argc > 1)
            vm_format_value(argv[1], what, sizeof what, 0);
        vm_error(vm, "assertion failed%s%s", argc > 1 ? ": " : "", what);
    }
    return V_TRUE;
}

VM_BUILTIN(b_backtrace)
{
    VM_UNUSED_ARGS;
    vm_print_traceback(vm, vm->out_fd, "Traceback (most recent call first):");
    return V_NIL;
}

VM_BUILTIN(b_gc)
{
    VM_UNUSED_ARGS;
    (void)vm;
#ifdef CRAWLVM_NO_FRAMES
    GC_gcollect();
#else
    crawl_gc_collect();                  /* also sweeps: collected objects reach the quarantine */
#endif
    return V_NIL;
}

VM_BUILTIN(b_gc_count)
{
    VM_UNUSED_ARGS;
    (void)vm;
    return FIX((intptr_t)GC_get_gc_no());
}

#ifndef CRAWLVM_NO_FRAMES
/* What fn writes to a file descriptor, put out as the script's output:
 * through a memory file and out(), so that lost output is an error as
 * print's is (crawl's own writer, given the output itself, let it go
 * unseen: exit 0 with the census lost to /dev/full) */
static int through_out(vm_state *vm, int (*fn)(const void *arg, int fd), const void *arg)
{
    int mfd = memfd_create("crawlvm-out", MFD_CLOEXEC);
    if (mfd < 0)
        return fn(arg, vm->out_fd);      /* (no memfd: straight out, unchecked) */
    if (mfd == vm->out_fd) {
        /* the output was closed, and the memfd took its number: it read
         * what it wrote, for ever (gc-roots with stdout closed) */
        close(mfd);
        vm_error(vm, "write error: %s", strerror(EBADF));
    }
    int rc = fn(arg, mfd);
    char buf[4096];
    for (off_t at = 0;;) {
        ssize_t k = pread(mfd, buf, sizeof buf, at);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            break;
        at += k;
        int e = vm_write_all(vm->out_fd, buf, (size_t)k);
        if (e) {
            close(mfd);
            vm_error(vm, "write error: %s", strerror(e));
        }
    }
    close(mfd);
    return rc;
}
static int census_to(const void *unused, int fd)
{
    (void)unused;
    crawl_gc_census(fd);
    return 0;
}
static int why_to(const void *o, int fd) { return crawl_gc_why(o, fd); }

/* (gc-roots): crawl-boehm's census of every root, on the VM's output. */
VM_BUILTIN(b_gc_roots)
{
    VM_UNUSED_ARGS;
    through_out(vm, census_to, NULL);
    return V_NIL;
}

/* (gc-why obj): why obj is alive, on the VM's output; the path length, or
 * -1 when no root reaches it. */
VM_BUILTIN(b_gc_why)
{
    VM_UNUSED_ARGS;
    if (!IS_OBJ(argv[0]))
        vm_error(vm, "type error: gc-why expects an object, got %s", vm_type_name(argv[0]));
    int rc = through_out(vm, why_to, (const void *)argv[0]);
    return FIX(rc < 0 ? -1 : rc);
}
#endif

/* ---- native buffers (raw memory for the FFI) ------------------------------------ */

/* Buffer memory comes from malloc (or the checked heap), which Boehm
 * neither sees nor counts: a script dropping 64 MiB buffers reached 2.6
 * GiB with no collection to finalize them. So the VM counts the bytes its
 * live buffers hold and collects (running the finalizers that free the
 * unreachable ones) when they pass twice what was live after the last
 * forced collection, and at least 64 MiB (Go's GOGC=100 pacing: native
 * memory at most doubles between collections); and collects and tries
 * again when the allocator says no. */
#define NATIVE_GC_MIN (64u << 20)

/* A collection, and the finalizers of the buffers it found unreachable */
static void collect_buffers(void)
{
    GC_gcollect();
    GC_invoke_finalizers();
}

/* Before n more bytes of buffers: collect if they would pass the mark */
static void native_pace(vm_state *vm, size_t n)
{
    if (!vm->native_next_gc)
        vm->native_next_gc = NATIVE_GC_MIN;
    if (vm->native_live + n <= vm->native_next_gc)
        return;
    collect_buffers();
    size_t after = vm->native_live + n;
    vm->native_next_gc = after < NATIVE_GC_MIN / 2 ? NATIVE_GC_MIN : 2 * after;
}

/* (the finalizer's data is the VM's handle: the VM may be freed by then,
 * and the buffer's own release function freed it) */
static void GC_CALLBACK finalize_buffer(void *o, void *handle)
{
    buffer_obj *b = o;
    if (b->freed)
        return;
    b->release(b->data);
    b->freed = 1;
    vm_state *vm = ((vm_handle *)handle)->vm;
    if (vm)
        vm->native_live -= b->size;
}

VM_BUILTIN(b_make_buffer)
{
    VM_UNUSED_ARGS;
    intptr_t n = vm_arg_int(vm, argv[0], "make-buffer");
    if (n < 0 || n > (1L << 32))
        vm_error(vm, "make-buffer: bad size %ld", (long)n);
    buffer_obj *b = VM_ALLOC(sizeof *b);
    if (!b)
        vm_error(vm, "out of memory");
    b->h.type = T_BUFFER;
    b->size = (size_t)n;
    native_pace(vm, (size_t)n);
    b->data = vm->alloc.alloc((size_t)n);
    if (!b->data) {                      /* dropped buffers may hold what it needs */
        collect_buffers();
        b->data = vm->alloc.alloc((size_t)n);
    }
    if (!b->data)
        vm_error(vm, "make-buffer: cannot allocate %ld bytes", (long)n);
    b->release = vm->alloc.release;
    memset(b->data, 0, (size_t)n);
    vm->native_live += (size_t)n;
    GC_REGISTER_FINALIZER(b, finalize_buffer, vm->handle, NULL, NULL);
    return (value)b;
}

VM_BUILTIN(b_buffer_free)
{
    VM_UNUSED_ARGS;
    buffer_obj *b = vm_arg_obj(vm, argv[0], T_BUFFER, "buffer-free", "buffer");
    if (b->freed && !vm_alloc_checks_freed(&vm->alloc, b->data))
        vm_error(vm, "buffer-free: buffer already freed");
    vm->alloc.release(b->data);          /* a checked heap reports a double free itself */
    if (!b->freed)
        vm->native_live -= b->size;
    b->freed = 1;
    return V_NIL;
}

VM_BUILTIN(b_buffer_size)
{
    VM_UNUSED_ARGS;
    return FIX((intptr_t)((buffer_obj *)vm_arg_obj(vm, argv[0], T_BUFFER, "buffer-size", "buffer"))->size);
}

/* Address of element i (of width bytes) for an access; every access is
 * checked: by the VM, or by the checked heap when one is installed (it then
 * reports overflows and use after free in its own words). */
static unsigned char *buffer_at(vm_state *vm, value *argv, size_t width, int is_write, const char *who)
{
    buffer_obj *b = vm_arg_obj(vm, argv[0], T_BUFFER, who, "buffer");
    intptr_t i = vm_arg_int(vm, argv[1], who);
    /* an index whose address would wrap is out of range, whatever the
     * checker would make of the wrapped address (an underflow report) */
    uintptr_t base = (uintptr_t)b->data;
    if (i < 0 ? (uintptr_t)-i > base / width : (uintptr_t)i > (UINTPTR_MAX - base) / width)
        vm_error(vm, "index out of range: %s index %ld of a %zu-element buffer", who, (long)i,
                 b->size / width);
    unsigned char *p = (unsigned char *)(base + (uintptr_t)i * width);
    /* the checked heap reports what it sees (redzones, freed memory); the
     * VM's own checks still refuse what it cannot see (an index so far out
     * that it lands in another live chunk, recycled memory) */
    if (vm->alloc.check && vm->alloc.check(p, width, is_write) != 0)
        vm_error(vm, "%s: invalid access reported by the checked heap", who);
    if (b->freed)
        vm_error(vm, "%s: buffer used after buffer-free", who);
    if (i < 0 || (size_t)i >= b->size / width)
        vm_error(vm, "index out of range: %s index %ld of a %zu-element buffer", who, (long)i,
                 b->size / width);
    return p;
}

VM_BUILTIN(b_buffer_u8_ref)
{
    VM_UNUSED_ARGS;
    return FIX(*buffer_at(vm, argv, 1, 0, "buffer-u8-ref"));
}
/* A value a store's element cannot hold is refused, as the FFI refuses
 * one its C type cannot hold (it was cut to its low bits: -1 read back as
 * 255, 4294967297 as 1) */
static intptr_t store_value(vm_state *vm, value v, intptr_t lo, intptr_t hi, const char *who,
                            const char *what)
{
    intptr_t x = vm_arg_int(vm, v, who);
    if (x < lo || x > hi)
        vm_error(vm, "%s: %ld does not fit in %s (%ld to %ld)", who, (long)x, what, (long)lo,
                 (long)hi);
    return x;
}
VM_BUILTIN(b_buffer_u8_set)
{
    VM_UNUSED_ARGS;
    intptr_t v = store_value(vm, argv[2], 0, UINT8_MAX, "buffer-u8-set!", "a byte");
    *buffer_at(vm, argv, 1, 1, "buffer-u8-set!") = (unsigned char)v;
    return V_NIL;
}
VM_BUILTIN(b_buffer_i32_ref)
{
    VM_UNUSED_ARGS;
    int32_t x;
    memcpy(&x, buffer_at(vm, argv, 4, 0, "buffer-i32-ref"), 4);
    return FIX(x);
}
VM_BUILTIN(b_buffer_i32_set)
{
    VM_UNUSED_ARGS;
    int32_t x = (int32_t)store_value(vm, argv[2], INT32_MIN, INT32_MAX, "buffer-i32-set!",
                                     "a 32-bit integer");
    memcpy(buffer_at(vm, argv, 4, 1, "buffer-i32-set!"), &x, 4);
    return V_NIL;
}

/* (peek-i32 pointer [index]): read C memory handed to a callback. The
 * read goes through the kernel (process_vm_readv), so an address that is
 * not mapped is a script error, not a crash; read in place only where the
 * kernel refuses the call itself (a seccomp filter). */
VM_BUILTIN(b_peek_i32)
{
    pointer_obj *p = vm_arg_obj(vm, argv[0], T_POINTER, "peek-i32", "pointer");
    intptr_t i = argc > 1 ? vm_arg_int(vm, argv[1], "peek-i32") : 0;
    if (!p->p)
        vm_error(vm, "peek-i32: NULL pointer");
    /* (the address wraps as unsigned arithmetic; an index whose byte
     * offset does not fit in the address space is refused first) */
    if (i > INTPTR_MAX / 4 || i < INTPTR_MIN / 4)
        vm_error(vm, "peek-i32: index %" PRIdPTR " out of range", i);
    uintptr_t at = (uintptr_t)p->p + (uintptr_t)i * 4u;
    int32_t x;
    struct iovec local = {&x, sizeof x}, remote = {(void *)at, sizeof x};
    static int in_place;                 /* 1: the kernel refused process_vm_readv */
    if (!in_place) {
        ssize_t got = process_vm_readv(getpid(), &local, 1, &remote, 1, 0);
        if (got == (ssize_t)sizeof x)
            return FIX(x);
        if (got >= 0 || errno == EFAULT)
            vm_error(vm, "peek-i32: cannot read 4 bytes at %#" PRIxPTR, at);
        in_place = 1;
    }
    memcpy(&x, (const void *)at, sizeof x);
    return FIX(x);
}

/* ---- installation ---------------------------------------------------------------------- */

void vm_def_builtin(vm_state *vm, const char *name, int min, int max, builtin_fn fn)
{
    builtin *b = VM_ALLOC(sizeof *b);
    if (!b) {
        fprintf(stderr, "crawlvm: out of memory\n");
        exit(70);
    }
    b->h.type = T_BUILTIN;
    b->name = name;
    b->min_args = min;
    b->max_args = max;
    b->fn = fn;
    vm_set_global(vm, name, (value)b);
}

void vm_register(vm_state *vm, const vm_reg *regs)
{
    for (; regs->name; regs++)
        vm_def_builtin(vm, regs->name, regs->min_args, regs->max_args, regs->fn);
}

/* printing, integers, strings, vectors, errors and traces, the collector,
 * native buffers */
static const vm_reg base_lib[] = {
    {"print", 0, -1, b_print},
    {"display", 1, 1, b_display},
    {"str", 1, 1, b_str},
    {"+", 0, -1, b_add},
    {"-", 1, -1, b_sub},
    {"*", 0, -1, b_mul},
    {"quotient", 2, 2, b_quotient},
    {"remainder", 2, 2, b_remainder},
    {"<", 2, 2, b_lt},
    {"<=", 2, 2, b_le},
    {">", 2, 2, b_gt},
    {">=", 2, 2, b_ge},
    {"=", 2, 2, b_numeq},
    {"not", 1, 1, b_not},
    {"eq?", 2, 2, b_eq},
    {"equal?", 2, 2, b_equal},
    {"integer?", 1, 1, b_integerp},
    {"string?", 1, 1, b_stringp},
    {"vector?", 1, 1, b_vectorp},
    {"nil?", 1, 1, b_nilp},
    {"procedure?", 1, 1, b_procedurep},
    {"string-length", 1, 1, b_string_length},
    {"string-append", 0, -1, b_string_append},
    {"vector", 0, -1, b_vector},
    {"make-vector", 1, 2, b_make_vector},
    {"vector-ref", 2, 2, b_vector_ref},
    {"vector-set!", 3, 3, b_vector_set},
    {"vector-length", 1, 1, b_vector_length},
    {"error", 1, -1, b_error},
    {"assert", 1, 2, b_assert},
    {"backtrace", 0, 0, b_backtrace},
    {"gc", 0, 0, b_gc},
    {"gc-count", 0, 0, b_gc_count},
#ifndef CRAWLVM_NO_FRAMES
    {"gc-roots", 0, 0, b_gc_roots},
    {"gc-why", 1, 1, b_gc_why},
#endif
    {"make-buffer", 1, 1, b_make_buffer},
    {"buffer-free", 1, 1, b_buffer_free},
    {"buffer-size", 1, 1, b_buffer_size},
    {"buffer-u8-ref", 2, 2, b_buffer_u8_ref},
    {"buffer-u8-set!", 3, 3, b_buffer_u8_set},
    {"buffer-i32-ref", 2, 2, b_buffer_i32_ref},
    {"buffer-i32-set!", 3, 3, b_buffer_i32_set},
    {"peek-i32", 1, 2, b_peek_i32},
    {NULL, 0, 0, NULL},
};

void vm_open_base(vm_state *vm)
{
    vm_register(vm, base_lib);
}

void vm_open_libs(vm_state *vm)
{
    vm_open_base(vm);
    vm_open_ffi(vm);
}
