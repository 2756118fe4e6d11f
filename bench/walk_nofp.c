/* bench/walk's frame-pointer-less half of the mixed recursion: built with
 * -fomit-frame-pointer, like most of a distribution's libraries. */
extern double bench_mix_descend(unsigned level);

__attribute__((noinline)) double bench_mix_nofp(unsigned level)
{
    volatile char pad[24];
    pad[0] = (char)level;
    double r = bench_mix_descend(level);
    __asm__ volatile("" : : "r"(pad) : "memory");
    return r + 1;
}
