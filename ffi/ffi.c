/* crawl-ffi: libffi calls and closures wrapped in transition and entry Frames. */
#include <crawl/ffi.h>
#include <dlfcn.h>
#include <ffi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct sig {
    char ret;
    unsigned nargs;
    char args[CRAWL_FFI_MAX_ARGS];
    ffi_type *ffi_args[CRAWL_FFI_MAX_ARGS];
    ffi_cif cif;
} sig;

struct crawl_ffi_fn {
    void *code;
    char *name;
    sig sig;
};

struct crawl_ffi_closure {
    ffi_closure *closure;
    void *code;
    crawl_ffi_handler handler;
    void *user;
    const void *target;
    sig sig;
};

static ffi_type *type_of(char c)
{
    switch (c) {
    case 'v': return &ffi_type_void;
    case 'i': return &ffi_type_sint;
    case 'u': return &ffi_type_uint;
    case 'l': return &ffi_type_slong;
    case 'L': return &ffi_type_ulong;
    case 'z': return &ffi_type_ulong;   /* size_t on LP64 */
    case 'd': return &ffi_type_double;
    case 'p':
    case 's': return &ffi_type_pointer;
    default: return NULL;
    }
}

static int parse_sig(const char *text, sig *s, char *err, size_t errlen)
{
    if (!text) {
        snprintf(err, errlen, "missing signature");
        return -1;
    }
    const char *p = text;
    if (!type_of(*p)) {
        snprintf(err, errlen, "bad signature \"%s\" at position 0: expected a return type (v i u l L z d p s)",
                 text);
        return -1;
    }
    s->ret = *p++;
    if (*p != '(') {
        snprintf(err, errlen, "bad signature \"%s\" at position %d: expected '('", text,
                 (int)(p - text));
        return -1;
    }
    p++;
    s->nargs = 0;
    for (; *p && *p != ')'; p++) {
        if (*p == 'v' || !type_of(*p)) {
            snprintf(err, errlen, "bad signature \"%s\" at position %d: '%c' is not an argument type (i u l L z d p s)",
                     text, (int)(p - text), *p);
            return -1;
        }
        if (s->nargs == CRAWL_FFI_MAX_ARGS) {
            snprintf(err, errlen, "bad signature \"%s\": more than %d arguments", text,
                     CRAWL_FFI_MAX_ARGS);
            return -1;
        }
        s->args[s->nargs] = *p;
        s->ffi_args[s->nargs++] = type_of(*p);
    }
    if (*p != ')') {
        snprintf(err, errlen, "bad signature \"%s\" at position %d: expected ')' at the end", text,
                 (int)(p - text));
        return -1;
    }
    if (p[1] != '\0') {                 /* (it named the ')' as the fault) */
        unsigned char x = (unsigned char)p[1];
        char shown[16];
        snprintf(shown, sizeof shown, x > ' ' && x < 127 ? "'%c'" : "byte %#x", x);
        snprintf(err, errlen, "bad signature \"%s\" at position %d: %s after the closing ')'",
                 text, (int)(p + 1 - text), shown);
        return -1;
    }
    if (ffi_prep_cif(&s->cif, FFI_DEFAULT_ABI, s->nargs, type_of(s->ret), s->ffi_args) != FFI_OK) {
        snprintf(err, errlen, "libffi rejected signature \"%s\"", text);
        return -1;
    }
    return 0;
}

crawl_ffi_fn *crawl_ffi_wrap(void *code, const char *name, const char *signature, char *err,
                             size_t errlen)
{
    if (!code) {                         /* (a call would jump to address 0) */
        snprintf(err, errlen, "missing function pointer");
        return NULL;
    }
    crawl_ffi_fn *fn = calloc(1, sizeof *fn);
    if (!fn || !(fn->name = strdup(name ? name : "?"))) {
        free(fn);
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    if (parse_sig(signature, &fn->sig, err, errlen) != 0) {
        crawl_ffi_free(fn);
        return NULL;
    }
    /* ffi_prep_cif kept a pointer to fn->sig.ffi_args: fn must not move */
    fn->code = code;
    return fn;
}

crawl_ffi_fn *crawl_ffi_open(const char *library, const char *symbol, const char *signature,
                             char *err, size_t errlen)
{
    if (!symbol || !*symbol) {
        snprintf(err, errlen, "missing symbol name");
        return NULL;
    }
    void *handle = RTLD_DEFAULT;
    if (library && *library) {
        handle = dlopen(library, RTLD_NOW | RTLD_LOCAL);
        if (!handle) {
            snprintf(err, errlen, "cannot open library \"%s\": %s", library, dlerror());
            return NULL;
        }
    }
    dlerror();
    void *code = dlsym(handle, symbol);
    if (!code) {
        snprintf(err, errlen, "symbol \"%s\" not found in %s", symbol,
                 library && *library ? library : "the process");
        return NULL;   /* a dlopen'ed library stays open: dlclose could unmap code still in use */
    }
    return crawl_ffi_wrap(code, symbol, signature, err, errlen);
}

void crawl_ffi_free(crawl_ffi_fn *fn)
{
    if (fn) {
        free(fn->name);
        free(fn);
    }
}

const char *crawl_ffi_name(const crawl_ffi_fn *fn) { return fn->name; }
unsigned crawl_ffi_nargs(const crawl_ffi_fn *fn) { return fn->sig.nargs; }
char crawl_ffi_ret_type(const crawl_ffi_fn *fn) { return fn->sig.ret; }
char crawl_ffi_arg_type(const crawl_ffi_fn *fn, unsigned i)
{
    return i < fn->sig.nargs ? fn->sig.args[i] : 0;
}

/* ---- calls: a transition Frame around ffi_call ----------------------------- */

typedef struct call_frame {
    crawl_transition t;                 /* first: regs_offset as crawl_transition's */
    const crawl_ffi_fn *fn;
} call_frame;

static int call_describe(const crawl_frame *f, char *buf, size_t len)
{
    return snprintf(buf, len, "[FFI call to %s]", ((const call_frame *)f)->fn->name);
}

static const void *call_method(const crawl_frame *f)
{
    return ((const call_frame *)f)->fn;
}

const crawl_frame_type crawl_ffi_call_type = {
    .name = "ffi-call",
    .flags = CRAWL_FRAME_SAVES_REGS,
    .method = call_method,
    .describe = call_describe,
    .kind = CRAWL_FRAME_KIND_TRANSITION,
    .regs_offset = offsetof(crawl_transition, regs),
};

/* Integral results come back widened to ffi_arg. */
static void store_result(char type, const void *raw, crawl_ffi_value *ret)
{
    ffi_arg a;
    switch (type) {
    case 'v': return;
    case 'i': memcpy(&a, raw, sizeof a); ret->i = (int)a; return;
    case 'u': memcpy(&a, raw, sizeof a); ret->u = (unsigned)a; return;
    case 'd': memcpy(&ret->d, raw, sizeof ret->d); return;
    default: memcpy(&ret->L, raw, sizeof ret->L); return;
    }
}

void crawl_ffi_call(const crawl_ffi_fn *fn, crawl_ffi_value *ret, const crawl_ffi_value *args)
{
    void *argp[CRAWL_FFI_MAX_ARGS];
    for (unsigned i = 0; i < fn->sig.nargs; i++)
        argp[i] = (void *)&args[i];
    union { ffi_arg a; double d; void *p; } raw = {0};
#ifdef CRAWL_FFI_NO_FRAMES            /* bench/vm: the cost of crawl's bookkeeping */
    ffi_call((ffi_cif *)&fn->sig.cif, FFI_FN(fn->code), &raw, argp);
#else
    call_frame fr = {.fn = fn};
    crawl_transition_push(&fr.t, &crawl_ffi_call_type);
    ffi_call((ffi_cif *)&fn->sig.cif, FFI_FN(fn->code), &raw, argp);
    crawl_frame_pop(&fr.t.frame);
#endif
    if (ret)
        store_result(fn->sig.ret, &raw, ret);
}

/* ---- closures: an entry Frame on the way back in --------------------------- */

typedef struct callback_frame {
    crawl_frame frame;
    const crawl_ffi_closure *closure;
} callback_frame;

static const void *callback_method(const crawl_frame *f)
{
    return ((const callback_frame *)f)->closure->target;
}

static int callback_describe(const crawl_frame *f, char *buf, size_t len)
{
    return snprintf(buf, len, "[FFI callback into %p]", callback_method(f));
}

const crawl_frame_type crawl_ffi_callback_type = {
    .name = "ffi-callback",
    .method = callback_method,
    .describe = callback_describe,
    .kind = CRAWL_FRAME_KIND_ENTRY,
};

static void closure_entry(ffi_cif *cif, void *ret, void **args, void *user)
{
    (void)cif;
    const crawl_ffi_closure *c = user;
    crawl_ffi_value in[CRAWL_FFI_MAX_ARGS], out = {0};
    for (unsigned i = 0; i < c->sig.nargs; i++) {
        switch (c->sig.args[i]) {
        case 'i': in[i].i = *(int *)args[i]; break;
        case 'u': in[i].u = *(unsigned *)args[i]; break;
        case 'd': in[i].d = *(double *)args[i]; break;
        default: in[i].L = *(unsigned long *)args[i]; break;
        }
    }
#ifdef CRAWL_FFI_NO_FRAMES
    c->handler(c, &out, in, c->user);
#else
    callback_frame fr = {.closure = c};
    crawl_frame_push(&fr.frame, &crawl_ffi_callback_type);
    c->handler(c, &out, in, c->user);
    crawl_frame_pop(&fr.frame);
#endif
    switch (c->sig.ret) {
    case 'v': break;
    case 'i': *(ffi_arg *)ret = (ffi_arg)(ffi_sarg)out.i; break;
    case 'u': *(ffi_arg *)ret = (ffi_arg)out.u; break;
    case 'd': *(double *)ret = out.d; break;
    default: *(ffi_arg *)ret = (ffi_arg)out.L; break;
    }
}

crawl_ffi_closure *crawl_ffi_closure_new(const char *signature, crawl_ffi_handler handler,
                                         void *user, const void *target, char *err,
                                         size_t errlen)
{
    if (!handler) {
        snprintf(err, errlen, "missing handler");
        return NULL;
    }
    crawl_ffi_closure *c = calloc(1, sizeof *c);
    if (!c) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    if (parse_sig(signature, &c->sig, err, errlen) != 0) {
        free(c);
        return NULL;
    }
    c->closure = ffi_closure_alloc(sizeof(ffi_closure), &c->code);
    if (!c->closure ||
        ffi_prep_closure_loc(c->closure, &c->sig.cif, closure_entry, c, c->code) != FFI_OK) {
        snprintf(err, errlen, "libffi could not create a closure for \"%s\"", signature);
        if (c->closure)
            ffi_closure_free(c->closure);
        free(c);
        return NULL;
    }
    c->handler = handler;
    c->user = user;
    c->target = target;
    return c;
}

void *crawl_ffi_closure_code(const crawl_ffi_closure *c) { return c->code; }
unsigned crawl_ffi_closure_nargs(const crawl_ffi_closure *c) { return c->sig.nargs; }
char crawl_ffi_closure_ret_type(const crawl_ffi_closure *c) { return c->sig.ret; }
char crawl_ffi_closure_arg_type(const crawl_ffi_closure *c, unsigned i)
{
    return i < c->sig.nargs ? c->sig.args[i] : 0;
}

void crawl_ffi_closure_set_target(crawl_ffi_closure *c, const void *target)
{
    c->target = target;
}

void crawl_ffi_closure_free(crawl_ffi_closure *c)
{
    if (c) {
        ffi_closure_free(c->closure);
        free(c);
    }
}
