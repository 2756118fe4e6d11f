/* Zeroing the dead stack below the caller, for the conservative scans
 * (Boehm's collections, the leak check): frames built there later keep, in
 * slots they never write, whatever deeper calls left, and a scan takes
 * those stale words for roots. */
#include <string.h>

#include "frames/internal.h"

__attribute__((noinline)) void crawl__clear_stack_below(void)
{
    /* inside this frame, so that a signal handler's frame is never under
     * the zeroing */
    volatile char area[32768];
    explicit_bzero((char *)area, sizeof area);
    __asm__ volatile("" : : "r"(area) : "memory");
}
