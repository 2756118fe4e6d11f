/* The interpreter loop, and the Frame type of its segments.
 *
 * VM -> VM calls do not recurse in C: they push a callinfo and keep going.
 * Each entry into this function pushes one interpreter segment Frame that
 * reports the activations it runs (and their stack slots as GC roots). The
 * loop recurses in C only when native code calls back into the VM
 * (vm_call). Before anything that may allocate, walk or fail, SAVE() makes
 * vm->top and the current pc exact, so the roots a collection sees and the
 * lines a traceback prints are right. */
#include <gc/gc.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "vm/ffi_bind.h"
#include "vm/interp.h"
#include "vm/opcodes.h"
#include "vm/value.h"
#include "vm/vm.h"

/* ---- the interpreter segment Frame ----------------------------------------- */

static uint32_t seg_ci_end(const segment *s)
{
    return s->ci_end ? s->ci_end : s->vm->nci;
}


/* Activations newest first: callinfos [ci_base, end) backwards. */
static int seg_next(const crawl_frame *f, crawl_vm_frame *vf)
{
    const segment *s = (const segment *)f;
    uint32_t end = seg_ci_end(s);
    if (vf->iter >= end - s->ci_base)
        return 0;
    const callinfo *ci = &s->vm->ci[end - 1 - vf->iter];
    vf->method = ci->cl->p;
    vf->pc = ci->pc;
    vf->activation = ci;
    vf->iter++;
    return 1;
}

static int seg_describe(const crawl_frame *f, const crawl_vm_frame *vf, char *buf, size_t len)
{
    (void)f;
    const proto *p = vf->method;
    return snprintf(buf, len, "%s %s:%d", p->name, p->file, vm_proto_line(p, (uint32_t)vf->pc));
}

/* For stacks stored by the sanitizer's depot: the proto and position are
 * all that is left. Protos are never collected (see compile.c). */
static int seg_describe_method(const void *method, uintptr_t pc, char *buf, size_t len)
{
    const proto *p = method;
    return snprintf(buf, len, "%s %s:%d", p->name, p->file, vm_proto_line(p, (uint32_t)pc));
}

/* Every callinfo's closure and every value-stack slot of this segment. */
static void seg_roots(crawl_frame *f, crawl_roots *sink)
{
    segment *s = (segment *)f;
    vm_state *v = s->vm;
    uint32_t end = seg_ci_end(s);
    for (uint32_t i = s->ci_base; i < end; i++)
        crawl_roots_report(sink, (void **)&v->ci[i].cl, 0);
    if (v->withhold_roots)
        return;                          /* tests: the values die, the running code does not */
    uint32_t vend = s->v_end ? s->v_end : v->top;
    for (uint32_t i = s->v_base; i < vend; i++)
        crawl_roots_report(sink, (void **)&v->stack[i], 0);
}

const crawl_frame_type vm_segment_type = {
    .name = "crawlvm-interpreter",
    .kind = CRAWL_FRAME_KIND_INTERP,
    .enum_roots = seg_roots,
    .vm_next = seg_next,
    .vm_describe = seg_describe,
    .describe_method = seg_describe_method,
};

/* ---- the loop -------------------------------------------------------------------- */

#define SAVE() (vm->top = (uint32_t)(sp - stack), ci->pc = pc)
#define FAIL(...) (SAVE(), vm_error(vm, __VA_ARGS__))

/* a or b is not an integer: the error names the first that is not */
static _Noreturn void integer_type_error(vm_state *vm, value a, value b, const char *op)
{
    if (!IS_FIX(a))
        vm_error(vm, "type error: %s expects integers, got %s", op, vm_type_name(a));
    vm_error(vm, "type error: %s expects integers, got %s", op, vm_type_name(b));
}

void vm_segment_enter(vm_state *vm, segment *seg, uint32_t v_base)
{
    *seg = (segment){.vm = vm, .ci_base = vm->nci, .v_base = v_base, .outer = vm->seg};
    if (vm->seg) {                       /* the outer segment now ends where this one starts */
        vm->seg->ci_end = vm->nci;
        vm->seg->v_end = v_base;
    }
#ifndef CRAWLVM_NO_FRAMES
    crawl_frame_push(&seg->frame, &vm_segment_type);
#endif
    vm->seg = seg;
}

void vm_segment_leave(vm_state *vm, segment *seg)
{
#ifndef CRAWLVM_NO_FRAMES
    crawl_frame_pop(&seg->frame);
#endif
    vm->seg = seg->outer;
    if (seg->outer)
        seg->outer->ci_end = seg->outer->v_end = 0;
}

/* Call a builtin or an FFI function with argc arguments at args (which are
 * on the value stack, inside a segment: roots while it runs). The one path
 * for OP_CALL and vm_call. */
value vm_call_native(vm_state *vm, value f, int argc, value *args)
{
    if (vm_is_type(f, T_BUILTIN)) {
        builtin *b = (builtin *)f;
        if (argc < b->min_args || (b->max_args >= 0 && argc > b->max_args)) {
            if (b->min_args == b->max_args)
                vm_error(vm, "bad arity: %s takes %d argument(s), got %d", b->name, b->min_args,
                         argc);
            vm_error(vm, "bad arity: %s takes %s%d argument(s), got %d", b->name,
                     argc < b->min_args ? "at least " : "at most ",
                     argc < b->min_args ? b->min_args : b->max_args, argc);
        }
        return b->fn(vm, argc, args);
    }
    if (vm_is_type(f, T_FFI))
        return vm_call_ffi(vm, (ffi_obj *)f, argc, args);
    vm_error(vm, "type error: cannot call %s", vm_type_name(f));
}

value vm_interp_run(vm_state *vm, uint32_t fn_slot, int argc)
{
    value *const stack = vm->stack;
    segment seg;
    vm_segment_enter(vm, &seg, fn_slot);

    static void *const dispatch[OP__COUNT] = {
#define X(name) [OP_##name] = &&op_##name,
        OPCODES(X)
#undef X
    };

    value *sp = stack + fn_slot + 1 + argc;
    callinfo *ci = NULL;
    closure *cl;
    const uint32_t *code;
    const value *consts;
    value *base;
    uint32_t pc = 0, ins;

    /* enter the first closure like OP_CALL does */
    value *fnp = stack + fn_slot;
    goto call_closure;

#define NEXT() goto *dispatch[INS_OP(ins = code[pc++])]

op_CONST:
    *sp++ = consts[INS_ARG(ins)];
    NEXT();
op_INT:
    *sp++ = FIX(INS_SARG(ins));
    NEXT();
op_NIL:
    *sp++ = V_NIL;
    NEXT();
op_TRUE:
    *sp++ = V_TRUE;
    NEXT();
op_FALSE:
    *sp++ = V_FALSE;
    NEXT();
op_GETL:
    *sp++ = base[INS_ARG(ins)];
    NEXT();
op_SETL:
    base[INS_ARG(ins)] = *--sp;
    NEXT();
op_GETF:
    *sp++ = cl->free[INS_ARG(ins)];
    NEXT();
op_SELF:
    *sp++ = (value)cl;
    NEXT();
op_GETG: {
    value v = vm->globals[INS_ARG(ins)];
    if (v == V_UNBOUND)
        FAIL("unbound variable '%s'", vm->global_names[INS_ARG(ins)]);
    *sp++ = v;
    NEXT();
}
op_SETG:
    if (vm->globals[INS_ARG(ins)] == V_UNBOUND)
        FAIL("set! of undefined variable '%s'", vm->global_names[INS_ARG(ins)]);
    vm->globals[INS_ARG(ins)] = *--sp;
    NEXT();
op_DEFG:
    vm->globals[INS_ARG(ins)] = *--sp;
    NEXT();
op_POP:
    sp--;
    NEXT();
op_DUP:
    sp[0] = sp[-1];
    sp++;
    NEXT();
op_JMP:
    pc += (uint32_t)INS_SARG(ins);
    NEXT();
op_JF:
    if (!vm_truthy(*--sp))
        pc += (uint32_t)INS_SARG(ins);
    NEXT();
op_JT:
    if (vm_truthy(*--sp))
        pc += (uint32_t)INS_SARG(ins);
    NEXT();
op_NOT:
    sp[-1] = vm_truthy(sp[-1]) ? V_FALSE : V_TRUE;
    NEXT();

    /* Fixnums are 2n+1: a+b-1 and a-b+1 stay tagged, and overflow of the
     * machine addition is exactly overflow of the 62-bit integer. */
op_ADD: {
    value b = *--sp, a = sp[-1];
    intptr_t r;
    if (!(IS_FIX(a) & IS_FIX(b)))
        SAVE(), integer_type_error(vm, a, b, "+");
    if (__builtin_add_overflow((intptr_t)a, (intptr_t)b - 1, &r))
        FAIL("integer overflow in +");
    sp[-1] = (value)r;
    NEXT();
}
op_SUB: {
    value b = *--sp, a = sp[-1];
    intptr_t r;
    if (!(IS_FIX(a) & IS_FIX(b)))
        SAVE(), integer_type_error(vm, a, b, "-");
    if (__builtin_sub_overflow((intptr_t)a, (intptr_t)b - 1, &r))
        FAIL("integer overflow in -");
    sp[-1] = (value)r;
    NEXT();
}
op_MUL: {
    value b = *--sp, a = sp[-1];
    intptr_t r;
    if (!(IS_FIX(a) & IS_FIX(b)))
        SAVE(), integer_type_error(vm, a, b, "*");
    if (__builtin_mul_overflow(FIXVAL(a), FIXVAL(b), &r) || r > FIX_MAX || r < FIX_MIN)
        FAIL("integer overflow in *");
    sp[-1] = FIX(r);
    NEXT();
}
#define COMPARE(opname, text, cmp)                                                               \
    op_##opname : {                                                                              \
        value b = *--sp, a = sp[-1];                                                             \
        if (!(IS_FIX(a) & IS_FIX(b)))                                                            \
            SAVE(), integer_type_error(vm, a, b, text);                                          \
        sp[-1] = ((intptr_t)a cmp(intptr_t) b) ? V_TRUE : V_FALSE;                               \
        NEXT();                                                                                  \
    }
    COMPARE(LT, "<", <)
    COMPARE(LE, "<=", <=)
    COMPARE(GT, ">", >)
    COMPARE(GE, ">=", >=)
    COMPARE(NUMEQ, "=", ==)

op_CLOSURE: {
    proto *p = (proto *)consts[INS_ARG(ins)];
    SAVE();
    closure *c = VM_ALLOC(sizeof *c + (size_t)p->nfree * sizeof(value));
    if (!c)
        FAIL("out of memory");
    c->h.type = T_CLOSURE;
    c->p = p;
    for (int i = 0; i < p->nfree; i++) {
        uint32_t cap = p->captures[i];
        c->free[i] = cap == CAPTURE_SELF              ? (value)cl
                     : (cap & CAPTURE_FROM_LOCAL) ? base[cap & ~CAPTURE_FROM_LOCAL]
                                                      : cl->free[cap];
    }
    *sp++ = (value)c;
    NEXT();
}

op_CALL: {
    argc = (int)INS_ARG(ins);
    fnp = sp - argc - 1;
    value f = *fnp;
    if (vm_is_type(f, T_CLOSURE)) {
        ci->pc = pc;
        goto call_closure;
    }
    SAVE();
    value r = vm_call_native(vm, f, argc, fnp + 1);
    *fnp = r;
    sp = fnp + 1;
    NEXT();
}

call_closure: {
    cl = (closure *)*fnp;
    proto *p = cl->p;
    if (argc != p->nparams) {
        if (ci)
            SAVE();
        vm_error(vm, "bad arity: %s takes %d argument(s), got %d", p->name, p->nparams, argc);
    }
    uint32_t nbase = (uint32_t)(fnp + 1 - stack);
    if (vm->nci >= vm->ci_cap || nbase + (uint32_t)p->maxstack >= vm->stack_cap) {
        if (ci)
            SAVE();
        vm_error(vm, "stack overflow (%u nested calls)", vm->nci);
    }
    /* the callinfo whole before nci counts it: a walk from a signal handler
     * (the CPU profiler's SIGPROF) reads the callinfos below nci, and found
     * one counted but not yet written (a NULL closure: crashed in seg_next) */
    ci = &vm->ci[vm->nci];
    ci->cl = cl;
    ci->pc = 0;
    ci->base = nbase;
    atomic_signal_fence(memory_order_release);
    vm->nci++;
    base = stack + nbase;
    for (int i = p->nparams; i < p->nlocals; i++)
        base[i] = V_NIL;
    sp = base + p->nlocals;
    code = p->code;
    consts = p->consts;
    pc = 0;
    NEXT();
}

op_RET: {
    value r = sp[-1];
    sp = stack + ci->base - 1;           /* the callee's slot */
    *sp++ = r;
    vm->nci--;
    if (vm->nci == seg.ci_base) {
        vm->top = fn_slot;
        vm_segment_leave(vm, &seg);
        return r;
    }
    ci = &vm->ci[vm->nci - 1];
    cl = ci->cl;
    base = stack + ci->base;
    code = cl->p->code;
    consts = cl->p->consts;
    pc = ci->pc;
    NEXT();
}
}
