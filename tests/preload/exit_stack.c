/* Roots at exit. The check at exit runs from inside exit's own frames
 * (__run_exit_handlers, _dl_fini, __cxa_finalize...), which are made
 * where the program's calls have been and leave slots unwritten: a stale
 * copy of a leaked chunk's address there hid the leak (a change of the
 * preload's frame layout once made test_preload_o2_host's second leak
 * vanish so). The frames of the caller of exit are roots all the same.
 * usage: preload_exit_stack smear | deep | register
 *   smear: leaks 33 bytes after writing copies of its address over the
 *          stack below main; returns from main. Expected: the leak.
 *   deep:  calls exit from a function whose frame holds a 44-byte chunk
 *          (and a register, through a call), and leaks 22 bytes. Expected:
 *          the 22-byte leak only.
 *   register: calls exit with an 88-byte chunk's address in rbx alone,
 *          and leaks 22 bytes. Expected: the 22-byte leak only. */
#include <stdlib.h>
#include <string.h>

__attribute__((noinline)) static void smear(void *p)
{
    void *volatile copies[4096];
    for (int i = 0; i < 4096; i++)
        copies[i] = p;
    __asm__ volatile("" : : "r"(copies) : "memory");
}

__attribute__((noinline)) static void leak(size_t n)
{
    char *volatile p = malloc(n);
    memset(p, 1, n);
    p = NULL;
}

/* (read at run time: a constant argument would make GCC clone leak() as
 * leak.constprop.0, the name the report shows) */
static volatile size_t leak_size = 22;

__attribute__((noinline)) static void deep_exit(void)
{
    void *volatile keep = malloc(44);
    memset(keep, 2, 44);
    leak(leak_size);
    exit(0);
}

/* exit called with a chunk's address in rbx only: a callee-saved register,
 * which exit's own frames save (the check takes the caller's registers as
 * libunwind recovers them) */
__attribute__((noinline)) static void register_exit(void)
{
    void *p = malloc(88);
    memset(p, 4, 88);
    leak(leak_size);
    __asm__ volatile("mov %0, %%rbx\n\tcall exit@PLT" : : "r"(p), "D"(0) : "rbx", "memory");
    __builtin_unreachable();
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "deep") == 0)
        deep_exit();
    if (argc > 1 && strcmp(argv[1], "register") == 0)
        register_exit();
    char *volatile p = malloc(33);
    memset(p, 3, 33);
    smear(p);
    p = NULL;
    return 0;
}
