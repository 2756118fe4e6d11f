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
/* One number to compare: 0x000100 for 0.1.0. */
#define CRAWL_VERSION_HEX \
    ((CRAWL_VERSION_MAJOR << 16) | (CRAWL_VERSION_MINOR << 8) | CRAWL_VERSION_PATCH)

/* The version of the libcrawl loaded at run time, as CRAWL_VERSION_HEX (the
 * macros say what the program was compiled against). Async-signal-safe,
 * thread-safe, allocates nothing. */
#ifdef __cplusplus
extern "C" {
#endif
CRAWL_API unsigned crawl_version(void);
/* The same as "0.1.0". A static string. Async-signal-safe, thread-safe,
 * allocates nothing. */
CRAWL_API const char *crawl_version_string(void);
#ifdef __cplusplus
}
#endif

/* Errors. Functions that can fail return 0 (or a count, an id, a pointer)
 * on success and a negative errno value on failure (-EINVAL bad arguments,
 * -ENOMEM, -ENOENT nothing there, -ENOSPC a buffer too small...), as libuv
 * does; each declaration says which. Walks return a crawl_walk_status.
 * Misuse that means memory corruption (a Frame popped out of order) stops
 * the process with one "crawl: fatal:" line instead. */

/* Allocators: the result does not alias anything live (malloc), and its
 * size is in the arguments (for __builtin_object_size, -Warray-bounds and
 * _FORTIFY_SOURCE), as Boehm's GC_ATTR_MALLOC / GC_ATTR_ALLOC_SIZE. */
#if defined(__GNUC__) || defined(__clang__)
#define CRAWL_ATTR_MALLOC __attribute__((malloc))
#define CRAWL_ATTR_ALLOC_SIZE(n) __attribute__((alloc_size(n)))
#define CRAWL_ATTR_ALLOC_SIZE2(n, m) __attribute__((alloc_size(n, m)))
#else
#define CRAWL_ATTR_MALLOC
#define CRAWL_ATTR_ALLOC_SIZE(n)
#define CRAWL_ATTR_ALLOC_SIZE2(n, m)
#endif

/* Registers that let a walk resume at a frame (x86-64 System V names).
 * `ip` is a return address unless a crawl_cf says otherwise; bx and r12-r15
 * are the callee-saved registers a precise (DWARF) unwind may need. */
typedef struct crawl_regs {
    uintptr_t ip, sp, fp;
    uintptr_t bx, r12, r13, r14, r15;
} crawl_regs;

#endif
