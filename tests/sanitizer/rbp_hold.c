/* Built -O2 -fomit-frame-pointer (tests/CMakeLists.txt), as a host's code
 * usually is: rbp is an ordinary register here. */
#include "rbp_hold.h"

#if defined(__clang__)
#define KEEP __attribute__((noinline))
#else
#define KEEP __attribute__((noinline, noclone))
#endif

KEEP void rbp_hold(void *p, void (*fn)(void))
{
    register void *keep __asm__("rbp") = p;
    __asm__ volatile("" : "+r"(keep));
    fn();
    __asm__ volatile("" : : "r"(keep));
}

KEEP void rbp_spin(void *p, volatile int *holding, volatile int *go)
{
    register void *keep __asm__("rbp") = p;
    __asm__ volatile("" : "+r"(keep));
    *holding = 1;
    while (!*go)
        __asm__ volatile("pause");
    __asm__ volatile("" : : "r"(keep));
}
