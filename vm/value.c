/* Values: construction, type names, printing. */
#include <gc/gc.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vm/value.h"

value vm_make_string(const char *s, size_t len)
{
    vstring *v = VM_ALLOC_ATOMIC(sizeof *v + len + 1);
    if (!v) {
        fprintf(stderr, "crawlvm: out of memory\n");
        exit(70);
    }
    v->h.type = T_STRING;
    v->len = (uint32_t)len;
    memcpy(v->s, s, len);
    v->s[len] = '\0';
    return (value)v;
}

value vm_make_vector(uint32_t len, value init)
{
    vvector *v = VM_ALLOC(sizeof *v + (size_t)len * sizeof(value));
    if (!v) {
        fprintf(stderr, "crawlvm: out of memory\n");
        exit(70);
    }
    v->h.type = T_VECTOR;
    v->len = len;
    for (uint32_t i = 0; i < len; i++)
        v->items[i] = init;
    return (value)v;
}

const char *vm_type_name(value v)
{
    if (IS_FIX(v))
        return "integer";
    switch (v) {
    case V_NIL: return "nil";
    case V_TRUE:
    case V_FALSE: return "boolean";
    case V_UNBOUND: return "unbound";
    }
    if (!IS_OBJ(v))
        return "?";
    switch (vm_obj_type(v)) {
    case T_STRING: return "string";
    case T_VECTOR: return "vector";
    case T_PROTO: return "prototype";
    case T_CLOSURE: return "function";
    case T_BUILTIN: return "builtin";
    case T_FFI: return "native function";
    case T_CALLBACK: return "callback";
    case T_BUFFER: return "buffer";
    case T_POINTER: return "pointer";
    }
    return "?";
}

/* Vectors may contain themselves: printing stops at this depth with "[...]".
 * They may also share elements (a vector holding another twice, 40 levels
 * deep, prints 2^40 leaves): printing stops after MAX_PRINT_ELEMENTS values
 * with "...", so it always ends, in bounded time and space. */
#define MAX_PRINT_DEPTH 64
#define MAX_PRINT_ELEMENTS 100000

/* The text being formatted: what fits of it in buf[0..len), NUL-terminated
 * there, and its whole length in n (size_t: a string may be longer than an
 * int counts, and may hold NUL bytes). */
typedef struct text {
    char *buf;
    size_t len, n;
} text;

static void cat(text *t, const char *s, size_t k)
{
    if (t->n + 1 < t->len) {
        size_t room = t->len - 1 - t->n;
        memcpy(t->buf + t->n, s, k < room ? k : room);
    }
    t->n += k;
}

/* prefix, then name whatever its length, then ">" */
static void cat_named(text *t, const char *prefix, const char *name)
{
    cat(t, prefix, strlen(prefix));
    cat(t, name, strlen(name));
    cat(t, ">", 1);
}

static void catf(text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void catf(text *t, const char *fmt, ...)
{
    char piece[64];                      /* (numbers and addresses) */
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(piece, sizeof piece, fmt, ap);
    va_end(ap);
    if (k > 0)
        cat(t, piece, (size_t)k < sizeof piece ? (size_t)k : sizeof piece - 1);
}

static void format_at(value v, text *t, int quote, int depth, unsigned *left);

size_t vm_format_value(value v, char *buf, size_t len, int quote)
{
    unsigned left = MAX_PRINT_ELEMENTS;
    text t = {buf, len, 0};
    format_at(v, &t, quote, 0, &left);
    if (len)
        buf[t.n < len ? t.n : len - 1] = '\0';
    return t.n;
}

static void format_at(value v, text *t, int quote, int depth, unsigned *left)
{
    if (*left == 0) {
        cat(t, "...", 3);
        return;
    }
    --*left;
    if (IS_FIX(v)) {
        catf(t, "%ld", (long)FIXVAL(v));
        return;
    }
    switch (v) {
    case V_NIL: cat(t, "nil", 3); return;
    case V_TRUE: cat(t, "#t", 2); return;
    case V_FALSE: cat(t, "#f", 2); return;
    }
    if (!IS_OBJ(v)) {
        cat(t, "#<?>", 4);
        return;
    }
    switch (vm_obj_type(v)) {
    case T_STRING:
        if (quote)
            cat(t, "\"", 1);
        cat(t, ((vstring *)v)->s, ((vstring *)v)->len);
        if (quote)
            cat(t, "\"", 1);
        return;
    case T_VECTOR: {
        vvector *vec = (vvector *)v;
        if (depth >= MAX_PRINT_DEPTH) {
            cat(t, "[...]", 5);
            return;
        }
        cat(t, "[", 1);
        for (uint32_t i = 0; i < vec->len; i++) {
            if (i)
                cat(t, " ", 1);
            if (*left == 0) {
                cat(t, "...", 3);
                break;
            }
            format_at(vec->items[i], t, 1, depth + 1, left);
        }
        cat(t, "]", 1);
        return;
    }
    case T_CLOSURE: cat_named(t, "#<function ", ((closure *)v)->p->name); return;
    case T_BUILTIN: cat_named(t, "#<builtin ", ((builtin *)v)->name); return;
    case T_FFI: cat_named(t, "#<native ", crawl_ffi_name(((ffi_obj *)v)->fn)); return;
    case T_CALLBACK:
        catf(t, "#<callback %p>", crawl_ffi_closure_code(((callback_obj *)v)->c));
        return;
    case T_BUFFER:
        catf(t, "#<buffer %zu bytes%s>", ((buffer_obj *)v)->size,
             ((buffer_obj *)v)->freed ? ", freed" : "");
        return;
    case T_POINTER: catf(t, "#<pointer %p>", ((pointer_obj *)v)->p); return;
    default: catf(t, "#<%s>", vm_type_name(v)); return;
    }
}
