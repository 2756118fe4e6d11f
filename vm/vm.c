/* The VM object: stacks, globals, evaluation and its errors, calls from C. */
#include <gc/gc.h>
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "vm/compile.h"
#include "vm/interp.h"
#include "vm/opcodes.h"
#include "vm/read.h"
#include "vm/trace.h"
#include "vm/vm.h"

#define STACK_SLOTS (4u << 20)           /* 32 MiB reserved, touched as used */
#define CALL_DEPTH (1u << 20)

/* mmap'ed: Boehm neither scans nor frees it. */
static void *reserve(size_t bytes)
{
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                   -1, 0);
    if (p == MAP_FAILED) {
        perror("crawlvm: mmap");
        exit(70);
    }
    return p;
}

static void *plain_alloc(size_t n) { return malloc(n); }
static void plain_release(void *p) { free(p); }

static int write_errno;                 /* the first write error (vm_write_error) */

int vm_write_all(int fd, const char *s, size_t n)
{
    while (n) {
        ssize_t w = write(fd, s, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            int e = w < 0 ? errno : EIO;
            __atomic_compare_exchange_n(&write_errno, &(int){0}, e, 0, __ATOMIC_RELAXED,
                                        __ATOMIC_RELAXED);
            return e;
        }
        s += w;
        n -= (size_t)w;
    }
    return 0;
}

int vm_write_error(void) { return __atomic_load_n(&write_errno, __ATOMIC_RELAXED); }

#ifndef CRAWLVM_NO_FRAMES
/* What crawl-boehm's root verification must accept in a reported slot:
 * fixnums and the small constants (nil, #t, #f, unbound) are not pointers. */
static int is_immediate(uintptr_t v)
{
    return !IS_OBJ(v);
}
#endif

/* The VM struct is plain malloc memory: its only GC reference, the globals
 * array, is itself an uncollectable (scanned) root. */
vm_state *vm_new(void)
{
    vm_state *v = calloc(1, sizeof *v);
    vm_handle *h = malloc(sizeof *h);
    if (!v || !h) {
        free(v);
        free(h);
        return NULL;
    }
    h->vm = v;
    v->handle = h;
    v->stack_cap = STACK_SLOTS;
    v->stack = reserve(STACK_SLOTS * sizeof(value));
    v->ci_cap = CALL_DEPTH;
    v->ci = reserve(CALL_DEPTH * sizeof(callinfo));
    v->alloc = (vm_allocator){plain_alloc, plain_release, NULL, NULL, NULL};
    v->out_fd = STDOUT_FILENO;
    __atomic_store_n(&h->owner, pthread_self(), __ATOMIC_RELAXED);
#ifndef CRAWLVM_NO_FRAMES
    crawl_gc_set_immediate_fn(is_immediate);
#endif
    return v;
}

void vm_free(vm_state *v)
{
    if (!v)
        return;
    v->handle->vm = NULL;                /* callbacks still out there refuse to run */
    munmap(v->stack, STACK_SLOTS * sizeof(value));
    munmap(v->ci, CALL_DEPTH * sizeof(callinfo));
    for (int i = 0; i < v->nglobals; i++)
        free((void *)v->global_names[i]);
    free(v->global_names);
    free(v->global_slots);
    GC_FREE(v->globals);
    free(v);
}

/* Globals by name through an open-addressed hash of their indices (a
 * linear search made 100,000 defines take 22 s): the hash slot of name,
 * its global's or the empty one where it goes. */
static size_t global_slot(const vm_state *v, const char *name)
{
    size_t mask = 2 * (size_t)v->globals_cap - 1;
    size_t i = vm_name_hash(name) & mask;
    while (v->global_slots[i] && strcmp(v->global_names[v->global_slots[i] - 1], name) != 0)
        i = (i + 1) & mask;
    return i;
}

int vm_global_index(vm_state *v, const char *name)
{
    if (v->globals_cap) {
        int at = v->global_slots[global_slot(v, name)];
        if (at)
            return at - 1;
    }
    if (v->nglobals == ARG_MAX) {
        /* (an instruction's argument holds the index: past it, names
         * aliased globals 0, 1... silently) */
        fprintf(stderr, "crawlvm: too many global variables (%d)\n", ARG_MAX);
        exit(70);
    }
    if (v->nglobals == v->globals_cap) {
        if (v->globals_cap > INT_MAX / 4) {
            fprintf(stderr, "crawlvm: too many global variables\n");
            exit(70);
        }
        int cap = v->globals_cap ? v->globals_cap * 2 : 64;
        value *g = GC_MALLOC_UNCOLLECTABLE((size_t)cap * sizeof *g);
        const char **names = realloc(v->global_names, (size_t)cap * sizeof *names);
        int *slots = calloc(2 * (size_t)cap, sizeof *slots);
        if (!g || !names || !slots) {
            fprintf(stderr, "crawlvm: out of memory\n");
            exit(70);
        }
        if (v->globals)
            memcpy(g, v->globals, (size_t)v->nglobals * sizeof *g);
        GC_FREE(v->globals);
        v->globals = g;
        v->global_names = names;
        v->globals_cap = cap;
        free(v->global_slots);
        v->global_slots = slots;
        for (int i = 0; i < v->nglobals; i++)
            v->global_slots[global_slot(v, v->global_names[i])] = i + 1;
    }
    char *copy = strdup(name);
    if (!copy) {
        fprintf(stderr, "crawlvm: out of memory\n");
        exit(70);
    }
    v->global_names[v->nglobals] = copy;
    v->global_slots[global_slot(v, copy)] = v->nglobals + 1;
    v->globals[v->nglobals] = V_UNBOUND;
    return v->nglobals++;
}

void vm_set_global(vm_state *v, const char *name, value val)
{
    int i = vm_global_index(v, name);    /* may move v->globals */
    v->globals[i] = val;
}

value vm_get_global(vm_state *v, const char *name)
{
    int at = v->globals_cap ? v->global_slots[global_slot(v, name)] : 0;
    return at ? v->globals[at - 1] : V_UNBOUND;
}

value vm_call(vm_state *v, value fn, int argc, const value *argv)
{
    if (v->top + (uint32_t)argc + 1 >= v->stack_cap)
        vm_error(v, "stack overflow");
    uint32_t slot = v->top;
    v->stack[slot] = fn;
    for (int i = 0; i < argc; i++)
        v->stack[slot + 1 + (uint32_t)i] = argv[i];
    v->top = slot + 1 + (uint32_t)argc;
    if (vm_is_type(fn, T_CLOSURE))
        return vm_interp_run(v, slot, argc);
    /* a builtin or native function: its arguments must be roots while it
     * runs (it may allocate), so it too runs inside a segment */
    segment seg;
    vm_segment_enter(v, &seg, slot);
    value r = vm_call_native(v, fn, argc, v->stack + slot + 1);
    vm_segment_leave(v, &seg);
    v->top = slot;
    return r;
}

/* Run each top-level form. Errors longjmp back here: the VM stacks and the
 * Frame chain are cut back to what they were. */
int vm_eval(vm_state *v, const char *source, const char *file, value *result)
{
    __atomic_store_n(&v->handle->owner, pthread_self(), __ATOMIC_RELAXED);
    char err[512];
    node *forms = vm_read(source, file, err, sizeof err);
    if (!forms) {
        snprintf(v->error, sizeof v->error, "%s", err);
        fprintf(stderr, "%s\n", err);
        return -1;
    }
    proto **protos = vm_compile(v, forms, file, err, sizeof err);
    vm_free_nodes(forms);
    if (!protos) {
        snprintf(v->error, sizeof v->error, "%s", err);
        fprintf(stderr, "%s\n", err);
        return -1;
    }
    jmp_buf jb, *saved_jb = v->on_error;
    crawl_frame *saved_frame = v->error_frame_top;
    uint32_t saved_top = v->error_top, saved_nci = v->error_nci;
    segment *saved_seg = v->error_seg;
    int saved_in_c = v->error_in_c;
    v->on_error = &jb;
    v->error_frame_top = crawl_frame_top();
    v->error_top = v->top;
    v->error_nci = v->nci;
    v->error_seg = v->seg;
    v->error_in_c = v->in_c;
    int rc = 0;
    value r = V_NIL;
    if (setjmp(jb) == 0) {
        for (int i = 0; protos[i]; i++) {
            /* volatile: kept in this C frame, which Boehm scans, while it
             * runs (its callinfo, in mmap'ed memory, is a root only through
             * crawl-boehm) */
            closure *volatile c = VM_ALLOC(sizeof *c);
            if (!c)
                vm_error(v, "out of memory");
            c->h.type = T_CLOSURE;
            c->p = protos[i];
            r = vm_call(v, (value)c, 0, NULL);
        }
    } else {
        rc = -1;
    }
    v->on_error = saved_jb;
    v->error_frame_top = saved_frame;
    v->error_top = saved_top;
    v->error_nci = saved_nci;
    v->error_seg = saved_seg;
    v->error_in_c = saved_in_c;
    if (result)
        *result = rc ? V_NIL : r;
    return rc;
}

/* The other half of vm_eval: report, then cut the Frame chain and the VM
 * stacks back to what vm_eval saw. */
_Noreturn void vm_error(vm_state *v, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(v->error, sizeof v->error, fmt, ap);
    va_end(ap);
    vm_print_traceback(v, STDERR_FILENO, "Traceback (most recent call first):");
    dprintf(STDERR_FILENO, "error: %s\n", v->error);
    if (!v->on_error)
        exit(1);
    crawl_frame_unwind_to(v->error_frame_top);
    v->top = v->error_top;
    v->nci = v->error_nci;
    v->seg = v->error_seg;
    v->in_c = v->error_in_c;
    if (v->seg)
        v->seg->ci_end = v->seg->v_end = 0;
    longjmp(*v->on_error, 1);
}

#ifdef CRAWLVM_NO_FRAMES
/* bench/vm's comparison build, without crawl's bookkeeping: the stacks are
 * pushed to Boehm directly, as a VM that does not use crawl would do. */
#include <gc/gc_mark.h>
static vm_state *direct_vm;
static GC_push_other_roots_proc direct_previous;

static void GC_CALLBACK push_vm_stacks(void)
{
    if (direct_previous)
        direct_previous();
    if (direct_vm->top)
        GC_push_all_eager(direct_vm->stack, direct_vm->stack + direct_vm->top);
    if (direct_vm->nci)
        GC_push_all_eager(direct_vm->ci, direct_vm->ci + direct_vm->nci);
}

void vm_push_roots_directly(vm_state *v)
{
    direct_vm = v;
    direct_previous = GC_get_push_other_roots();
    GC_set_push_other_roots(push_vm_stacks);
}
#endif
