/* crawl — shared definitions for every public header. */
#ifndef CRAWL_COMMON_H
#define CRAWL_COMMON_H

#include <stddef.h>
#include <stdint.h>

/* Every public function carries CRAWL_API; everything else in the library is
 * built with hidden visibility. */
#define CRAWL_API __attribute__((visibility("default")))

#define CRAWL_VERSION_MAJOR 0
#define CRAWL_VERSION_MINOR 1
#define CRAWL_VERSION_PATCH 0

/* Registers that let a walk resume at a frame (x86-64 System V names).
 * `ip` is a return address unless a crawl_cf says otherwise; bx and r12-r15
 * are the callee-saved registers a precise (DWARF) unwind may need. */
typedef struct crawl_regs {
    uintptr_t ip, sp, fp;
    uintptr_t bx, r12, r13, r14, r15;
} crawl_regs;

#endif
