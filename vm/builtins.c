/* Builtin functions: printing, integers, strings, vectors, native buffers,
 * the FFI, and GC/trace hooks. */
#include <gc/gc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "vm/vm.h"

#define BUILTIN(cname) static value cname(vm_state *vm, int argc, value *argv)
#define UNUSED_ARGS (void)vm, (void)argc, (void)argv

static intptr_t want_int(vm_state *vm, value v, const char *who)
{
    if (!IS_FIX(v))
        vm_error(vm, "type error: %s expects an integer, got %s", who, type_name(v));
    return FIXVAL(v);
}

static value make_int(vm_state *vm, long long n, const char *who)
{
    if (n > FIX_MAX || n < FIX_MIN)
        vm_error(vm, "integer overflow in %s", who);
    return FIX(n);
}

static void *want(vm_state *vm, value v, otype t, const char *who, const char *what)
{
    if (!is_type(v, t))
        vm_error(vm, "type error: %s expects a %s, got %s", who, what, type_name(v));
    return (void *)v;
}

static void out(vm_state *vm, const char *s, size_t n)
{
    while (n) {
        ssize_t w = write(vm->out_fd, s, n);
        if (w <= 0)
            return;
        s += w;
        n -= (size_t)w;
    }
}

/* ---- printing --------------------------------------------------------------- */

/* The printed form of v: in small when it fits, else in malloc'ed memory
 * (free it when it is not small). */
static char *formatted(vm_state *vm, value v, char *small, size_t len, size_t *n)
{
    int need = format_value(v, small, len, 0);
    *n = (size_t)need;
    if (need < (int)len)
        return small;
    char *big = malloc((size_t)need + 1);
    if (!big)
        vm_error(vm, "out of memory");
    format_value(v, big, (size_t)need + 1, 0);
    return big;
}

static void print_value(vm_state *vm, value v)
{
    char small[256];
    size_t n;
    char *text = formatted(vm, v, small, sizeof small, &n);
    out(vm, text, n);
    if (text != small)
        free(text);
}

BUILTIN(b_print)
{
    for (int i = 0; i < argc; i++) {
        if (i)
            out(vm, " ", 1);
        print_value(vm, argv[i]);
    }
    out(vm, "\n", 1);
    return V_NIL;
}

BUILTIN(b_display)
{
    UNUSED_ARGS;
    print_value(vm, argv[0]);
    return V_NIL;
}

BUILTIN(b_str)
{
    UNUSED_ARGS;
    if (is_type(argv[0], T_STRING))
        return argv[0];
    char small[256];
    size_t n;
    char *text = formatted(vm, argv[0], small, sizeof small, &n);
    value str = make_string(text, n);
    if (text != small)
        free(text);
    return str;
}

/* ---- integers ---------------------------------------------------------------- */

BUILTIN(b_add)
{
    long long r = 0;
    for (int i = 0; i < argc; i++)
        if (__builtin_add_overflow(r, want_int(vm, argv[i], "+"), &r))
            vm_error(vm, "integer overflow in +");
    return make_int(vm, r, "+");
}

BUILTIN(b_sub)
{
    long long r = want_int(vm, argv[0], "-");
    if (argc == 1)
        return make_int(vm, -r, "-");
    for (int i = 1; i < argc; i++)
        if (__builtin_sub_overflow(r, want_int(vm, argv[i], "-"), &r))
            vm_error(vm, "integer overflow in -");
    return make_int(vm, r, "-");
}

BUILTIN(b_mul)
{
    long long r = 1;
    for (int i = 0; i < argc; i++)
        if (__builtin_mul_overflow(r, want_int(vm, argv[i], "*"), &r))
            vm_error(vm, "integer overflow in *");
    return make_int(vm, r, "*");
}

static value divide(vm_state *vm, value *argv, int rem, const char *who)
{
    intptr_t a = want_int(vm, argv[0], who), b = want_int(vm, argv[1], who);
    if (b == 0)
        vm_error(vm, "division by zero in %s", who);
    return make_int(vm, rem ? a % b : a / b, who);
}

BUILTIN(b_quotient) { UNUSED_ARGS; return divide(vm, argv, 0, "quotient"); }
BUILTIN(b_remainder) { UNUSED_ARGS; return divide(vm, argv, 1, "remainder"); }

#define CMP_BUILTIN(cname, text, op)                                                             \
    BUILTIN(cname)                                                                               \
    {                                                                                            \
        UNUSED_ARGS;                                                                             \
        return want_int(vm, argv[0], text) op want_int(vm, argv[1], text) ? V_TRUE : V_FALSE;    \
    }
CMP_BUILTIN(b_lt, "<", <)
CMP_BUILTIN(b_le, "<=", <=)
CMP_BUILTIN(b_gt, ">", >)
CMP_BUILTIN(b_ge, ">=", >=)
CMP_BUILTIN(b_numeq, "=", ==)

BUILTIN(b_not) { UNUSED_ARGS; (void)vm; return TRUTHY(argv[0]) ? V_FALSE : V_TRUE; }

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
    if (++*steps > MAX_EQUAL_STEPS)
        return -2;
    if (is_type(a, T_STRING) && is_type(b, T_STRING)) {
        vstring *x = (vstring *)a, *y = (vstring *)b;   /* strings may hold NUL bytes */
        return x->len == y->len && memcmp(x->s, y->s, x->len) == 0;
    }
    if (is_type(a, T_VECTOR) && is_type(b, T_VECTOR)) {
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

BUILTIN(b_eq) { UNUSED_ARGS; (void)vm; return argv[0] == argv[1] ? V_TRUE : V_FALSE; }
BUILTIN(b_equal)
{
    UNUSED_ARGS;
    unsigned long steps = 0;
    int e = equal(argv[0], argv[1], 0, &steps);
    if (e == -1)
        vm_error(vm, "equal?: vectors nested more than %d deep (do they contain themselves?)",
                 MAX_EQUAL_DEPTH);
    if (e == -2)
        vm_error(vm, "equal?: more than %lu element comparisons (shared or cyclic vectors?)",
                 MAX_EQUAL_STEPS);
    return e ? V_TRUE : V_FALSE;
}

#define TYPE_PRED(cname, test)                                                                   \
    BUILTIN(cname)                                                                               \
    {                                                                                            \
        UNUSED_ARGS;                                                                             \
        (void)vm;                                                                                \
        value v = argv[0];                                                                       \
        return (test) ? V_TRUE : V_FALSE;                                                        \
    }
TYPE_PRED(b_integerp, IS_FIX(v))
TYPE_PRED(b_stringp, is_type(v, T_STRING))
TYPE_PRED(b_vectorp, is_type(v, T_VECTOR))
TYPE_PRED(b_nilp, v == V_NIL)
TYPE_PRED(b_procedurep, is_type(v, T_CLOSURE) || is_type(v, T_BUILTIN) || is_type(v, T_FFI))

/* ---- strings and vectors ------------------------------------------------------- */

BUILTIN(b_string_length)
{
    UNUSED_ARGS;
    return FIX(((vstring *)want(vm, argv[0], T_STRING, "string-length", "string"))->len);
}

BUILTIN(b_string_append)
{
    size_t len = 0;
    for (int i = 0; i < argc; i++)
        len += ((vstring *)want(vm, argv[i], T_STRING, "string-append", "string"))->len;
    vstring *s = GC_MALLOC_ATOMIC(sizeof *s + len + 1);
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

BUILTIN(b_vector)
{
    (void)vm;
    value v = make_vector((uint32_t)argc, V_NIL);
    for (int i = 0; i < argc; i++)
        ((vvector *)v)->items[i] = argv[i];
    return v;
}

BUILTIN(b_make_vector)
{
    intptr_t n = want_int(vm, argv[0], "make-vector");
    if (n < 0 || n > (1 << 28))
        vm_error(vm, "make-vector: bad length %ld", (long)n);
    return make_vector((uint32_t)n, argc > 1 ? argv[1] : V_NIL);
}

static value *vector_slot(vm_state *vm, value *argv, const char *who)
{
    vvector *v = want(vm, argv[0], T_VECTOR, who, "vector");
    intptr_t i = want_int(vm, argv[1], who);
    if (i < 0 || (uintptr_t)i >= v->len)
        vm_error(vm, "index out of range: %s index %ld of a %u-element vector", who, (long)i,
                 v->len);
    return &v->items[i];
}

BUILTIN(b_vector_ref) { UNUSED_ARGS; return *vector_slot(vm, argv, "vector-ref"); }
BUILTIN(b_vector_set)
{
    UNUSED_ARGS;
    *vector_slot(vm, argv, "vector-set!") = argv[2];
    return V_NIL;
}
BUILTIN(b_vector_length)
{
    UNUSED_ARGS;
    return FIX(((vvector *)want(vm, argv[0], T_VECTOR, "vector-length", "vector"))->len);
}

/* ---- errors, traces, the collector ---------------------------------------------- */

BUILTIN(b_error)
{
    char msg[400];
    size_t n = 0;
    for (int i = 0; i < argc && n < sizeof msg; i++) {
        if (i)
            n += (size_t)snprintf(msg + n, sizeof msg - n, " ");
        if (n < sizeof msg)
            n += (size_t)format_value(argv[i], msg + n, sizeof msg - n, i > 0);
    }
    vm_error(vm, "%s", msg);
}

BUILTIN(b_assert)
{
    if (!TRUTHY(argv[0])) {
        char what[300] = "";
        if (argc > 1)
            format_value(argv[1], what, sizeof what, 0);
        vm_error(vm, "assertion failed%s%s", argc > 1 ? ": " : "", what);
    }
    return V_TRUE;
}

BUILTIN(b_backtrace)
{
    UNUSED_ARGS;
    vm_print_traceback(vm, vm->out_fd, "Traceback (most recent call first):");
    return V_NIL;
}

BUILTIN(b_gc)
{
    UNUSED_ARGS;
    (void)vm;
    GC_gcollect();
    return V_NIL;
}

BUILTIN(b_gc_count)
{
    UNUSED_ARGS;
    (void)vm;
    return FIX((intptr_t)GC_get_gc_no());
}

/* ---- native buffers (raw memory for the FFI) ------------------------------------ */

static void GC_CALLBACK release_buffer(void *o, void *vmp)
{
    buffer_obj *b = o;
    if (!b->freed)
        ((vm_state *)vmp)->alloc.release(b->data);
}

BUILTIN(b_make_buffer)
{
    UNUSED_ARGS;
    intptr_t n = want_int(vm, argv[0], "make-buffer");
    if (n < 0 || n > (1L << 32))
        vm_error(vm, "make-buffer: bad size %ld", (long)n);
    buffer_obj *b = GC_MALLOC(sizeof *b);
    if (!b)
        vm_error(vm, "out of memory");
    b->h.type = T_BUFFER;
    b->size = (size_t)n;
    b->data = vm->alloc.alloc((size_t)n);
    if (!b->data)
        vm_error(vm, "make-buffer: cannot allocate %ld bytes", (long)n);
    memset(b->data, 0, (size_t)n);
    GC_REGISTER_FINALIZER(b, release_buffer, vm, NULL, NULL);
    return (value)b;
}

BUILTIN(b_buffer_free)
{
    UNUSED_ARGS;
    buffer_obj *b = want(vm, argv[0], T_BUFFER, "buffer-free", "buffer");
    if (b->freed && !vm->alloc.check)
        vm_error(vm, "buffer-free: buffer already freed");
    vm->alloc.release(b->data);          /* a checked heap reports a double free itself */
    b->freed = 1;
    return V_NIL;
}

BUILTIN(b_buffer_size)
{
    UNUSED_ARGS;
    return FIX((intptr_t)((buffer_obj *)want(vm, argv[0], T_BUFFER, "buffer-size", "buffer"))->size);
}

/* Address of element i (of width bytes) for an access; every access is
 * checked: by the VM, or by the checked heap when one is installed (it then
 * reports overflows and use after free in its own words). */
static unsigned char *buffer_at(vm_state *vm, value *argv, size_t width, int is_write, const char *who)
{
    buffer_obj *b = want(vm, argv[0], T_BUFFER, who, "buffer");
    intptr_t i = want_int(vm, argv[1], who);
    unsigned char *p = b->data + (size_t)i * width;
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

BUILTIN(b_buffer_u8_ref) { UNUSED_ARGS; return FIX(*buffer_at(vm, argv, 1, 0, "buffer-u8-ref")); }
BUILTIN(b_buffer_u8_set)
{
    UNUSED_ARGS;
    intptr_t v = want_int(vm, argv[2], "buffer-u8-set!");
    *buffer_at(vm, argv, 1, 1, "buffer-u8-set!") = (unsigned char)v;
    return V_NIL;
}
BUILTIN(b_buffer_i32_ref)
{
    UNUSED_ARGS;
    int32_t x;
    memcpy(&x, buffer_at(vm, argv, 4, 0, "buffer-i32-ref"), 4);
    return FIX(x);
}
BUILTIN(b_buffer_i32_set)
{
    UNUSED_ARGS;
    int32_t x = (int32_t)want_int(vm, argv[2], "buffer-i32-set!");
    memcpy(buffer_at(vm, argv, 4, 1, "buffer-i32-set!"), &x, 4);
    return V_NIL;
}

/* (peek-i32 pointer [index]): read C memory handed to a callback. */
BUILTIN(b_peek_i32)
{
    pointer_obj *p = want(vm, argv[0], T_POINTER, "peek-i32", "pointer");
    intptr_t i = argc > 1 ? want_int(vm, argv[1], "peek-i32") : 0;
    if (!p->p)
        vm_error(vm, "peek-i32: NULL pointer");
    int32_t x;
    memcpy(&x, (const char *)p->p + i * 4, 4);
    return FIX(x);
}

/* ---- the FFI ------------------------------------------------------------------------ */

static value make_pointer(vm_state *vm, void *p)
{
    if (!p)
        return V_NIL;
    pointer_obj *o = GC_MALLOC(sizeof *o);
    if (!o)
        vm_error(vm, "out of memory");
    o->h.type = T_POINTER;
    o->p = p;
    return (value)o;
}

static void GC_CALLBACK free_ffi(void *o, void *unused)
{
    (void)unused;
    crawl_ffi_free(((ffi_obj *)o)->fn);
}

BUILTIN(b_ffi_fn)
{
    UNUSED_ARGS;
    const char *lib = argv[0] == V_NIL ? NULL
                                       : ((vstring *)want(vm, argv[0], T_STRING, "ffi-fn", "string"))->s;
    const char *sym = ((vstring *)want(vm, argv[1], T_STRING, "ffi-fn", "string"))->s;
    const char *sig = ((vstring *)want(vm, argv[2], T_STRING, "ffi-fn", "string"))->s;
    char err[300];
    crawl_ffi_fn *fn = crawl_ffi_open(lib, sym, sig, err, sizeof err);
    if (!fn)
        vm_error(vm, "ffi error: %s", err);
    ffi_obj *o = GC_MALLOC(sizeof *o);
    if (!o) {
        crawl_ffi_free(fn);
        vm_error(vm, "out of memory");
    }
    o->h.type = T_FFI;
    o->fn = fn;
    GC_REGISTER_FINALIZER(o, free_ffi, NULL, NULL, NULL);
    return (value)o;
}

static crawl_ffi_value to_c(vm_state *vm, value v, char type, const char *fn, int argno)
{
    crawl_ffi_value c = {.L = 0};
    switch (type) {
    case 'i': case 'u': case 'l': case 'L': case 'z':
        if (!IS_FIX(v))
            break;
        c.l = FIXVAL(v);
        return c;
    case 'd':
        if (!IS_FIX(v))
            break;
        c.d = (double)FIXVAL(v);
        return c;
    case 's':
        if (v == V_NIL)
            return c;
        if (!is_type(v, T_STRING))
            break;
        c.s = ((vstring *)v)->s;
        return c;
    case 'p':
        if (v == V_NIL)
            return c;
        if (is_type(v, T_BUFFER)) {
            if (((buffer_obj *)v)->freed && !vm->alloc.check)
                vm_error(vm, "ffi error: argument %d of %s is a freed buffer", argno, fn);
            c.p = ((buffer_obj *)v)->data;
            return c;
        }
        if (is_type(v, T_POINTER)) {
            c.p = ((pointer_obj *)v)->p;
            return c;
        }
        if (is_type(v, T_CALLBACK)) {
            c.p = crawl_ffi_closure_code(((callback_obj *)v)->c);
            return c;
        }
        if (is_type(v, T_STRING)) {
            c.p = ((vstring *)v)->s;
            return c;
        }
        break;
    }
    vm_error(vm, "ffi error: argument %d of %s must be %s, got %s", argno, fn,
             type == 's' ? "a string or nil"
             : type == 'p' ? "a buffer, pointer, callback, string or nil"
                           : "an integer",
             type_name(v));
}

static value from_c(vm_state *vm, crawl_ffi_value c, char type, const char *who)
{
    switch (type) {
    case 'v': return V_NIL;
    case 'i': return FIX(c.i);
    case 'u': return FIX(c.u);
    case 'l': return make_int(vm, c.l, who);
    case 'L':
    case 'z':
        if (c.L > (unsigned long)FIX_MAX)
            vm_error(vm, "ffi error: result of %s does not fit in an integer", who);
        return FIX((intptr_t)c.L);
    case 'd':
        /* crawlvm has integers only: truncate, where that is defined (a NaN
         * or an out-of-range double converted to an integer is not) */
        if (!(c.d >= (double)FIX_MIN && c.d < (double)FIX_MAX + 1.0))
            vm_error(vm, "ffi error: result of %s (%g) is not a number in the integer range",
                     who, c.d);
        return make_int(vm, (long long)c.d, who);
    case 's': return c.s ? make_string(c.s, strlen(c.s)) : V_NIL;
    default: return make_pointer(vm, c.p);
    }
}

value call_ffi(vm_state *vm, ffi_obj *f, int argc, value *argv)
{
    const char *name = crawl_ffi_name(f->fn);
    unsigned n = crawl_ffi_nargs(f->fn);
    if ((unsigned)argc != n)
        vm_error(vm, "bad arity: native %s takes %u argument(s), got %d", name, n, argc);
    crawl_ffi_value args[CRAWL_FFI_MAX_ARGS], ret = {.L = 0};
    for (unsigned i = 0; i < n; i++)
        args[i] = to_c(vm, argv[i], crawl_ffi_arg_type(f->fn, i), name, (int)i + 1);
    crawl_ffi_call(f->fn, &ret, args);
    return from_c(vm, ret, crawl_ffi_ret_type(f->fn), name);
}

/* C called a callback: run its VM closure (in a new interpreter segment). */
/* Native code that calls back into the VM, which calls native code again...
 * recurses in C: stop with a script error while some stack is left. */
#define CALLBACK_STACK_RESERVE (256 * 1024)

static void callback_handler(const crawl_ffi_closure *c, crawl_ffi_value *ret,
                             const crawl_ffi_value *args, void *user)
{
    callback_obj *cb = user;
    vm_state *vm = cb->handle->vm;
    if (!vm) {
        static const char msg[] = "crawlvm: a callback was called after its VM was freed; "
                                  "returning 0\n";
        ssize_t w = write(STDERR_FILENO, msg, sizeof msg - 1);
        (void)w;
        memset(ret, 0, sizeof *ret);
        return;
    }
    uintptr_t lo, hi, here = (uintptr_t)&lo;
    if (crawl_thread_stack_bounds(&lo, &hi) == 0 && here - lo < CALLBACK_STACK_RESERVE)
        vm_error(vm, "stack overflow (native code and callbacks nested too deep)");
    value argv[CRAWL_FFI_MAX_ARGS];
    unsigned n = crawl_ffi_closure_nargs(c);
    for (unsigned i = 0; i < n; i++)
        argv[i] = from_c(vm, args[i], crawl_ffi_closure_arg_type(c, i), "callback");
    value r = vm_call(vm, cb->closure, (int)n, argv);
    char rt = crawl_ffi_closure_ret_type(c);
    if (rt != 'v')
        *ret = to_c(vm, r, rt, "the callback's result", 0);
}

static void GC_CALLBACK free_callback(void *o, void *unused)
{
    (void)unused;
    crawl_ffi_closure_free(((callback_obj *)o)->c);
}

BUILTIN(b_ffi_callback)
{
    UNUSED_ARGS;
    if (!is_type(argv[0], T_CLOSURE))
        vm_error(vm, "type error: ffi-callback expects a function, got %s", type_name(argv[0]));
    const char *sig = ((vstring *)want(vm, argv[1], T_STRING, "ffi-callback", "string"))->s;
    callback_obj *cb = GC_MALLOC(sizeof *cb);
    if (!cb)
        vm_error(vm, "out of memory");
    cb->h.type = T_CALLBACK;
    cb->closure = argv[0];
    cb->handle = vm->handle;
    char err[300];
    /* the closure's user pointer is not seen by Boehm: the script keeps cb alive */
    cb->c = crawl_ffi_closure_new(sig, callback_handler, cb, ((closure *)argv[0])->p, err, sizeof err);
    if (!cb->c)
        vm_error(vm, "ffi error: %s", err);
    GC_REGISTER_FINALIZER(cb, free_callback, NULL, NULL, NULL);
    return (value)cb;
}

/* ---- installation ---------------------------------------------------------------------- */

void vm_def_builtin(vm_state *vm, const char *name, int min, int max, builtin_fn fn)
{
    builtin *b = GC_MALLOC(sizeof *b);
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

void install_builtins(vm_state *vm)
{
    vm_def_builtin(vm, "print", 0, -1, b_print);
    vm_def_builtin(vm, "display", 1, 1, b_display);
    vm_def_builtin(vm, "str", 1, 1, b_str);
    vm_def_builtin(vm, "+", 0, -1, b_add);
    vm_def_builtin(vm, "-", 1, -1, b_sub);
    vm_def_builtin(vm, "*", 0, -1, b_mul);
    vm_def_builtin(vm, "quotient", 2, 2, b_quotient);
    vm_def_builtin(vm, "remainder", 2, 2, b_remainder);
    vm_def_builtin(vm, "<", 2, 2, b_lt);
    vm_def_builtin(vm, "<=", 2, 2, b_le);
    vm_def_builtin(vm, ">", 2, 2, b_gt);
    vm_def_builtin(vm, ">=", 2, 2, b_ge);
    vm_def_builtin(vm, "=", 2, 2, b_numeq);
    vm_def_builtin(vm, "not", 1, 1, b_not);
    vm_def_builtin(vm, "eq?", 2, 2, b_eq);
    vm_def_builtin(vm, "equal?", 2, 2, b_equal);
    vm_def_builtin(vm, "integer?", 1, 1, b_integerp);
    vm_def_builtin(vm, "string?", 1, 1, b_stringp);
    vm_def_builtin(vm, "vector?", 1, 1, b_vectorp);
    vm_def_builtin(vm, "nil?", 1, 1, b_nilp);
    vm_def_builtin(vm, "procedure?", 1, 1, b_procedurep);
    vm_def_builtin(vm, "string-length", 1, 1, b_string_length);
    vm_def_builtin(vm, "string-append", 0, -1, b_string_append);
    vm_def_builtin(vm, "vector", 0, -1, b_vector);
    vm_def_builtin(vm, "make-vector", 1, 2, b_make_vector);
    vm_def_builtin(vm, "vector-ref", 2, 2, b_vector_ref);
    vm_def_builtin(vm, "vector-set!", 3, 3, b_vector_set);
    vm_def_builtin(vm, "vector-length", 1, 1, b_vector_length);
    vm_def_builtin(vm, "error", 1, -1, b_error);
    vm_def_builtin(vm, "assert", 1, 2, b_assert);
    vm_def_builtin(vm, "backtrace", 0, 0, b_backtrace);
    vm_def_builtin(vm, "gc", 0, 0, b_gc);
    vm_def_builtin(vm, "gc-count", 0, 0, b_gc_count);
    vm_def_builtin(vm, "make-buffer", 1, 1, b_make_buffer);
    vm_def_builtin(vm, "buffer-free", 1, 1, b_buffer_free);
    vm_def_builtin(vm, "buffer-size", 1, 1, b_buffer_size);
    vm_def_builtin(vm, "buffer-u8-ref", 2, 2, b_buffer_u8_ref);
    vm_def_builtin(vm, "buffer-u8-set!", 3, 3, b_buffer_u8_set);
    vm_def_builtin(vm, "buffer-i32-ref", 2, 2, b_buffer_i32_ref);
    vm_def_builtin(vm, "buffer-i32-set!", 3, 3, b_buffer_i32_set);
    vm_def_builtin(vm, "peek-i32", 1, 2, b_peek_i32);
    vm_def_builtin(vm, "ffi-fn", 3, 3, b_ffi_fn);
    vm_def_builtin(vm, "ffi-callback", 2, 2, b_ffi_callback);
}
