/* Values: construction, type names, printing. */
#include <gc/gc.h>
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

static int format_at(value v, char *buf, size_t len, int quote, int depth, unsigned *left);

int vm_format_value(value v, char *buf, size_t len, int quote)
{
    unsigned left = MAX_PRINT_ELEMENTS;
    return format_at(v, buf, len, quote, 0, &left);
}

static int format_at(value v, char *buf, size_t len, int quote, int depth, unsigned *left)
{
    if (*left == 0)
        return snprintf(buf, len, "...");
    --*left;
    if (IS_FIX(v))
        return snprintf(buf, len, "%ld", (long)FIXVAL(v));
    switch (v) {
    case V_NIL: return snprintf(buf, len, "nil");
    case V_TRUE: return snprintf(buf, len, "#t");
    case V_FALSE: return snprintf(buf, len, "#f");
    }
    if (!IS_OBJ(v))
        return snprintf(buf, len, "#<?>");
    switch (vm_obj_type(v)) {
    case T_STRING:
        return snprintf(buf, len, quote ? "\"%s\"" : "%s", ((vstring *)v)->s);
    case T_VECTOR: {
        /* like snprintf, return the full length even when buf is too small */
        vvector *vec = (vvector *)v;
        if (depth >= MAX_PRINT_DEPTH)
            return snprintf(buf, len, "[...]");
#define REST (n < len ? buf + n : NULL), (n < len ? len - n : 0)
        size_t n = (size_t)snprintf(buf, len, "[");
        for (uint32_t i = 0; i < vec->len; i++) {
            if (i)
                n += (size_t)snprintf(REST, " ");
            if (*left == 0) {
                n += (size_t)snprintf(REST, "...");
                break;
            }
            n += (size_t)format_at(vec->items[i], REST, 1, depth + 1, left);
        }
        n += (size_t)snprintf(REST, "]");
#undef REST
        return (int)n;
    }
    case T_CLOSURE:
        return snprintf(buf, len, "#<function %s>", ((closure *)v)->p->name);
    case T_BUILTIN:
        return snprintf(buf, len, "#<builtin %s>", ((builtin *)v)->name);
    case T_FFI:
        return snprintf(buf, len, "#<native %s>", crawl_ffi_name(((ffi_obj *)v)->fn));
    case T_CALLBACK:
        return snprintf(buf, len, "#<callback %p>", crawl_ffi_closure_code(((callback_obj *)v)->c));
    case T_BUFFER:
        return snprintf(buf, len, "#<buffer %zu bytes%s>", ((buffer_obj *)v)->size,
                        ((buffer_obj *)v)->freed ? ", freed" : "");
    case T_POINTER:
        return snprintf(buf, len, "#<pointer %p>", ((pointer_obj *)v)->p);
    default:
        return snprintf(buf, len, "#<%s>", vm_type_name(v));
    }
}
