/* The mixed walk: order, modes, signal contexts, resumption, corruption. */
#define _GNU_SOURCE
#include "../support.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <ucontext.h>

#define FAST CRAWL_WALK_FAST
static const unsigned modes[2] = {0, FAST};

static trace T;                                   /* one walk's record */

static void reset(void)
{
    memset(&T, 0, sizeof T);
}

NOINLINE static void walker(unsigned flags)
{
    T.st = crawl_walk(t_record, &T, flags);
    __asm__ volatile("" ::: "memory");
}

static int native_index(const trace *t, const char *name)
{
    for (unsigned i = 0; i < t->n; i++)
        if (t->r[i].kind == CRAWL_CF_NATIVE && strcmp(t->r[i].name, name) == 0)
            return (int)i;
    return -1;
}

/* ---- whose frames ------------------------------------------------------------ */

static crawl_action check_thread(const crawl_cf *cf, void *ctx)
{
    int *bad = ctx;
    *bad += (int)crawl_cf_thread(cf) != crawl_thread_number();
    return CRAWL_CONTINUE;
}

static void test_frames_name_their_thread(void **state)
{
    (void)state;
    label_frame f = {.label = "mine"};
    crawl_frame_push(&f.frame, &t_label_type);
    int bad = 0;
    assert_true(crawl_thread_number() >= 0);
    assert_int_equal(crawl_walk(check_thread, &bad, 0), CRAWL_WALK_DONE);
    assert_int_equal(crawl_walk(check_thread, &bad, CRAWL_WALK_FAST), CRAWL_WALK_DONE);
    crawl_frame_pop(&f.frame);
    assert_int_equal(bad, 0);
}

/* crawl_is_code: module code and registered JIT ranges are code; the stack,
 * the heap and NULL are not; an unattached thread gets -ENOENT. */
static void *is_code_unattached(void *unused)
{
    (void)unused;
    return (void *)(intptr_t)crawl_is_code((uintptr_t)&test_frames_name_their_thread);
}

static void test_is_code(void **state)
{
    (void)state;
    int local;
    void *heap = malloc(16);
    assert_int_equal(crawl_is_code((uintptr_t)&test_frames_name_their_thread), 1);
    assert_int_equal(crawl_is_code((uintptr_t)&malloc), 1);          /* libc */
    assert_int_equal(crawl_is_code((uintptr_t)&local), 0);
    assert_int_equal(crawl_is_code((uintptr_t)heap), 0);
    assert_int_equal(crawl_is_code(0), 0);
    free(heap);
    pthread_t t;
    void *rc;
    assert_int_equal(pthread_create(&t, NULL, is_code_unattached, NULL), 0);
    pthread_join(t, &rc);
    assert_int_equal((int)(intptr_t)rc, -ENOENT);
}

/* ---- the first frame ------------------------------------------------------- */

static void test_first_frame_is_the_caller(void **state)
{
    (void)state;
    for (int m = 0; m < 2; m++) {
        reset();
        walker(modes[m]);
        t_name(&T);
        EXPECT(T.st == CRAWL_WALK_DONE);
        EXPECT(T.n >= 3);
        EXPECT(T.r[0].kind == CRAWL_CF_NATIVE && strcmp(T.r[0].name, "walker") == 0);
        EXPECT(!(T.r[0].flags & CRAWL_CF_EXACT_IP));
        EXPECT(T.r[0].has_regs);
        EXPECT(strcmp(T.r[1].name, "test_first_frame_is_the_caller") == 0);
        EXPECT(t_find(&T, "crawl_walk", 0) < 0 && t_find(&T, "sw_walk", 0) < 0);
        t_check_order(&T);
        if (!(modes[m] & FAST)) {
            /* precise walks reach main and libc's start-up code */
            EXPECT(native_index(&T, "main") > 1);
            EXPECT(native_index(&T, "_start") > native_index(&T, "main"));
        }
    }
}

static void test_bad_arguments(void **state)
{
    (void)state;
    assert_int_equal(crawl_walk(NULL, NULL, 0), CRAWL_WALK_FAILED);
    assert_int_equal(crawl_walk(NULL, NULL, FAST), CRAWL_WALK_FAILED);
    assert_int_equal(crawl_walk_context(NULL, t_record, &T, 0), CRAWL_WALK_FAILED);
    assert_true(crawl_walk_precise_available());
}

static void test_abort_stops_the_walk(void **state)
{
    (void)state;
    for (int m = 0; m < 2; m++) {
        reset();
        T.limit = 2;
        walker(modes[m]);
        assert_int_equal(T.st, CRAWL_WALK_ABORTED);
        assert_int_equal(T.n, 2);
    }
}

/* ---- the standard interleaving: VM -> qsort (libc) -> comparator -> walk ---- */

static unsigned qsort_flags;
static int qsort_walked;

NOINLINE static int compare_ints(const void *a, const void *b)
{
    crawl_entry entry = {.target = (const void *)compare_ints};
    crawl_frame_push(&entry.frame, &crawl_entry_type);
    if (!qsort_walked) {
        qsort_walked = 1;
        walker(qsort_flags);
    }
    crawl_frame_pop(&entry.frame);
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

NOINLINE static void vm_calls_qsort(void)
{
    label_frame script = {.label = "script:sort_all"};
    crawl_frame_push(&script.frame, &t_label_type);
    crawl_transition t;
    crawl_transition_push(&t, NULL);
    int v[64];
    for (int i = 0; i < 64; i++)
        v[i] = (i * 37) % 64;
    qsort(v, 64, sizeof v[0], compare_ints);
    crawl_frame_pop(&t.frame);
    crawl_frame_pop(&script.frame);
    for (int i = 0; i < 64; i++)
        assert_int_equal(v[i], i);
}

static void check_qsort_trace(unsigned flags)
{
    t_name(&T);
    EXPECT(T.st == CRAWL_WALK_DONE);
    t_check_order(&T);
    /* walker, then the entry Frame (in compare_ints' frame), then compare_ints */
    EXPECT(strcmp(T.r[0].name, "walker") == 0);
    EXPECT(strcmp(T.r[1].name, "[entry]") == 0 && T.r[1].kind == CRAWL_CF_FRAME);
    EXPECT(T.r[1].method == (const void *)compare_ints);
    EXPECT(strcmp(T.r[2].name, "compare_ints") == 0);
    int tr = t_find(&T, "[transition]", 3);
    EXPECT(tr > 3);
    /* between the comparator and the transition Frame: libc's sorting code only
     * (under AddressSanitizer, its qsort interceptor calls the comparator first) */
    for (int i = 3; i < tr; i++)
        EXPECT(T.r[i].kind == CRAWL_CF_NATIVE &&
               (strstr(T.r[i].module, "libc.so") || strstr(T.r[i].module, "libasan")));
    EXPECT(T.r[tr].has_regs && T.r[tr].ip != 0);
    EXPECT(strcmp(T.r[tr + 1].name, "script:sort_all") == 0);
    EXPECT(strcmp(T.r[tr + 2].name, "vm_calls_qsort") == 0);
    EXPECT(strcmp(T.r[tr + 3].name, "check_qsort_interleaving") == 0);
    /* DWARF CFI walks through libc and names qsort's entry point; fast
     * walks too: libc has no frame pointers, and where the chain fails or
     * would pass a Frame they ask the compiled CFI (under AddressSanitizer
     * the caller is its interceptor) */
    EXPECT(!(T.r[tr].flags & CRAWL_CF_AFTER_GAP));
    int q = -1;
    for (int i = 3; i < tr; i++)
        if (strstr(T.r[i].name, "qsort"))
            q = i;
    EXPECT(q == tr - 1);
    /* no Frame reported after a gap anywhere */
    for (unsigned i = 0; i < T.n; i++)
        EXPECT(!(T.r[i].flags & CRAWL_CF_AFTER_GAP));
    (void)flags;
}

NOINLINE static void check_qsort_interleaving(unsigned flags)
{
    reset();
    qsort_flags = flags;
    qsort_walked = 0;
    vm_calls_qsort();
    check_qsort_trace(flags);
}

static void test_qsort_interleaving_precise(void **state)
{
    (void)state;
    check_qsort_interleaving(0);
}

static void test_qsort_interleaving_fast(void **state)
{
    (void)state;
    check_qsort_interleaving(FAST);
}

/* ---- many Frames in one native frame ---------------------------------------- */

NOINLINE static void many_frames(unsigned flags)
{
    static char labels[64][8];
    label_frame f[64];
    for (int i = 0; i < 64; i++) {
        snprintf(labels[i], sizeof labels[i], "m%d", i);
        f[i].label = labels[i];
        crawl_frame_push(&f[i].frame, &t_label_type);
    }
    walker(flags);
    for (int i = 63; i >= 0; i--)
        crawl_frame_pop(&f[i].frame);
}

static void test_many_frames_in_one_native_frame(void **state)
{
    (void)state;
    for (int m = 0; m < 2; m++) {
        reset();
        many_frames(modes[m]);
        t_name(&T);
        EXPECT(T.st == CRAWL_WALK_DONE);
        EXPECT(strcmp(T.r[0].name, "walker") == 0);
        for (int i = 0; i < 64; i++) {
            char want[8];
            snprintf(want, sizeof want, "m%d", 63 - i);
            EXPECT(strcmp(T.r[1 + i].name, want) == 0);
        }
        EXPECT(strcmp(T.r[65].name, "many_frames") == 0);
        t_check_order(&T);
    }
}

/* ---- an interpreter segment hosting VM activations -------------------------- */

typedef struct vm_act {
    const char *function;
    int line;
} vm_act;

typedef struct segment {
    crawl_frame frame;
    vm_act *stack;            /* VM-managed stack, oldest first */
    int depth;
} segment;

static int seg_next(const crawl_frame *f, crawl_vm_frame *vf)
{
    const segment *s = (const segment *)f;
    int i = s->depth - 1 - (int)vf->iter;
    if (i < 0)
        return 0;
    vf->method = s->stack[i].function;
    vf->pc = (uintptr_t)s->stack[i].line;
    vf->activation = &s->stack[i];
    vf->iter++;
    return 1;
}

static int seg_describe(const crawl_frame *f, const crawl_vm_frame *vf, char *buf, size_t len)
{
    (void)f;
    return snprintf(buf, len, "%s vm.script:%lu", (const char *)vf->method, (unsigned long)vf->pc);
}

static const crawl_frame_type segment_type = {
    .name = "interp",
    .kind = CRAWL_FRAME_KIND_INTERP,
    .vm_next = seg_next,
    .vm_describe = seg_describe,
};

NOINLINE static void interp_loop(unsigned flags)
{
    vm_act acts[3] = {{"main", 10}, {"fib", 4}, {"fib", 5}};
    segment seg = {.stack = acts, .depth = 3};
    crawl_frame_push(&seg.frame, &segment_type);
    label_frame helper = {.label = "helper"};
    crawl_frame_push(&helper.frame, &t_plain_type);
    walker(flags);
    crawl_frame_pop(&helper.frame);
    crawl_frame_pop(&seg.frame);
}

static void test_interpreter_segment(void **state)
{
    (void)state;
    for (int m = 0; m < 2; m++) {
        reset();
        interp_loop(modes[m]);
        t_name(&T);
        EXPECT(T.st == CRAWL_WALK_DONE);
        EXPECT(strcmp(T.r[1].name, "[plain]") == 0);
        EXPECT(T.r[2].kind == CRAWL_CF_VM && strcmp(T.r[2].name, "fib vm.script:5") == 0);
        EXPECT(T.r[3].kind == CRAWL_CF_VM && strcmp(T.r[3].name, "fib vm.script:4") == 0);
        EXPECT(T.r[4].kind == CRAWL_CF_VM && strcmp(T.r[4].name, "main vm.script:10") == 0);
        EXPECT(T.r[2].ip == 5 && strcmp((const char *)T.r[2].method, "fib") == 0);
        EXPECT(T.r[2].sp == (uintptr_t)T.r[2].frame && T.r[2].type == &segment_type);
        EXPECT(strcmp(T.r[5].name, "interp_loop") == 0);
    }
    /* VM activations only */
    reset();
    interp_loop(CRAWL_WALK_SKIP_NATIVE | CRAWL_WALK_FUNCTIONS_ONLY);
    t_name(&T);
    EXPECT(T.n >= 3 && T.r[0].kind == CRAWL_CF_VM && T.r[2].kind == CRAWL_CF_VM);
    for (unsigned i = 0; i < T.n; i++)
        EXPECT(T.r[i].kind == CRAWL_CF_VM || (T.r[i].kind == CRAWL_CF_FRAME &&
                                              T.r[i].type->flags & CRAWL_FRAME_FUNCTION));
    /* the segment as one Frame */
    reset();
    interp_loop(CRAWL_WALK_NO_VM);
    t_name(&T);
    EXPECT(strcmp(T.r[2].name, "[interp]") == 0 && T.r[2].kind == CRAWL_CF_FRAME);
    EXPECT(strcmp(T.r[3].name, "interp_loop") == 0);
}

/* ---- flags ------------------------------------------------------------------- */

NOINLINE static void flagged(unsigned flags)
{
    label_frame l = {.label = "fn"};
    crawl_frame_push(&l.frame, &t_label_type);
    crawl_transition t;
    crawl_transition_push(&t, NULL);
    walker(flags);
    crawl_frame_pop(&t.frame);
    crawl_frame_pop(&l.frame);
}

static void test_flags(void **state)
{
    (void)state;
    for (int m = 0; m < 2; m++) {
        reset();
        flagged(modes[m] | CRAWL_WALK_SKIP_NATIVE);
        t_name(&T);
        EXPECT(T.st == CRAWL_WALK_DONE && T.n >= 2);
        EXPECT(strcmp(T.r[0].name, "[transition]") == 0 && strcmp(T.r[1].name, "fn") == 0);
        for (unsigned i = 0; i < T.n; i++)
            EXPECT(T.r[i].kind == CRAWL_CF_FRAME);

        reset();
        flagged(modes[m] | CRAWL_WALK_SKIP_FRAMES);
        t_name(&T);
        EXPECT(strcmp(T.r[0].name, "walker") == 0 && strcmp(T.r[1].name, "flagged") == 0);
        for (unsigned i = 0; i < T.n; i++)
            EXPECT(T.r[i].kind == CRAWL_CF_NATIVE);

        reset();
        flagged(modes[m] | CRAWL_WALK_FUNCTIONS_ONLY);
        t_name(&T);
        EXPECT(strcmp(T.r[1].name, "fn") == 0 && strcmp(T.r[2].name, "flagged") == 0);
        EXPECT(t_find(&T, "[transition]", 0) < 0);
    }
}

/* ---- walks from a signal handler's context ----------------------------------- */

static unsigned sig_flags;

static void on_sigill(int sig, siginfo_t *si, void *ucv)
{
    (void)sig;
    (void)si;
    ucontext_t *uc = ucv;
    T.st = crawl_walk_context(uc, t_record, &T, sig_flags);
    uc->uc_mcontext.gregs[REG_RIP] += 2;        /* step over ud2 */
}

static uintptr_t trap_pc;

NOINLINE static void not_a_leaf(void)
{
    __asm__ volatile("" ::: "memory");
}

/* Not a leaf, so it sets up its frame pointer before the trap (the fast
 * unwinder cannot see a frameless leaf's caller). */
NOINLINE static void victim(void)
{
    __asm__ volatile("lea 0f(%%rip), %0\n\t"
                     "0: ud2" : "=r"(trap_pc));
    not_a_leaf();
}

NOINLINE static void victim_caller(void)
{
    label_frame l = {.label = "around-victim"};
    crawl_frame_push(&l.frame, &t_label_type);
    victim();
    crawl_frame_pop(&l.frame);
}

static void test_walk_from_signal_context(void **state)
{
    (void)state;
    struct sigaction sa = {.sa_sigaction = on_sigill, .sa_flags = SA_SIGINFO}, old;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGILL, &sa, &old);
    for (int m = 0; m < 4; m++) {
        reset();
        sig_flags = modes[m & 1] | (m >= 2 ? CRAWL_WALK_SIGNAL_SAFE : 0);
        victim_caller();
        t_name(&T);
        EXPECT(T.st == CRAWL_WALK_DONE);
        /* the interrupted function, with its exact pc; no handler or trampoline */
        EXPECT(strcmp(T.r[0].name, "victim") == 0 && T.r[0].ip == trap_pc);
        EXPECT(T.r[0].flags & CRAWL_CF_EXACT_IP);
        EXPECT(t_find(&T, "on_sigill", 0) < 0 && t_find(&T, "__restore_rt", 0) < 0);
        int l = t_find(&T, "around-victim", 0);
        EXPECT(l >= 1 && strcmp(T.r[l + 1].name, "victim_caller") == 0);
        t_check_order(&T);
    }
    sigaction(SIGILL, &old, NULL);
}

/* A handler on an alternate signal stack calls crawl_walk itself: the
 * precise walk crosses the signal trampoline back onto the thread's stack. */
static void on_sigusr1_altstack(int sig)
{
    (void)sig;
    walker(0);
}

NOINLINE static void raise_on_altstack(void)
{
    label_frame l = {.label = "before-signal"};
    crawl_frame_push(&l.frame, &t_label_type);
    raise(SIGUSR1);
    crawl_frame_pop(&l.frame);
}

static void test_walk_inside_altstack_handler(void **state)
{
    (void)state;
    static char altstack[64 * 1024];
    stack_t ss = {.ss_sp = altstack, .ss_size = sizeof altstack}, old_ss;
    assert_int_equal(sigaltstack(&ss, &old_ss), 0);
    struct sigaction sa = {.sa_handler = on_sigusr1_altstack, .sa_flags = SA_ONSTACK}, old;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGUSR1, &sa, &old);
    reset();
    raise_on_altstack();
    t_name(&T);
    sigaction(SIGUSR1, &old, NULL);
    sigaltstack(&old_ss, NULL);
    EXPECT(T.st == CRAWL_WALK_DONE);
    EXPECT(strcmp(T.r[0].name, "walker") == 0 && strcmp(T.r[1].name, "on_sigusr1_altstack") == 0);
    int l = t_find(&T, "before-signal", 2);
    EXPECT(l > 2 && strcmp(T.r[l + 1].name, "raise_on_altstack") == 0);
}

/* A handler that keeps a frame pointer walks in fast mode from inside
 * itself: the chain leads to libc's signal trampoline, whose saved rbp is
 * only what the interrupted code had in rbp. Stepping out of it by the
 * frame pointer skipped the interrupted frames (pthread_kill, raise) and
 * their callers down to the one rbp happened to point at; the ucontext
 * gives them. */
static unsigned handler_flags;

NOINLINE static void on_sigusr1_fast(int sig)
{
    (void)sig;
    walker(handler_flags);
}

NOINLINE static void raise_from_here(void)
{
    raise(SIGUSR1);
    T_NO_TAIL();
}

static void test_fast_walk_inside_handler_crosses_the_trampoline(void **state)
{
    (void)state;
    assert_true(crawl_cfi_cache_warm() > 0);
    struct sigaction sa = {.sa_handler = on_sigusr1_fast}, old;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGUSR1, &sa, &old);
    const unsigned flags[2] = {FAST, FAST | CRAWL_WALK_SIGNAL_SAFE};
    for (int m = 0; m < 2; m++) {
        reset();
        handler_flags = flags[m];
        raise_from_here();
        t_name(&T);
        int h = native_index(&T, "on_sigusr1_fast");
        if (!(h > 0 && h + 3 < (int)T.n))
            t_dump(&T, "fast walk inside a handler");
        assert_true(h > 0 && h + 3 < (int)T.n);
        /* h + 1 is the trampoline; h + 2 the interrupted frame (the pc the
         * signal found, exact), in libc, as raise sends the signal */
        EXPECT(strstr(T.r[h + 1].module, "libc.so") != NULL);
        EXPECT(T.r[h + 2].flags & CRAWL_CF_EXACT_IP);
        EXPECT(strstr(T.r[h + 2].module, "libc.so") != NULL);
        EXPECT(native_index(&T, "raise") > h + 1);
        EXPECT(t_find(&T, "test_fast_walk_inside_handler_crosses_the_trampoline", 0) > h + 2);
        t_check_order(&T);
    }
    sigaction(SIGUSR1, &old, NULL);
}

/* ---- JIT code: no unwind info, then a registered code range ------------------ */

/* push rbp; xor ebp,ebp; mov rax,rdi; mov rdi,rsi; call rax; pop rbp; ret
 * It calls fn(arg) with rbp zeroed, so neither frame pointers nor DWARF
 * can get through it. */
static const unsigned char jit_bytes[] = {0x55, 0x31, 0xed, 0x48, 0x89, 0xf8, 0x48,
                                          0x89, 0xf7, 0xff, 0xd0, 0x5d, 0xc3};
typedef void (*jit_fn)(void (*fn)(void *), void *arg);
static jit_fn jit_code;

static jit_fn make_jit(void)
{
    if (!jit_code) {
        void *p = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        assert_true(p != MAP_FAILED);
        memcpy(p, jit_bytes, sizeof jit_bytes);
        assert_int_equal(mprotect(p, 4096, PROT_READ | PROT_EXEC), 0);
        jit_code = (jit_fn)p;
    }
    return jit_code;
}

NOINLINE static void jit_callback(void *arg)
{
    walker(*(unsigned *)arg);
}

NOINLINE static void vm_calls_jit(unsigned flags)
{
    label_frame l = {.label = "script:jitted"};
    crawl_frame_push(&l.frame, &t_label_type);
    crawl_transition t;
    crawl_transition_push(&t, NULL);
    make_jit()(jit_callback, &flags);
    crawl_frame_pop(&t.frame);
    crawl_frame_pop(&l.frame);
}

static void test_resume_past_code_without_unwind_info(void **state)
{
    (void)state;
    for (int m = 0; m < 2; m++) {
        reset();
        vm_calls_jit(modes[m]);
        t_name(&T);
        EXPECT(T.st == CRAWL_WALK_DONE);
        EXPECT(strcmp(T.r[0].name, "walker") == 0 && strcmp(T.r[1].name, "jit_callback") == 0);
        /* unregistered JIT code is not code to crawl: no frame there, the
         * walk resumes at the transition Frame */
        for (unsigned i = 0; i < T.n; i++)
            EXPECT(T.r[i].ip - (uintptr_t)jit_code >= 4096);
        int tr = t_find(&T, "[transition]", 2);
        EXPECT(tr == 2);
        EXPECT(T.r[tr].flags & CRAWL_CF_AFTER_GAP);
        EXPECT(strcmp(T.r[tr + 1].name, "script:jitted") == 0);
        EXPECT(strcmp(T.r[tr + 2].name, "vm_calls_jit") == 0);
        EXPECT(strcmp(T.r[tr + 3].name, "test_resume_past_code_without_unwind_info") == 0);
        t_check_order(&T);
    }
}

static const char jit_method[] = "jitted-method";

static void test_code_range_unwinds_jit_frames(void **state)
{
    (void)state;
    make_jit();
    crawl_unwind_rule rule = {.kind = CRAWL_UNWIND_FIXED_FRAME, .frame_size = 16,
                              .saved_fp_offset = -16};
    uintptr_t start = (uintptr_t)jit_code;
    assert_int_equal(crawl_code_range_add(start, start + sizeof jit_bytes, jit_method, &rule,
                                          "jit:callback-thunk"), 0);
    for (int m = 0; m < 2; m++) {
        reset();
        vm_calls_jit(modes[m]);
        t_name(&T);
        EXPECT(T.st == CRAWL_WALK_DONE);
        EXPECT(T.r[2].kind == CRAWL_CF_JIT && T.r[2].method == jit_method);
        EXPECT(strncmp(T.r[2].name, "jit:callback-thunk", 18) == 0);
        EXPECT(strcmp(T.r[3].name, "[transition]") == 0 && !(T.r[3].flags & CRAWL_CF_AFTER_GAP));
        EXPECT(strcmp(T.r[5].name, "vm_calls_jit") == 0);
        for (unsigned i = 0; i < T.n; i++)
            EXPECT(!(T.r[i].flags & CRAWL_CF_AFTER_GAP));
        t_check_order(&T);
    }
    /* JIT frames stay visible when native frames are skipped */
    reset();
    vm_calls_jit(CRAWL_WALK_SKIP_NATIVE);
    t_name(&T);
    EXPECT(T.r[0].kind == CRAWL_CF_JIT && strcmp(T.r[1].name, "[transition]") == 0);
    assert_int_equal(crawl_code_range_remove(start), 0);
}

static void test_code_range_table(void **state)
{
    (void)state;
    crawl_unwind_rule fp = {.kind = CRAWL_UNWIND_FRAME_POINTER};
    crawl_unwind_rule bad = {.kind = CRAWL_UNWIND_FIXED_FRAME, .frame_size = 3};
    assert_int_equal(crawl_code_range_add(0x2000, 0x1000, NULL, &fp, NULL), -EINVAL);
    assert_int_equal(crawl_code_range_add(0x1000, 0x2000, NULL, NULL, NULL), -EINVAL);
    assert_int_equal(crawl_code_range_add(0x1000, 0x2000, NULL, &bad, NULL), -EINVAL);
    /* 1000 ranges in shuffled order; each found by any address inside it */
    for (unsigned i = 0; i < 1000; i++) {
        uintptr_t k = (i * 617u) % 1000u;
        assert_int_equal(crawl_code_range_add(0x100000 + k * 0x100, 0x100000 + k * 0x100 + 0x80,
                                              (void *)(k + 1), &fp, NULL), 0);
    }
    assert_int_equal(crawl_code_range_add(0x100040, 0x100050, NULL, &fp, NULL), -EEXIST);
    assert_int_equal(crawl_code_range_add(0x0fff00, 0x100001, NULL, &fp, NULL), -EEXIST);
    crawl_code_range r;
    for (uintptr_t k = 0; k < 1000; k++) {
        assert_int_equal(crawl_code_range_find(0x100000 + k * 0x100 + 0x7f, &r), 1);
        assert_ptr_equal(r.method, (void *)(k + 1));
        assert_int_equal(crawl_code_range_find(0x100000 + k * 0x100 + 0x80, &r), 0);
    }
    assert_int_equal(crawl_code_range_find(0xfffff, &r), 0);
    for (uintptr_t k = 0; k < 1000; k++)
        assert_int_equal(crawl_code_range_remove(0x100000 + k * 0x100), 0);
    assert_int_equal(crawl_code_range_remove(0x100000), -ENOENT);
    assert_int_equal(crawl_code_range_find(0x100010, &r), 0);
}

/* Readers never lock: one thread adds and removes ranges while another
 * walks through a registered JIT frame. Under ASan a table freed while a
 * walk reads it would be reported. */
static volatile int churn_stop;

static void *churn_ranges(void *arg)
{
    (void)arg;
    crawl_unwind_rule fp = {.kind = CRAWL_UNWIND_FRAME_POINTER};
    for (unsigned i = 0; !churn_stop; i++) {
        uintptr_t base = 0x200000 + (uintptr_t)(i % 64) * 0x1000;
        if (crawl_code_range_add(base, base + 0x800, NULL, &fp, "churn") == 0)
            crawl_code_range_remove(base);
    }
    return NULL;
}

static void test_code_ranges_change_under_walks(void **state)
{
    (void)state;
    make_jit();
    crawl_unwind_rule rule = {.kind = CRAWL_UNWIND_FIXED_FRAME, .frame_size = 16,
                              .saved_fp_offset = -16};
    uintptr_t start = (uintptr_t)jit_code;
    assert_int_equal(crawl_code_range_add(start, start + sizeof jit_bytes, jit_method, &rule,
                                          "jit:stable"), 0);
    churn_stop = 0;
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, churn_ranges, NULL), 0);
    int bad = 0;
    for (int i = 0; i < 2000; i++) {
        reset();
        vm_calls_jit(modes[i & 1]);
        if (T.st != CRAWL_WALK_DONE || T.r[2].kind != CRAWL_CF_JIT || T.r[2].method != jit_method)
            bad++;
        crawl_code_range r;
        if (crawl_code_range_find(start + 1, &r) != 1 || r.method != jit_method)
            bad++;
    }
    churn_stop = 1;
    pthread_join(t, NULL);
    assert_int_equal(bad, 0);
    assert_int_equal(crawl_code_range_remove(start), 0);
}

/* ---- corruption: never crash, say FAILED, never drop a Frame we can reach ----- */

NOINLINE static void corrupt_fp_and_walk(unsigned flags, uintptr_t bad)
{
    void **fp = __builtin_frame_address(0);
    void *saved = fp[0];
    fp[0] = (void *)bad;
    walker(flags);
    fp[0] = saved;
    __asm__ volatile("" ::: "memory");
}

NOINLINE static void corrupt_caller(unsigned flags, uintptr_t bad)
{
    label_frame outer = {.label = "outer"};
    crawl_frame_push(&outer.frame, &t_label_type);
    corrupt_fp_and_walk(flags, bad);
    crawl_frame_pop(&outer.frame);
}

static void test_corrupt_frame_pointer_chain(void **state)
{
    (void)state;
    char below[64];
    /* an address on the stack, below the walking frames: the chain goes backwards */
    uintptr_t backwards = ((uintptr_t)below - 4096) & ~(uintptr_t)15;
    for (int m = 0; m < 2; m++) {
        reset();
        corrupt_caller(modes[m], backwards);
        t_name(&T);
        EXPECT(T.st == CRAWL_WALK_FAILED);
        EXPECT(strcmp(T.r[0].name, "walker") == 0);
        EXPECT(strcmp(T.r[1].name, "corrupt_fp_and_walk") == 0);
        EXPECT(t_find(&T, "outer", 0) > 1);                  /* the Frame is not dropped */
    }
    /* misaligned but on the stack */
    reset();
    corrupt_caller(FAST, ((uintptr_t)below & ~(uintptr_t)15) + 3);   /* in this frame */
    EXPECT(T.st == CRAWL_WALK_FAILED);
    /* pointing off the stack: fast mode cannot tell it from the end of the chain */
    for (int m = 0; m < 2; m++) {
        reset();
        corrupt_caller(modes[m], 0xdeadbeef0);
        t_name(&T);
        EXPECT(T.st != CRAWL_WALK_ABORTED);
        EXPECT(strcmp(T.r[1].name, "corrupt_fp_and_walk") == 0);
        EXPECT(t_find(&T, "outer", 0) > 1);
    }
}

static void test_corrupt_frame_chain(void **state)
{
    (void)state;
    crawl_frame garbage_type_frame = {.next = NULL, .type = (const crawl_frame_type *)0x1234};
    crawl_frame *bad_next[] = {(crawl_frame *)0x10, (crawl_frame *)(uintptr_t)0xdeadbeef0,
                               (crawl_frame *)malloc(64), &garbage_type_frame, NULL /* cycle */};
    for (unsigned b = 0; b < sizeof bad_next / sizeof bad_next[0]; b++) {
        for (int m = 0; m < 2; m++) {
            label_frame a = {.label = "a"}, z = {.label = "z"};
            crawl_frame_push(&a.frame, &t_label_type);
            crawl_frame_push(&z.frame, &t_label_type);
            crawl_frame *saved = z.frame.next;
            z.frame.next = bad_next[b] ? bad_next[b] : &z.frame;
            reset();
            walker(modes[m]);
            z.frame.next = saved;
            crawl_frame_pop(&z.frame);
            crawl_frame_pop(&a.frame);
            t_name(&T);
            EXPECT(T.st == CRAWL_WALK_FAILED);
            EXPECT(strcmp(T.r[1].name, "z") == 0);
            if (bad_next[b]) {
                EXPECT(t_find(&T, "a", 0) < 0);
                EXPECT(native_index(&T, "test_corrupt_frame_chain") == 2);   /* natives go on */
            } else {
                /* a cycle ends once the walk has seen as many Frames as were pushed */
                EXPECT(native_index(&T, "test_corrupt_frame_chain") == 3);   /* z, z: 2 pushed */
            }
        }
    }
    free(bad_next[2]);
}

/* ---- crawl_backtrace: the natives of crawl_walk, without a callback ----------- */

static uintptr_t bt_pcs[256];
static int bt_n;

NOINLINE static void backtrace_and_walk(unsigned flags)
{
    bt_n = crawl_backtrace(bt_pcs, 256, flags);
    T.st = crawl_walk(t_record, &T, flags | CRAWL_WALK_SKIP_FRAMES);
    __asm__ volatile("" ::: "memory");
}

static int bt_compare_calls;
NOINLINE static int compare_and_backtrace(const void *a, const void *b)
{
    if (!bt_compare_calls++)
        backtrace_and_walk(qsort_flags);
    return (*(const int *)a > *(const int *)b) - (*(const int *)a < *(const int *)b);
}

NOINLINE static void vm_qsort_backtrace(unsigned flags)
{
    crawl_transition t;
    crawl_transition_push(&t, NULL);
    int v[8] = {3, 1, 2, 8, 5, 4, 7, 6};
    qsort_flags = flags;
    bt_compare_calls = 0;
    qsort(v, 8, sizeof v[0], compare_and_backtrace);
    crawl_frame_pop(&t.frame);
}

static void test_backtrace_matches_walk(void **state)
{
    (void)state;
    for (int m = 0; m < 2; m++) {
        reset();
        vm_qsort_backtrace(modes[m]);
        t_name(&T);
        EXPECT(bt_n > 5 && (unsigned)bt_n == T.n);
        /* [0] is a different call site in the same function */
        char buf[512];
        crawl_symbol sym;
        EXPECT(crawl_symbolize(bt_pcs[0] - 1, &sym, buf, sizeof buf) == 0 &&
               strcmp(sym.function, "backtrace_and_walk") == 0);
        EXPECT(strcmp(T.r[0].name, "backtrace_and_walk") == 0);
        for (unsigned i = 1; i < T.n; i++)
            EXPECT(bt_pcs[i] == T.r[i].ip);
        /* fast mode got past libc through the transition Frame */
        EXPECT(native_index(&T, "vm_qsort_backtrace") > 2);
    }
    /* truncation and bad arguments */
    uintptr_t three[3] = {0};
    assert_int_equal(crawl_backtrace(three, 3, 0), 3);   /* cmocka has no frame pointers */
    assert_true(three[2] != 0);
    assert_int_equal(crawl_backtrace(NULL, 3, 0), 0);
    assert_int_equal(crawl_backtrace(three, 0, 0), 0);
}

/* ---- threads ------------------------------------------------------------------ */

typedef struct thread_arg {
    const char *label;
    int errors;
    trace t;
} thread_arg;

static crawl_action count_labels(const crawl_cf *cf, void *ctx)
{
    thread_arg *a = ctx;
    crawl_frame *f = crawl_cf_frame(cf);
    if (crawl_cf_kind(cf) == CRAWL_CF_FRAME && f->type == &t_label_type &&
        strcmp(((label_frame *)f)->label, a->label) != 0)
        a->errors++;                                 /* another thread's Frame */
    if (crawl_cf_kind(cf) == CRAWL_CF_FRAME && f->type == &t_label_type)
        a->t.n++;
    return CRAWL_CONTINUE;
}

static void *walk_many_times(void *p)
{
    thread_arg *a = p;
    label_frame l1 = {.label = a->label}, l2 = {.label = a->label};
    crawl_frame_push(&l1.frame, &t_label_type);
    crawl_frame_push(&l2.frame, &t_label_type);
    for (int i = 0; i < 3000; i++) {
        unsigned before = a->t.n;
        if (crawl_walk(count_labels, a, (i & 1) ? FAST : 0) != CRAWL_WALK_DONE)
            a->errors++;
        if (a->t.n - before != 2)
            a->errors++;
    }
    crawl_frame_pop(&l2.frame);
    crawl_frame_pop(&l1.frame);
    crawl_thread_detach();
    return NULL;
}

static void test_two_threads_walking_at_once(void **state)
{
    (void)state;
    thread_arg a = {.label = "thread-a"}, b = {.label = "thread-b"};
    pthread_t ta, tb;
    assert_int_equal(pthread_create(&ta, NULL, walk_many_times, &a), 0);
    assert_int_equal(pthread_create(&tb, NULL, walk_many_times, &b), 0);
    pthread_join(ta, NULL);
    pthread_join(tb, NULL);
    assert_int_equal(a.errors, 0);
    assert_int_equal(b.errors, 0);
    assert_int_equal(a.t.n, 6000);
    assert_int_equal(b.t.n, 6000);
}

static void *unattached_walk(void *p)
{
    int *rc = p;
    rc[0] = crawl_walk(t_record, &(trace){0}, FAST | CRAWL_WALK_SIGNAL_SAFE);
    rc[1] = crawl_thread_is_attached();
    rc[2] = crawl_walk(t_record, &(trace){0}, FAST);
    rc[3] = crawl_thread_is_attached();
    return NULL;
}

static void test_unattached_thread(void **state)
{
    (void)state;
    int rc[4];
    pthread_t t;
    pthread_create(&t, NULL, unattached_walk, rc);
    pthread_join(t, NULL);
    assert_int_equal(rc[0], CRAWL_WALK_FAILED);   /* signal-safe walks never attach */
    assert_int_equal(rc[1], 0);
    assert_int_equal(rc[2], CRAWL_WALK_DONE);     /* others attach implicitly */
    assert_int_equal(rc[3], 1);
}

int main(void)
{
    crawl_thread_attach();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_first_frame_is_the_caller),
        cmocka_unit_test(test_frames_name_their_thread),
        cmocka_unit_test(test_is_code),
        cmocka_unit_test(test_bad_arguments),
        cmocka_unit_test(test_abort_stops_the_walk),
        cmocka_unit_test(test_qsort_interleaving_precise),
        cmocka_unit_test(test_qsort_interleaving_fast),
        cmocka_unit_test(test_many_frames_in_one_native_frame),
        cmocka_unit_test(test_interpreter_segment),
        cmocka_unit_test(test_flags),
        cmocka_unit_test(test_walk_from_signal_context),
        cmocka_unit_test(test_walk_inside_altstack_handler),
        cmocka_unit_test(test_fast_walk_inside_handler_crosses_the_trampoline),
        cmocka_unit_test(test_resume_past_code_without_unwind_info),
        cmocka_unit_test(test_code_range_unwinds_jit_frames),
        cmocka_unit_test(test_code_range_table),
        cmocka_unit_test(test_code_ranges_change_under_walks),
        cmocka_unit_test(test_corrupt_frame_pointer_chain),
        cmocka_unit_test(test_corrupt_frame_chain),
        cmocka_unit_test(test_backtrace_matches_walk),
        cmocka_unit_test(test_two_threads_walking_at_once),
        cmocka_unit_test(test_unattached_thread),
    };
    return cmocka_run_group_tests_name("walk", tests, NULL, NULL);
}
