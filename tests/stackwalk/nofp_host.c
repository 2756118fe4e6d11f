/* A host built like a default distribution build: -O2 and no frame-pointer
 * flags (CMake gives this file "-O2;-fomit-frame-pointer"), so rbp is a
 * general register here and only DWARF CFI can unwind these frames.
 *
 *   host_sort -> qsort (libc) -> c_cmp -> burn
 *
 * c_cmp keeps a Frame of type "cmp" in its own stack frame and calls burn,
 * a frameless leaf that spins: a profiler's samples land in burn with the
 * Frame one native frame up. noinline/noclone and asm barriers keep the
 * shape whatever the optimiser thinks of it. */
#include <crawl/crawl.h>
#include <stdlib.h>

#include "nofp_host.h"

/* clang has no noclone (and does not clone these) */
#if defined(__clang__)
#define KEEP __attribute__((noinline))
#else
#define KEEP __attribute__((noinline, noclone))
#endif

const crawl_frame_type nofp_cmp_type = {.name = "cmp"};

volatile unsigned long nofp_burn_iterations = 20000;
_Thread_local volatile unsigned long nofp_burn_sink;   /* per thread: no race */

KEEP unsigned long burn(unsigned long n)
{
    unsigned long x = n;
    for (unsigned long i = 0; i < n; i++) {
        x = x * 6364136223846793005ul + i;
        __asm__ volatile("" : "+r"(x)); /* no vectorising, no folding */
    }
    return x;
}

KEEP int c_cmp(const void *a, const void *b)
{
    crawl_frame f;
    crawl_frame_push(&f, &nofp_cmp_type);
    nofp_burn_sink += burn(nofp_burn_iterations);
    crawl_frame_pop(&f);
    __asm__ volatile("" : : "r"(&f) : "memory");
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

KEEP void host_sort(int *v, size_t n)
{
    qsort(v, n, sizeof v[0], c_cmp);
    __asm__ volatile("" : : "r"(v) : "memory");
}

/* ---- junk in rbp ------------------------------------------------------------------
 * void junk_call(uintptr_t rbp_value, void (*fn)(void *), void *arg):
 * calls fn(arg) with rbp = rbp_value, as frameless code that uses rbp for
 * data may. Assembly without CFI, so that nothing (frame pointers, DWARF,
 * libunwind's guesses) can unwind it honestly: a walk from fn must stop
 * here and resume at the caller's transition Frame. */
__asm__(".text\n"
        ".globl junk_call\n"
        ".type junk_call, @function\n"
        "junk_call:\n"
        "pushq %rbp\n"
        "pushq %rbx\n"
        "subq $8, %rsp\n"
        "movq %rdi, %rbp\n"
        "movq %rdx, %rdi\n"
        "call *%rsi\n"
        ".globl junk_call_ret\n"
        "junk_call_ret:\n"
        "addq $8, %rsp\n"
        "popq %rbx\n"
        "popq %rbp\n"
        "ret\n"
        ".size junk_call, .-junk_call\n");
