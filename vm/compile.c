/* The compiler: nodes to bytecode, one proto per function.
 *
 * Locals live in frame slots; closures are flat (captured values are
 * copied into the closure when it is made), so set! of a captured variable
 * is refused at compile time. Every instruction records its source line.
 * Compiler state that holds GC references is allocated uncollectable, so a
 * collection during compilation cannot free half-built constants. */
#include <gc/gc.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vm/compile.h"
#include "vm/opcodes.h"
#include "vm/read.h"
#include "vm/value.h"
#include "vm/vm.h"

typedef struct local {
    const char *name;
    int slot;
    int pending;                        /* an internal define not yet assigned */
    int shadows;                        /* the local of the same name before it, or -1 */
} local;

/* A function's locals by name: for each name seen, the newest local that
 * has it (-1: none in scope now). Open addressing; names are never taken
 * out, so no tombstones. A linear search made 20,000 internal defines in
 * one body take 4.5 s (found by an outside test). */
typedef struct name_slot {
    const char *name;
    int local;
} name_slot;

typedef struct freevar {
    const char *name;
    uint32_t capture;
} freevar;

typedef struct func {
    struct func *outer;
    const char *name;
    const char *self_name;              /* an internal define's own name: the running closure */
    int line;
    local *locals;                      /* malloc: no GC references */
    int nlocals, locals_cap, nslots, maxslots;
    name_slot *names;                   /* malloc: the index of locals by name */
    int names_cap, names_used;
    int nparams;
    freevar *frees;
    int nfree, frees_cap;
    uint32_t *code;                     /* GC atomic */
    int *lines;                         /* GC atomic */
    int ncode, code_cap;
    value *consts;                      /* GC, reachable from this uncollectable struct */
    int nconsts, consts_cap;
    int depth, maxdepth;                /* expression stack depth */
    int line_now;
    struct func *all_next;              /* every func of this compilation, for cleanup */
} func;

typedef struct compiler {
    vm_state *vm;
    const node *at;                     /* the form being compiled, for messages */
    const char *file;
    char *err;
    size_t errlen;
    jmp_buf fail;
    func *all;
} compiler;

__attribute__((format(printf, 3, 4))) _Noreturn static void cerror(compiler *c, const node *at,
                                                                  const char *fmt, ...)
{
    int n = snprintf(c->err, c->errlen, "%s:%d:%d: error: ", c->file, at ? at->line : 0,
                     at ? at->col : 0);
    va_list ap;
    va_start(ap, fmt);
    if (n >= 0 && (size_t)n < c->errlen)
        vsnprintf(c->err + n, c->errlen - (size_t)n, fmt, ap);
    va_end(ap);
    longjmp(c->fail, 1);
}

static void *grow(void *p, int *cap, size_t elem, int atomic)
{
    int ncap = *cap ? *cap * 2 : 16;
    void *q = atomic ? VM_ALLOC_ATOMIC((size_t)ncap * elem) : VM_ALLOC((size_t)ncap * elem);
    if (!q) {
        fprintf(stderr, "crawlvm: out of memory\n");
        exit(70);
    }
    if (p)
        memcpy(q, p, (size_t)*cap * elem);
    *cap = ncap;
    return q;
}

static func *func_new(compiler *c, func *outer, const char *name, int line)
{
    func *f = GC_MALLOC_UNCOLLECTABLE(sizeof *f);
    if (!f) {
        fprintf(stderr, "crawlvm: out of memory\n");
        exit(70);
    }
    memset(f, 0, sizeof *f);
    f->outer = outer;
    f->name = name;
    f->line = line;
    f->all_next = c->all;
    c->all = f;
    return f;
}

static void func_free_all(compiler *c)
{
    while (c->all) {
        func *f = c->all;
        c->all = f->all_next;
        free(f->locals);
        free(f->names);
        free(f->frees);
        GC_FREE(f);
    }
}

static void emit(func *f, uint32_t ins, int stack_effect)
{
    if (f->ncode == f->code_cap) {
        int cap = f->code_cap;
        f->code = grow(f->code, &cap, sizeof *f->code, 1);
        f->lines = grow(f->lines, &f->code_cap, sizeof *f->lines, 1);
    }
    f->lines[f->ncode] = f->line_now;
    f->code[f->ncode++] = ins;
    f->depth += stack_effect;
    if (f->depth > f->maxdepth)
        f->maxdepth = f->depth;
}

static int add_const(compiler *c, func *f, value v, const node *at)
{
    if (f->nconsts == ARG_MAX)
        cerror(c, at, "too many constants in one function");
    if (f->nconsts == f->consts_cap)
        f->consts = grow(f->consts, &f->consts_cap, sizeof *f->consts, 0);
    f->consts[f->nconsts] = v;
    return f->nconsts++;
}

/* ---- names --------------------------------------------------------------------- */

enum { R_LOCAL, R_FREE, R_GLOBAL, R_SELF };

/* name's slot in f's index: its entry, or the empty one where it goes */
static name_slot *name_slot_of(const func *f, const char *name)
{
    size_t mask = (size_t)f->names_cap - 1, i = vm_name_hash(name) & mask;
    while (f->names[i].name && strcmp(f->names[i].name, name) != 0)
        i = (i + 1) & mask;
    return &f->names[i];
}

static local *find_local_entry(const func *f, const char *name)
{
    if (!f->names_cap)
        return NULL;
    const name_slot *e = name_slot_of(f, name);
    return e->name && e->local >= 0 ? &f->locals[e->local] : NULL;
}

/* Make local i the newest of its name (add_local) */
static void index_local(func *f, int i)
{
    if (2 * (f->names_used + 1) > f->names_cap) {
        int cap = f->names_cap ? 2 * f->names_cap : 32;
        name_slot *old = f->names;
        int old_cap = f->names_cap;
        f->names = calloc((size_t)cap, sizeof *f->names);
        if (!f->names) {
            fprintf(stderr, "crawlvm: out of memory\n");
            exit(70);
        }
        f->names_cap = cap;
        for (int k = 0; k < old_cap; k++)
            if (old[k].name)
                *name_slot_of(f, old[k].name) = old[k];
        free(old);
    }
    name_slot *e = name_slot_of(f, f->locals[i].name);
    if (!e->name) {
        e->name = f->locals[i].name;
        e->local = -1;
        f->names_used++;
    }
    f->locals[i].shadows = e->local;
    e->local = i;
}

/* Leave a scope: the locals from keep on go, the ones they shadowed come
 * back, and the slots from keep_slots on are free again. Out of line, as
 * bind_let, to keep compile_let's frame small. */
static __attribute__((noinline)) void drop_locals(func *f, int keep, int keep_slots)
{
    for (int i = f->nlocals - 1; i >= keep; i--)
        name_slot_of(f, f->locals[i].name)->local = f->locals[i].shadows;
    f->nlocals = keep;
    f->nslots = keep_slots;
}

static int find_local(const func *f, const char *name)
{
    const local *l = find_local_entry(f, name);
    return l ? l->slot : -1;
}

/* Resolve name in f: a local slot, a free-variable index, or global. */
static int resolve(compiler *c, func *f, const char *name, int *index)
{
    int slot = find_local(f, name);
    if (slot >= 0) {
        *index = slot;
        return R_LOCAL;
    }
    for (int i = 0; i < f->nfree; i++)
        if (strcmp(f->frees[i].name, name) == 0) {
            *index = i;
            return R_FREE;
        }
    if (f->self_name && strcmp(f->self_name, name) == 0)
        return R_SELF;
    if (!f->outer)
        return R_GLOBAL;
    /* once per enclosing function: thousands of nested lambdas that
     * capture a variable from the outermost one overflowed the C stack
     * here, below compile_expr's own check (found by an outside test) */
    if (vm_stack_low())
        cerror(c, c->at, "expression nested too deeply for the C stack");
    int outer_index;
    int kind = resolve(c, f->outer, name, &outer_index);
    if (kind == R_GLOBAL)
        return R_GLOBAL;
    const local *l = kind == R_LOCAL ? find_local_entry(f->outer, name) : NULL;
    if (l && l->pending)
        cerror(c, c->at, "'%s' is captured before its define has run: closures copy values "
                         "when they are made, so internal functions cannot be mutually "
                         "recursive (define them at top level)", name);
    if (f->nfree == ARG_MAX)             /* (its index is an instruction's argument) */
        cerror(c, c->at, "too many free variables");
    if (f->nfree == f->frees_cap) {
        f->frees_cap = f->frees_cap ? f->frees_cap * 2 : 8;
        f->frees = realloc(f->frees, (size_t)f->frees_cap * sizeof *f->frees);
        if (!f->frees) {
            fprintf(stderr, "crawlvm: out of memory\n");
            exit(70);
        }
    }
    f->frees[f->nfree].name = name;
    f->frees[f->nfree].capture = kind == R_LOCAL  ? (CAPTURE_FROM_LOCAL | (uint32_t)outer_index)
                                 : kind == R_SELF ? CAPTURE_SELF
                                                  : (uint32_t)outer_index;
    *index = f->nfree++;
    return R_FREE;
}

static int add_local(compiler *c, func *f, const char *name, const node *at)
{
    if (f->nlocals == f->locals_cap) {
        f->locals_cap = f->locals_cap ? f->locals_cap * 2 : 16;
        f->locals = realloc(f->locals, (size_t)f->locals_cap * sizeof *f->locals);
        if (!f->locals) {
            fprintf(stderr, "crawlvm: out of memory\n");
            exit(70);
        }
    }
    if (f->nslots == ARG_MAX)
        cerror(c, at, "too many local variables");
    f->locals[f->nlocals].name = name;
    f->locals[f->nlocals].pending = 0;
    f->locals[f->nlocals].slot = f->nslots++;
    index_local(f, f->nlocals++);
    if (f->nslots > f->maxslots)
        f->maxslots = f->nslots;
    return f->nslots - 1;
}

/* ---- expressions ----------------------------------------------------------------- */

static void compile_expr(compiler *c, func *f, const node *n);
static proto *compile_function(compiler *c, func *outer, const char *name, const node *params,
                               const node *form, int body_from, int self);

static const char *sym(const node *n)
{
    return n && n->kind == N_SYM ? n->text : NULL;
}

static int is_form(const node *n, const char *name)
{
    return n->kind == N_LIST && n->nitems > 0 && sym(n->items[0]) &&
           strcmp(n->items[0]->text, name) == 0;
}

static void compile_body(compiler *c, func *f, const node *form, int from)
{
    /* A function body's defines are its locals from the start (pending until
     * each has run), so an earlier function that uses a later one fails at
     * compile time instead of reading a global of that name. */
    if (f->nparams >= 0) {
        for (int i = from; i < form->nitems; i++) {
            const node *d = form->items[i];
            if (!is_form(d, "define") || d->nitems < 3)
                continue;
            const node *target = d->items[1]->kind == N_LIST && d->items[1]->nitems
                                     ? d->items[1]->items[0]
                                     : d->items[1];
            if (sym(target) && !find_local_entry(f, target->text)) {
                add_local(c, f, target->text, d);
                f->locals[f->nlocals - 1].pending = 1;
            }
        }
    }
    if (from >= form->nitems) {
        emit(f, INS(OP_NIL, 0), 1);
        return;
    }
    for (int i = from; i < form->nitems; i++) {
        compile_expr(c, f, form->items[i]);
        if (i + 1 < form->nitems)
            emit(f, INS(OP_POP, 0), -1);
    }
}

static void emit_get(compiler *c, func *f, const char *name)
{
    int index;
    switch (resolve(c, f, name, &index)) {
    case R_LOCAL: emit(f, INS(OP_GETL, index), 1); break;
    case R_FREE: emit(f, INS(OP_GETF, index), 1); break;
    case R_SELF: emit(f, INS(OP_SELF, 0), 1); break;
    default: emit(f, INS(OP_GETG, vm_global_index(c->vm, name)), 1); break;
    }
}

static int emit_jump(func *f, int op)
{
    emit(f, INS(op, 0), op == OP_JMP ? 0 : -1);
    return f->ncode - 1;
}

static void patch(compiler *c, func *f, int at)
{
    int off = f->ncode - (at + 1);
    if (off > ARG_MAX)
        cerror(c, c->at, "function too large: a jump over %d instructions", off);
    f->code[at] = INS(INS_OP(f->code[at]), (uint32_t)off & 0xffffffu);
}

static void compile_if(compiler *c, func *f, const node *n)
{
    if (n->nitems < 3 || n->nitems > 4)
        cerror(c, n, "if takes a condition, a then-branch and an optional else-branch");
    compile_expr(c, f, n->items[1]);
    int to_else = emit_jump(f, OP_JF);
    compile_expr(c, f, n->items[2]);
    int to_end = emit_jump(f, OP_JMP);
    f->depth--;                          /* only one branch's value is on the stack */
    patch(c, f, to_else);
    if (n->nitems == 4)
        compile_expr(c, f, n->items[3]);
    else
        emit(f, INS(OP_NIL, 0), 1);
    patch(c, f, to_end);
}

static void compile_andor(compiler *c, func *f, const node *n, int is_and)
{
    if (n->nitems == 1) {
        emit(f, INS(is_and ? OP_TRUE : OP_FALSE, 0), 1);
        return;
    }
    int jumps[64], nj = 0;
    if (n->nitems - 1 > 64)
        cerror(c, n, "%s with more than 64 operands", is_and ? "and" : "or");
    for (int i = 1; i < n->nitems; i++) {
        compile_expr(c, f, n->items[i]);
        if (i + 1 < n->nitems) {
            emit(f, INS(OP_DUP, 0), 1);
            jumps[nj++] = emit_jump(f, is_and ? OP_JF : OP_JT);
            emit(f, INS(OP_POP, 0), -1);
        }
    }
    for (int i = 0; i < nj; i++)
        patch(c, f, jumps[i]);
}

static void compile_while(compiler *c, func *f, const node *n)
{
    if (n->nitems < 2)
        cerror(c, n, "while takes a condition and a body");
    int top = f->ncode;
    compile_expr(c, f, n->items[1]);
    int to_end = emit_jump(f, OP_JF);
    for (int i = 2; i < n->nitems; i++) {
        compile_expr(c, f, n->items[i]);
        emit(f, INS(OP_POP, 0), -1);
    }
    if (f->ncode + 1 - top > ARG_MAX)
        cerror(c, n, "function too large: a loop over %d instructions", f->ncode + 1 - top);
    emit(f, INS(OP_JMP, (uint32_t)(top - (f->ncode + 1)) & 0xffffffu), 0);
    patch(c, f, to_end);
    emit(f, INS(OP_NIL, 0), 1);
}

/* A let's names bound to the values its inits left on the stack. Out of
 * line: nested lets recurse through compile_let, whose frame, with this
 * loop's registers spilled in it, made 7,000 levels no longer fit in 2 MiB
 * of stack (clang). add_local gives consecutive slots: no array on the C
 * stack. */
static __attribute__((noinline)) void bind_let(compiler *c, func *f, const node *binds)
{
    int first = f->nslots;
    for (int i = 0; i < binds->nitems; i++)
        add_local(c, f, binds->items[i]->items[0]->text, binds->items[i]);
    for (int i = binds->nitems - 1; i >= 0; i--)
        emit(f, INS(OP_SETL, (uint32_t)(first + i)), -1);
}

static void compile_let(compiler *c, func *f, const node *n)
{
    if (n->nitems < 2 || n->items[1]->kind != N_LIST)
        cerror(c, n, "let takes a list of bindings, then a body");
    const node *binds = n->items[1];
    int saved_nlocals = f->nlocals, saved_nslots = f->nslots;
    /* inits see the outer scope: evaluate all, then bind (an init may itself
     * add locals, so each binding's slot is whatever add_local gives) */
    for (int i = 0; i < binds->nitems; i++) {
        const node *b = binds->items[i];
        if (b->kind != N_LIST || b->nitems != 2 || !sym(b->items[0]))
            cerror(c, b, "a let binding is (name value)");
        compile_expr(c, f, b->items[1]);
    }
    if (binds->nitems > 256)
        cerror(c, n, "more than 256 let bindings");
    bind_let(c, f, binds);
    compile_body(c, f, n, 2);
    drop_locals(f, saved_nlocals, saved_nslots);
}

static int binary_op(const char *name);

/* The operators compiled inline must keep their meaning everywhere. */
static void refuse_operator(compiler *c, const node *at, const char *name)
{
    if (binary_op(name) >= 0 || strcmp(name, "not") == 0)
        cerror(c, at, "cannot redefine '%s': calls to it are compiled inline", name);
}

static void compile_set(compiler *c, func *f, const node *n)
{
    if (n->nitems != 3 || !sym(n->items[1]))
        cerror(c, n, "set! takes a variable and a value");
    const char *name = n->items[1]->text;
    compile_expr(c, f, n->items[2]);
    f->line_now = n->line;               /* errors name the set!, not its value */
    c->at = n;
    int index;
    switch (resolve(c, f, name, &index)) {
    case R_LOCAL: emit(f, INS(OP_SETL, index), -1); break;
    case R_FREE:
    case R_SELF:
        cerror(c, n->items[1], "cannot set! '%s': it is captured from an enclosing function", name);
    default:
        refuse_operator(c, n->items[1], name);
        emit(f, INS(OP_SETG, vm_global_index(c->vm, name)), -1);
        break;
    }
    emit(f, INS(OP_NIL, 0), 1);
}

static void compile_define(compiler *c, func *f, const node *n)
{
    if (n->nitems < 3)
        cerror(c, n, "define takes a name and a value, or (name params...) and a body");
    const char *name;
    int fn_form = n->items[1]->kind == N_LIST;
    if (fn_form) {
        if (n->items[1]->nitems == 0 || !sym(n->items[1]->items[0]))
            cerror(c, n->items[1], "(define (name params...) body...) needs a name");
        name = n->items[1]->items[0]->text;
    } else {
        if (!sym(n->items[1]) || n->nitems != 3)
            cerror(c, n, "define takes a name and one value");
        name = n->items[1]->text;
    }
    int slot = -1;
    /* inside a function, define makes a local, visible in its own value */
    int toplevel = f->outer == NULL && f->nparams < 0;
    if (!toplevel)
        slot = find_local(f, name) >= 0 ? find_local(f, name) : add_local(c, f, name, n);
    if (fn_form) {
        proto *p = compile_function(c, f, name, n->items[1], n, 2, !toplevel);
        emit(f, INS(OP_CLOSURE, add_const(c, f, (value)p, n)), 1);
    } else if (n->items[2]->kind == N_LIST && is_form(n->items[2], "lambda")) {
        const node *lam = n->items[2];
        if (lam->nitems < 2 || lam->items[1]->kind != N_LIST)
            cerror(c, lam, "lambda takes a parameter list, then a body");
        proto *p = compile_function(c, f, name, lam->items[1], lam, 2, !toplevel);
        emit(f, INS(OP_CLOSURE, add_const(c, f, (value)p, lam)), 1);
    } else {
        compile_expr(c, f, n->items[2]);
    }
    f->line_now = n->line;
    if (toplevel) {
        refuse_operator(c, n->items[1], name);
        emit(f, INS(OP_DEFG, vm_global_index(c->vm, name)), -1);
    } else {
        emit(f, INS(OP_SETL, slot), -1);
        find_local_entry(f, name)->pending = 0;
    }
    emit(f, INS(OP_NIL, 0), 1);
}

/* Two-operand arithmetic and comparison compile to one instruction when the
 * operator name is not shadowed by a local. */
static int binary_op(const char *name)
{
    static const struct { const char *name; int op; } ops[] = {
        {"+", OP_ADD}, {"-", OP_SUB}, {"*", OP_MUL}, {"<", OP_LT},
        {"<=", OP_LE}, {">", OP_GT}, {">=", OP_GE}, {"=", OP_NUMEQ},
    };
    for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++)
        if (strcmp(name, ops[i].name) == 0)
            return ops[i].op;
    return -1;
}

static void compile_call(compiler *c, func *f, const node *n)
{
    const char *head = sym(n->items[0]);
    int index;
    if (head && n->nitems == 3 && binary_op(head) >= 0 &&
        resolve(c, f, head, &index) == R_GLOBAL) {
        compile_expr(c, f, n->items[1]);
        compile_expr(c, f, n->items[2]);
        f->line_now = n->line;
        emit(f, INS(binary_op(head), 0), -1);
        return;
    }
    if (head && n->nitems == 2 && strcmp(head, "not") == 0 &&
        resolve(c, f, head, &index) == R_GLOBAL) {
        compile_expr(c, f, n->items[1]);
        emit(f, INS(OP_NOT, 0), 0);
        return;
    }
    if (n->nitems - 1 > 255)
        cerror(c, n, "more than 255 arguments in one call");
    for (int i = 0; i < n->nitems; i++)
        compile_expr(c, f, n->items[i]);
    f->line_now = n->line;               /* the call site */
    emit(f, INS(OP_CALL, n->nitems - 1), -(n->nitems - 1));
}

static void compile_expr(compiler *c, func *f, const node *n)
{
    f->line_now = n->line;
    c->at = n;
    switch (n->kind) {
    case N_INT:
        if (n->ival >= -(1 << 23) && n->ival < (1 << 23))
            emit(f, INS(OP_INT, (uint32_t)n->ival & 0xffffffu), 1);
        else
            emit(f, INS(OP_CONST, add_const(c, f, FIX(n->ival), n)), 1);
        return;
    case N_STR:
        emit(f, INS(OP_CONST, add_const(c, f, vm_make_string(n->text, (size_t)n->ival), n)), 1);
        return;
    case N_TRUE: emit(f, INS(OP_TRUE, 0), 1); return;
    case N_FALSE: emit(f, INS(OP_FALSE, 0), 1); return;
    case N_NIL: emit(f, INS(OP_NIL, 0), 1); return;
    case N_SYM: emit_get(c, f, n->text); return;
    case N_LIST: break;
    }
    if (n->nitems == 0)
        cerror(c, n, "empty application ()");
    if (vm_stack_low())
        cerror(c, n, "expression nested too deeply for the C stack");
    const char *head = sym(n->items[0]);
    int index;
    int special = head && resolve(c, f, head, &index) == R_GLOBAL;
    if (special && strcmp(head, "if") == 0)
        compile_if(c, f, n);
    else if (special && strcmp(head, "define") == 0)
        compile_define(c, f, n);
    else if (special && strcmp(head, "lambda") == 0) {
        if (n->nitems < 2 || n->items[1]->kind != N_LIST)
            cerror(c, n, "lambda takes a parameter list, then a body");
        proto *p = compile_function(c, f, "lambda", n->items[1], n, 2, 0);
        emit(f, INS(OP_CLOSURE, add_const(c, f, (value)p, n)), 1);
    } else if (special && strcmp(head, "let") == 0)
        compile_let(c, f, n);
    else if (special && strcmp(head, "begin") == 0)
        compile_body(c, f, n, 1);
    else if (special && strcmp(head, "set!") == 0)
        compile_set(c, f, n);
    else if (special && strcmp(head, "while") == 0)
        compile_while(c, f, n);
    else if (special && strcmp(head, "and") == 0)
        compile_andor(c, f, n, 1);
    else if (special && strcmp(head, "or") == 0)
        compile_andor(c, f, n, 0);
    else if (special && (strcmp(head, "quote") == 0 || strcmp(head, "define-syntax") == 0))
        cerror(c, n, "'%s' is not supported", head);
    else
        compile_call(c, f, n);
}

static proto *finish(compiler *c, func *f, const node *at)
{
    emit(f, INS(OP_RET, 0), -1);
    /* Uncollectable: stored stacks (the sanitizer's allocation and free
     * stacks) name protos long after their closures are gone. */
    proto *p = GC_MALLOC_UNCOLLECTABLE(sizeof *p);
    if (!p) {
        fprintf(stderr, "crawlvm: out of memory\n");
        exit(70);
    }
    p->h.type = T_PROTO;
    p->name = GC_STRDUP(f->name);
    p->file = GC_STRDUP(c->file);
    p->line = f->line;
    p->nparams = f->nparams < 0 ? 0 : f->nparams;
    p->nlocals = f->maxslots;
    p->nfree = f->nfree;
    p->code = f->code;
    p->lines = f->lines;
    p->ncode = f->ncode;
    p->consts = f->consts;
    p->nconsts = f->nconsts;
    p->maxstack = f->maxslots + f->maxdepth + 1;
    p->captures = VM_ALLOC_ATOMIC((size_t)(f->nfree ? f->nfree : 1) * sizeof(uint32_t));
    if (!p->name || !p->file || !p->captures)
        cerror(c, at, "out of memory");
    for (int i = 0; i < f->nfree; i++)
        p->captures[i] = f->frees[i].capture;
    return p;
}

static proto *compile_function(compiler *c, func *outer, const char *name, const node *params,
                               const node *form, int body_from, int self)
{
    func *f = func_new(c, outer, name, form->line);
    f->self_name = self ? name : NULL;  /* an internal define can call itself */
    int from = params == form->items[1] && is_form(form, "define") ? 1 : 0;
    /* (define (name a b) ...) lists the name first; (lambda (a b) ...) does not */
    for (int i = from; i < params->nitems; i++) {
        if (!sym(params->items[i]))
            cerror(c, params->items[i], "parameters must be names");
        add_local(c, f, params->items[i]->text, params->items[i]);
    }
    f->nparams = params->nitems - from;
    f->line_now = form->line;
    compile_body(c, f, form, body_from);
    return finish(c, f, form);
}

proto **vm_compile(vm_state *vm, node *forms, const char *file, char *err, size_t errlen)
{
    compiler c = {.vm = vm, .file = file, .err = err, .errlen = errlen};
    proto **out = VM_ALLOC((size_t)(forms->nitems + 1) * sizeof *out);
    if (!out) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    if (setjmp(c.fail)) {
        func_free_all(&c);
        return NULL;
    }
    for (int i = 0; i < forms->nitems; i++) {
        func *top = func_new(&c, NULL, "<toplevel>", forms->items[i]->line);
        top->nparams = -1;               /* marks the top level: define makes globals */
        top->line_now = forms->items[i]->line;
        compile_expr(&c, top, forms->items[i]);
        out[i] = finish(&c, top, forms->items[i]);
    }
    func_free_all(&c);
    return out;
}
