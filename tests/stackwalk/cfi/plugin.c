/* Built twice into two shared libraries with different frame sizes (PAD),
 * loaded, unloaded and replaced by the CFI cache test: the second, loaded
 * where the first was, must never be unwound by the first's rules. */
#ifndef PAD
#define PAD 16
#endif
__attribute__((noinline)) void plugin_call(void (*fn)(void))
{
    volatile char pad[PAD];
    pad[0] = 1;
    fn();
    __asm__ volatile("" : : "r"(pad) : "memory");
}
