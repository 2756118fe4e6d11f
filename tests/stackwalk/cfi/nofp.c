/* Built with -fomit-frame-pointer: rbp is a general register here, and
 * only DWARF CFI can unwind these frames. Each level calls next() after
 * using some stack, so frames differ in size. */
#include <stdint.h>

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

/* clobbers rbp with a non-stack value while calling down */
__attribute__((noinline)) void nofp_rbp_busy(unsigned depth)
{
    uintptr_t saved;
    __asm__ volatile("mov %%rbp, %0\n\tmov $0x12345, %%rbp" : "=r"(saved));
    cfi_pick(depth)(depth - 1);
    __asm__ volatile("mov %0, %%rbp" : : "r"(saved));
}
