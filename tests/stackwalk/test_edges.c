/* Edge cases a review found: a walk at every instruction of a push, a
 * frame-pointer chain that jumps over a transition's pusher, JIT code whose
 * last instruction is a call, a signal stack above the thread's stack, a
 * handler walking the context it interrupted after pushing Frames of its
 * own, and fork() while other threads hold crawl's locks. */
#define _GNU_SOURCE
#include "../support.h"

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <ucontext.h>
#include <unistd.h>

static trace T;
static void reset(void) { memset(&T, 0, sizeof T); }

NOINLINE static void walker(unsigned flags)
{
    T.st = crawl_walk(t_record, &T, flags);
    __asm__ volatile("" ::: "memory");
}

/* ---- a signal-safe walk at every instruction of crawl_frame_push ------------ */

static volatile int stepping;
static int step_walks, step_failures, step_missing;

static crawl_action find_label_a(const crawl_cf *cf, void *ctx)
{
    crawl_frame *f = crawl_cf_frame(cf);
    if (crawl_cf_kind(cf) == CRAWL_CF_FRAME && f->type == &t_label_type &&
        strcmp(((label_frame *)f)->label, "a") == 0)
        *(int *)ctx = 1;
    return CRAWL_CONTINUE;
}

static void on_trap(int sig, siginfo_t *si, void *ucv)
{
    (void)sig, (void)si;
    ucontext_t *uc = ucv;
    if (!stepping) {
        uc->uc_mcontext.gregs[REG_EFL] &= ~0x100L;   /* stop single-stepping */
        return;
    }
    int seen = 0;
    step_walks++;
    if (crawl_walk_context(uc, find_label_a, &seen, CRAWL_WALK_FAST | CRAWL_WALK_SIGNAL_SAFE) !=
        CRAWL_WALK_DONE)
        step_failures++;
    if (!seen)
        step_missing++;
}

NOINLINE static void push_pop_single_stepped(label_frame *b)
{
    stepping = 1;
    __asm__ volatile("pushfq; orq $0x100, (%%rsp); popfq" ::: "memory", "cc");
    crawl_frame_push(&b->frame, &t_label_type);
    crawl_frame_pop(&b->frame);
    stepping = 0;
    __asm__ volatile("nop" ::: "memory");        /* the trap here clears TF */
}

static void test_walk_at_every_instruction_of_push(void **state)
{
    (void)state;
    /* valgrind does not emulate the trap flag: nothing to step there */
    const char *preload = getenv("LD_PRELOAD");
    if (preload && strstr(preload, "vgpreload"))
        skip();
    struct sigaction sa = {.sa_sigaction = on_trap, .sa_flags = SA_SIGINFO}, old;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTRAP, &sa, &old);
    label_frame a = {.label = "a"}, b = {.label = "b"};
    crawl_frame_push(&a.frame, &t_label_type);
    push_pop_single_stepped(&b);
    crawl_frame_pop(&a.frame);
    sigaction(SIGTRAP, &old, NULL);
    print_message("walked at %d instructions\n", step_walks);
    assert_true(step_walks > 10);
    assert_int_equal(step_failures, 0);
    assert_int_equal(step_missing, 0);
}

/* ---- executable thunks ---------------------------------------------------------- */

static void *exec_copy(const unsigned char *bytes, size_t n)
{
    void *p = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    assert_true(p != MAP_FAILED);
    memcpy(p, bytes, n);
    assert_int_equal(mprotect(p, 4096, PROT_READ | PROT_EXEC), 0);
    return p;
}

/* thunk(fn, arg, fake_rbp): push rbp; mov rbp,rdx; mov rax,rdi; mov rdi,rsi;
 * call rax; pop rbp; ret. The callee sees a frame pointer chosen by the
 * caller, as frame-pointer-less code that keeps a stack address in rbp. */
static const unsigned char fake_rbp_thunk[] = {0x55, 0x48, 0x89, 0xd5, 0x48, 0x89, 0xf8, 0x48,
                                               0x89, 0xf7, 0xff, 0xd0, 0x5d, 0xc3};
typedef void (*thunk_fn)(void (*fn)(void *), void *arg, void *fake_rbp);

NOINLINE static void fake_rbp_callback(void *arg)
{
    walker(*(unsigned *)arg);
}

NOINLINE static void vm_calls_with_fake_rbp(unsigned flags)
{
    static thunk_fn thunk;
    if (!thunk)
        thunk = (thunk_fn)exec_copy(fake_rbp_thunk, sizeof fake_rbp_thunk);
    crawl_transition t;
    crawl_transition_push(&t, NULL);
    /* rbp = this function's own frame pointer: the next fast step lands in
     * this function's caller, skipping this function */
    thunk(fake_rbp_callback, &flags, __builtin_frame_address(0));
    crawl_frame_pop(&t.frame);
}

static void test_fast_step_over_transition_pusher(void **state)
{
    (void)state;
    reset();
    vm_calls_with_fake_rbp(CRAWL_WALK_FAST);
    t_name(&T);
    EXPECT(T.st == CRAWL_WALK_DONE);
    int tr = t_find(&T, "[transition]", 0);
    EXPECT(tr > 0 && (T.r[tr].flags & CRAWL_CF_AFTER_GAP));
    EXPECT(strcmp(T.r[tr + 1].name, "vm_calls_with_fake_rbp") == 0);
    EXPECT(strcmp(T.r[tr + 2].name, "test_fast_step_over_transition_pusher") == 0);
    t_check_order(&T);
}

/* ---- JIT code whose last instruction is a call ------------------------------------ */

/* push rbp; xor ebp,ebp; mov rax,rdi; mov rdi,rsi; call rax | pop rbp; ret */
static const unsigned char jit_bytes[] = {0x55, 0x31, 0xed, 0x48, 0x89, 0xf8, 0x48,
                                          0x89, 0xf7, 0xff, 0xd0, 0x5d, 0xc3};
typedef void (*jit_fn)(void (*fn)(void *), void *arg);

NOINLINE static void vm_calls_jit_ending_in_call(unsigned flags, jit_fn code)
{
    crawl_transition t;
    crawl_transition_push(&t, NULL);
    code(fake_rbp_callback, &flags);
    crawl_frame_pop(&t.frame);
}

static void test_jit_range_ending_with_a_call(void **state)
{
    (void)state;
    jit_fn code = (jit_fn)exec_copy(jit_bytes, sizeof jit_bytes);
    uintptr_t start = (uintptr_t)code;
    crawl_unwind_rule rule = {.kind = CRAWL_UNWIND_FIXED_FRAME, .frame_size = 16,
                              .saved_fp_offset = -16};
    /* the range ends right after `call rax`: the return address is its end */
    assert_int_equal(crawl_code_range_add(start, start + 11, "m", &rule, "jit:ends-in-call"), 0);
    static const unsigned modes[2] = {0, CRAWL_WALK_FAST};
    for (int m = 0; m < 2; m++) {
        reset();
        vm_calls_jit_ending_in_call(modes[m], code);
        t_name(&T);
        EXPECT(T.r[2].kind == CRAWL_CF_JIT && T.r[2].ip == start + 11);
        EXPECT(strcmp(T.r[3].name, "[transition]") == 0 && !(T.r[3].flags & CRAWL_CF_AFTER_GAP));
    }
    assert_int_equal(crawl_code_range_remove(start), 0);
}

/* ---- a signal stack above the thread's stack ---------------------------------------- */

static unsigned alt_flags;
static void on_usr1(int sig)
{
    (void)sig;
    walker(alt_flags);
}

NOINLINE static void raise_it(void)
{
    label_frame l = {.label = "before-signal"};
    crawl_frame_push(&l.frame, &t_label_type);
    raise(SIGUSR1);
    crawl_frame_pop(&l.frame);
}

static void *alt_thread(void *arg)
{
    stack_t *ss = arg;
    sigaltstack(ss, NULL);
    static const unsigned modes[2] = {0, CRAWL_WALK_FAST};
    for (int m = 0; m < 2; m++) {
        reset();
        alt_flags = modes[m];
        raise_it();
        t_name(&T);
        EXPECT(T.st == CRAWL_WALK_DONE);
        EXPECT(strcmp(T.r[0].name, "walker") == 0 && strcmp(T.r[1].name, "on_usr1") == 0);
        int l = t_find(&T, "before-signal", 0);
        EXPECT(l > 1);
        if (m == 0) /* precise: right before the function that pushed it */
            EXPECT(strcmp(T.r[l + 1].name, "raise_it") == 0);
    }
    crawl_thread_detach();
    return NULL;
}

static void test_signal_stack_above_thread_stack(void **state)
{
    (void)state;
    size_t alt_size = 256 * 1024, stack_size = 1 << 20;
    /* mmap hands out addresses downwards: the first mapping lies higher */
    char *alt = mmap(NULL, alt_size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    char *stk = mmap(NULL, stack_size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    assert_true(alt != MAP_FAILED && stk != MAP_FAILED);
    if (alt < stk) {
        char *t = alt;                   /* keep the signal stack the higher one */
        alt = stk;
        stk = t;
    }
    stack_t ss = {.ss_sp = alt, .ss_size = alt_size};
    struct sigaction sa = {.sa_handler = on_usr1, .sa_flags = SA_ONSTACK}, old;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGUSR1, &sa, &old);
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstack(&attr, stk, stack_size);
    pthread_t t;
    assert_int_equal(pthread_create(&t, &attr, alt_thread, &ss), 0);
    pthread_join(t, NULL);
    pthread_attr_destroy(&attr);
    sigaction(SIGUSR1, &old, NULL);
    munmap(alt, alt_size);
    munmap(stk, stack_size);
}

/* ---- a handler that pushes Frames, then walks the context it interrupted ------------- */

static uintptr_t ctx_trap_pc;
static void on_ill(int sig, siginfo_t *si, void *ucv)
{
    (void)sig, (void)si;
    ucontext_t *uc = ucv;
    label_frame mine = {.label = "handler-frame"};
    crawl_frame_push(&mine.frame, &t_label_type);
    T.st = crawl_walk_context(uc, t_record, &T, alt_flags);
    crawl_frame_pop(&mine.frame);
    uc->uc_mcontext.gregs[REG_RIP] += 2;
}

NOINLINE static void not_a_leaf(void)
{
    __asm__ volatile("" ::: "memory");
}

/* not a leaf, so its frame pointer is set up before the trap */
NOINLINE static void trap_here(void)
{
    __asm__ volatile("lea 0f(%%rip), %0\n\t0: ud2" : "=r"(ctx_trap_pc));
    not_a_leaf();
}

NOINLINE static void ctx_victim(void)
{
    label_frame l = {.label = "script:main"};
    crawl_frame_push(&l.frame, &t_label_type);
    trap_here();
    crawl_frame_pop(&l.frame);
}

static void test_context_walk_skips_handler_frames(void **state)
{
    (void)state;
    static char alt[256 * 1024];
    static const unsigned modes[2] = {0, CRAWL_WALK_FAST};
    for (int use_alt = 0; use_alt < 2; use_alt++) {
        stack_t ss = {.ss_sp = alt, .ss_size = sizeof alt}, old_ss;
        if (use_alt)
            sigaltstack(&ss, &old_ss);
        struct sigaction sa = {.sa_sigaction = on_ill,
                               .sa_flags = SA_SIGINFO | (use_alt ? SA_ONSTACK : 0)}, old;
        sigemptyset(&sa.sa_mask);
        sigaction(SIGILL, &sa, &old);
        for (int m = 0; m < 2; m++) {
            reset();
            alt_flags = modes[m];
            ctx_victim();
            t_name(&T);
            EXPECT(T.st == CRAWL_WALK_DONE);
            EXPECT(T.r[0].ip == ctx_trap_pc && strcmp(T.r[0].name, "trap_here") == 0);
            EXPECT(t_find(&T, "handler-frame", 0) < 0);
            int l = t_find(&T, "script:main", 0);
            EXPECT(l > 0 && strcmp(T.r[l + 1].name, "ctx_victim") == 0);
        }
        sigaction(SIGILL, &old, NULL);
        if (use_alt)
            sigaltstack(&old_ss, NULL);
    }
}

/* ---- fork() while other threads hold crawl's locks ------------------------------------ */

static volatile int churn_stop;
static void *churn(void *arg)
{
    (void)arg;
    crawl_unwind_rule fp = {.kind = CRAWL_UNWIND_FRAME_POINTER};
    char buf[256];
    crawl_symbol s;
    for (unsigned i = 0; !churn_stop; i++) {
        uintptr_t base = 0x300000 + (uintptr_t)(i % 32) * 0x1000;
        if (crawl_code_range_add(base, base + 0x100, NULL, &fp, NULL) == 0)
            crawl_code_range_remove(base);
        crawl_symbolize((uintptr_t)churn + 4, &s, buf, sizeof buf);
        crawl_walk(t_record, &(trace){0}, CRAWL_WALK_FAST);
    }
    return NULL;
}

static int child_uses_locks(void)
{
    crawl_unwind_rule fp = {.kind = CRAWL_UNWIND_FRAME_POINTER};
    char buf[256];
    crawl_symbol s;
    return crawl_code_range_add(0x900000, 0x900100, NULL, &fp, NULL) == 0 &&
           crawl_code_range_remove(0x900000) == 0 &&
           crawl_symbolize((uintptr_t)churn + 4, &s, buf, sizeof buf) == 0;
}

static void test_fork_while_locks_are_held(void **state)
{
    (void)state;
    churn_stop = 0;
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, churn, NULL), 0);
    int hung, failed;
    t_fork_children(100, child_uses_locks, &hung, &failed);
    churn_stop = 1;
    pthread_join(t, NULL);
    assert_int_equal(hung, 0);
    assert_int_equal(failed, 0);
}

int main(void)
{
    crawl_thread_attach();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_walk_at_every_instruction_of_push),
        cmocka_unit_test(test_fast_step_over_transition_pusher),
        cmocka_unit_test(test_jit_range_ending_with_a_call),
        cmocka_unit_test(test_signal_stack_above_thread_stack),
        cmocka_unit_test(test_context_walk_skips_handler_frames),
        cmocka_unit_test(test_fork_while_locks_are_held),
    };
    return cmocka_run_group_tests_name("edges", tests, NULL, NULL);
}
