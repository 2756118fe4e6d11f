/* Built with -fomit-frame-pointer: rbp is a general register here, and
 * only DWARF CFI can unwind these frames. Each level calls next() after
 * using some stack, so frames differ in size. */
#include <stdint.h>

void nofp_rbp_busy(unsigned depth);

typedef void (*step_fn)(unsigned depth);
extern step_fn cfi_pick(unsigned depth);

__attribute__((noinline)) void nofp_small(unsigned depth)
{
    volatile char pad[8] = {0};
    cfi_pick(depth)(depth - 1);
    __asm__ volatile("" : : "r"(pad) : "memory");
}

__attribute__((noinline)) void nofp_big(unsigned depth)
{
    volatile char pad[200];
    pad[0] = (char)depth;
    cfi_pick(depth)(depth - 1);
    __asm__ volatile("" : : "r"(pad) : "memory");
}

/* void nofp_rbp_busy(unsigned depth): holds a non-stack value in rbp while
 * calling down, as frame-pointer-less code may. Assembly, with exact CFI,
 * so that no compiler flag (a sanitizer's forced frame pointer) changes it. */
__asm__(".text\n"
        ".globl nofp_rbp_busy\n"
        ".type nofp_rbp_busy, @function\n"
        "nofp_rbp_busy:\n"
        ".cfi_startproc\n"
        "pushq %rbp\n"
        ".cfi_def_cfa_offset 16\n"
        ".cfi_offset %rbp, -16\n"
        "pushq %rbx\n"
        ".cfi_def_cfa_offset 24\n"
        ".cfi_offset %rbx, -24\n"
        "subq $8, %rsp\n"
        ".cfi_def_cfa_offset 32\n"
        "movl %edi, %ebx\n"
        "movq $0x12345, %rbp\n"
        "call cfi_pick\n"
        "leal -1(%rbx), %edi\n"
        "call *%rax\n"
        "addq $8, %rsp\n"
        ".cfi_def_cfa_offset 24\n"
        "popq %rbx\n"
        ".cfi_def_cfa_offset 16\n"
        "popq %rbp\n"
        ".cfi_def_cfa_offset 8\n"
        "ret\n"
        ".cfi_endproc\n"
        ".size nofp_rbp_busy, .-nofp_rbp_busy\n");
