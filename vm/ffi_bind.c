/* The FFI builtins: ffi-fn and ffi-callback, and the marshalling between
 * crawlvm values and C through crawl-ffi (calls inside transition Frames,
 * callbacks inside entry Frames). */
#include <gc/gc.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "vm/builtins.h"
#include "vm/ffi_bind.h"
#include "vm/value.h"
#include "vm/vm.h"

/* ---- values across the FFI ------------------------------------------------------------------------ */

static value make_pointer(vm_state *vm, void *p)
{
    if (!p)
        return V_NIL;
    pointer_obj *o = VM_ALLOC(sizeof *o);
    if (!o)
        vm_error(vm, "out of memory");
    o->h.type = T_POINTER;
    o->p = p;
    return (value)o;
}

static void GC_CALLBACK finalize_ffi(void *o, void *unused)
{
    (void)unused;
    crawl_ffi_free(((ffi_obj *)o)->fn);
}

/* A string argument that C takes as a name or a signature: one with a NUL
 * byte is refused (C saw only the part before it: "strlen\0anything" was
 * strlen, and a library path starting with one was the process itself) */
static const char *c_name_arg(vm_state *vm, value v, const char *fn, const char *what)
{
    const vstring *s = (const vstring *)vm_arg_obj(vm, v, T_STRING, fn, "string");
    const char *z = memchr(s->s, '\0', s->len);
    if (z)
        vm_error(vm, "ffi error: %s of %s holds a NUL byte at offset %ld", what, fn,
                 (long)(z - s->s));
    return s->s;
}

VM_BUILTIN(b_ffi_fn)
{
    VM_UNUSED_ARGS;
    const char *lib = argv[0] == V_NIL ? NULL : c_name_arg(vm, argv[0], "ffi-fn", "the library");
    const char *sym = c_name_arg(vm, argv[1], "ffi-fn", "the symbol");
    const char *sig = c_name_arg(vm, argv[2], "ffi-fn", "the signature");
    char err[300];
    crawl_ffi_fn *fn = crawl_ffi_open(lib, sym, sig, err, sizeof err);
    if (!fn)
        vm_error(vm, "ffi error: %s", err);
    ffi_obj *o = VM_ALLOC(sizeof *o);
    if (!o) {
        crawl_ffi_free(fn);
        vm_error(vm, "out of memory");
    }
    o->h.type = T_FFI;
    o->fn = fn;
    GC_REGISTER_FINALIZER(o, finalize_ffi, NULL, NULL, NULL);
    return (value)o;
}

/* What an error names: "argument 2 of f", or fn itself for argno 0, as
 * "the callback's result" (it said "argument 0 of the callback's result").
 * Made on the error paths only (made for every argument, it was half of a
 * call to labs). */
static const char *what_of(char *buf, size_t len, const char *fn, int argno)
{
    if (!argno)
        return fn;
    snprintf(buf, len, "argument %d of %s", argno, fn);
    return buf;
}
#define WHAT what_of(what, sizeof what, fn, argno)

static crawl_ffi_value to_c(vm_state *vm, value v, char type, const char *fn, int argno)
{
    crawl_ffi_value c = {.L = 0};
    char what[160];
    switch (type) {
    case 'i': case 'u': case 'l': case 'L': case 'z': {
        if (!IS_FIX(v))
            break;
        /* an integer the C type cannot hold is refused, not cut to its low
         * bits ((abs 4294967297) was 1) */
        intptr_t n = FIXVAL(v);
        static const struct { char type; intptr_t lo, hi; const char *name; } range[] = {
            {'i', INT_MIN, INT_MAX, "int"},
            {'u', 0, UINT_MAX, "unsigned int"},
            {'L', 0, INTPTR_MAX, "unsigned long"},
            {'z', 0, INTPTR_MAX, "size_t"},
        };
        for (size_t k = 0; k < sizeof range / sizeof range[0]; k++)
            if (range[k].type == type && (n < range[k].lo || n > range[k].hi))
                vm_error(vm, "ffi error: %s: %ld does not fit in a C %s", WHAT,
                         (long)n, range[k].name);
        c.l = n;
        return c;
    }
    case 'd':
        if (!IS_FIX(v))
            break;
        c.d = (double)FIXVAL(v);
        return c;
    case 's':
        if (v == V_NIL)
            return c;
        if (!vm_is_type(v, T_STRING))
            break;
        c.s = ((vstring *)v)->s;
        return c;
    case 'p':
        if (v == V_NIL)
            return c;
        if (vm_is_type(v, T_BUFFER)) {
            /* never to C: a checker that knows the memory freed reports
             * (its use-after-free report, with the stacks), then the VM
             * refuses (C's access would be seen by no one) */
            if (((buffer_obj *)v)->freed) {
                const unsigned char *d = ((buffer_obj *)v)->data;
                if (vm_alloc_checks_freed(&vm->alloc, d) && vm->alloc.check(d, 1, 0) != 0)
                    vm_error(vm, "ffi error: %s: invalid access reported by the checked heap",
                             WHAT);
                vm_error(vm, "ffi error: %s is a freed buffer", WHAT);
            }
            c.p = ((buffer_obj *)v)->data;
            return c;
        }
        if (vm_is_type(v, T_POINTER)) {
            c.p = ((pointer_obj *)v)->p;
            return c;
        }
        if (vm_is_type(v, T_CALLBACK)) {
            c.p = crawl_ffi_closure_code(((callback_obj *)v)->c);
            return c;
        }
        if (vm_is_type(v, T_STRING)) {
            c.p = ((vstring *)v)->s;
            return c;
        }
        break;
    }
    vm_error(vm, "ffi error: %s must be %s, got %s", WHAT,
             type == 's' ? "a string or nil"
             : type == 'p' ? "a buffer, pointer, callback, string or nil"
                           : "an integer",
             vm_type_name(v));
}
#undef WHAT

static value from_c(vm_state *vm, crawl_ffi_value c, char type, const char *who)
{
    switch (type) {
    case 'v': return V_NIL;
    case 'i': return FIX(c.i);
    case 'u': return FIX(c.u);
    case 'l': return vm_int_result(vm, c.l, who);
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
        return vm_int_result(vm, (long long)c.d, who);
    case 's': {
        if (!c.s)
            return V_NIL;
        size_t n = strlen(c.s);
        if (n > VM_STRING_MAX)
            vm_error(vm, "ffi error: the string %s returned is longer than a string holds", who);
        return vm_make_string(c.s, n);
    }
    default: return make_pointer(vm, c.p);
    }
}

value vm_call_ffi(vm_state *vm, ffi_obj *f, int argc, value *argv)
{
    const char *name = crawl_ffi_name(f->fn);
    unsigned n = crawl_ffi_nargs(f->fn);
    if ((unsigned)argc != n)
        vm_error(vm, "bad arity: native %s takes %u argument(s), got %d", name, n, argc);
    crawl_ffi_value args[CRAWL_FFI_MAX_ARGS], ret = {.L = 0};
    for (unsigned i = 0; i < n; i++)
        args[i] = to_c(vm, argv[i], crawl_ffi_arg_type(f->fn, i), name, (int)i + 1);
    vm->in_c++;
    crawl_ffi_call(f->fn, &ret, args);
    vm->in_c--;
    return from_c(vm, ret, crawl_ffi_ret_type(f->fn), name);
}

/* Native code that calls back into the VM, which calls native code again...
 * recurses in C: stop with a script error while some stack is left. */
#define CALLBACK_STACK_RESERVE (256 * 1024)

/* C may keep a callback's function pointer after the script has dropped
 * the callback (a handler given to signal(), a library's registry of
 * listeners) and call it later. So a callback's libffi closure is never
 * freed: its user pointer is a cell, malloc'ed where Boehm does not look,
 * that the callback's finalizer empties and puts on a list of dead cells.
 * A call through an empty cell warns and returns 0; a new callback with
 * the same signature string takes a dead cell and its closure (so the
 * cells are as many as the most callbacks alive at once, and a stale
 * pointer called after that reuse runs the new callback, with arguments of
 * the types its C caller passes: no access to freed memory either way). */
typedef struct callback_cell {
    _Atomic(callback_obj *) cb;         /* NULL once the script dropped it */
    _Atomic(vm_handle *) handle;        /* its VM's (never freed) */
    crawl_ffi_closure *c;
    struct callback_cell *next;         /* on the dead list */
    char sig[];
} callback_cell;

static pthread_mutex_t dead_lock = PTHREAD_MUTEX_INITIALIZER;
static callback_cell *dead_cells;

static void warn_and_return_0(const char *msg, size_t len, crawl_ffi_value *ret)
{
    vm_write_all(STDERR_FILENO, msg, len);
    memset(ret, 0, sizeof *ret);
}

/* C called a callback: run its VM closure (in a new interpreter segment). */
static void callback_handler(const crawl_ffi_closure *c, crawl_ffi_value *ret,
                             const crawl_ffi_value *args, void *user)
{
    callback_cell *cell = user;
    /* the thread first, before cb is touched: on a thread Boehm does not
     * scan, cb may be collected meanwhile (the VM is not thread-safe, and
     * Boehm aborts on an allocation from a thread it does not know) */
    vm_handle *h = atomic_load(&cell->handle);
    if (!pthread_equal(pthread_self(), __atomic_load_n(&h->owner, __ATOMIC_RELAXED))) {
        static const char msg[] = "crawlvm: a callback was called on a thread other than its "
                                  "VM's; returning 0\n";
        warn_and_return_0(msg, sizeof msg - 1, ret);
        return;
    }
    callback_obj *cb = atomic_load(&cell->cb);
    if (!cb) {
        static const char msg[] = "crawlvm: a callback was called after the script dropped it "
                                  "(the GC freed it); returning 0\n";
        warn_and_return_0(msg, sizeof msg - 1, ret);
        return;
    }
    vm_state *vm = cb->handle->vm;
    if (!vm) {
        static const char msg[] = "crawlvm: a callback was called after its VM was freed; "
                                  "returning 0\n";
        warn_and_return_0(msg, sizeof msg - 1, ret);
        return;
    }
    if (vm->in_c <= 0) {
        /* a signal handler that interrupted the interpreter (or a
         * collection): said once, a timer's handler would say it
         * thousands of times */
        static const char msg[] = "crawlvm: a callback was called while the script was running, "
                                  "not from C code it called (from a signal handler?); returning 0 "
                                  "(said once)\n";
        static volatile sig_atomic_t said;
        if (said) {
            memset(ret, 0, sizeof *ret);
            return;
        }
        said = 1;
        warn_and_return_0(msg, sizeof msg - 1, ret);
        return;
    }
    uintptr_t lo, hi, here = (uintptr_t)&lo;
    if (crawl_thread_stack_bounds(&lo, &hi) == 0 && here - lo < CALLBACK_STACK_RESERVE)
        vm_error(vm, "stack overflow (native code and callbacks nested too deep)");
    vm->in_c--;                          /* the script runs again (an error restores it) */
    value argv[CRAWL_FFI_MAX_ARGS];
    unsigned n = crawl_ffi_closure_nargs(c);
    for (unsigned i = 0; i < n; i++)
        argv[i] = from_c(vm, args[i], crawl_ffi_closure_arg_type(c, i), "callback");
    value r = vm_call(vm, cb->closure, (int)n, argv);
    char rt = crawl_ffi_closure_ret_type(c);
    if (rt != 'v')
        *ret = to_c(vm, r, rt, "the callback's result", 0);
    vm->in_c++;
}

static void GC_CALLBACK finalize_callback(void *o, void *unused)
{
    (void)unused;
    callback_cell *cell = ((callback_obj *)o)->cell;
    atomic_store(&cell->cb, NULL);
    pthread_mutex_lock(&dead_lock);
    cell->next = dead_cells;
    dead_cells = cell;
    pthread_mutex_unlock(&dead_lock);
}

/* A dead cell for signature sig, taken off the list; NULL if none */
static callback_cell *reuse_cell(const char *sig)
{
    pthread_mutex_lock(&dead_lock);
    callback_cell **at = &dead_cells;
    while (*at && strcmp((*at)->sig, sig) != 0)
        at = &(*at)->next;
    callback_cell *cell = *at;
    if (cell)
        *at = cell->next;
    pthread_mutex_unlock(&dead_lock);
    return cell;
}

VM_BUILTIN(b_ffi_callback)
{
    VM_UNUSED_ARGS;
    if (!vm_is_type(argv[0], T_CLOSURE))
        vm_error(vm, "type error: ffi-callback expects a function, got %s", vm_type_name(argv[0]));
    const char *sig = c_name_arg(vm, argv[1], "ffi-callback", "the signature");
    callback_obj *cb = VM_ALLOC(sizeof *cb);
    if (!cb)
        vm_error(vm, "out of memory");
    cb->h.type = T_CALLBACK;
    cb->closure = argv[0];
    cb->handle = vm->handle;
    const void *target = ((closure *)argv[0])->p;
    callback_cell *cell = reuse_cell(sig);
    if (cell)
        crawl_ffi_closure_set_target(cell->c, target);
    else {
        size_t n = strlen(sig) + 1;
        cell = malloc(sizeof *cell + n);
        if (!cell)
            vm_error(vm, "out of memory");
        memcpy(cell->sig, sig, n);
        atomic_init(&cell->cb, NULL);
        atomic_init(&cell->handle, vm->handle);
        char err[300];
        cell->c = crawl_ffi_closure_new(sig, callback_handler, cell, target, err, sizeof err);
        if (!cell->c) {
            free(cell);
            vm_error(vm, "ffi error: %s", err);
        }
    }
    cb->c = cell->c;
    cb->cell = cell;
    /* (the cell is not seen by Boehm: the script keeps cb alive) */
    atomic_store(&cell->handle, vm->handle);
    atomic_store(&cell->cb, cb);
    GC_REGISTER_FINALIZER(cb, finalize_callback, NULL, NULL, NULL);
    return (value)cb;
}

static const vm_reg ffi_lib[] = {
    {"ffi-fn", 3, 3, b_ffi_fn},
    {"ffi-callback", 2, 2, b_ffi_callback},
    {NULL, 0, 0, NULL},
};

void vm_open_ffi(vm_state *vm)
{
    vm_register(vm, ffi_lib);
}
