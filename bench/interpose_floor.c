/* bench/heap_profile's floor: the least an LD_PRELOAD interposer of malloc
 * and free can be, each one indirect jump to glibc's own (__libc_malloc,
 * __libc_free), built -fno-plt so that no PLT stub adds a second.
 * What it costs over glibc alone is the price of interposing at all, which
 * no hook that runs code of its own can come under. */
#include <stddef.h>

extern void *__libc_malloc(size_t n);
extern void __libc_free(void *p);

__attribute__((visibility("default"))) void *malloc(size_t n) { return __libc_malloc(n); }
__attribute__((visibility("default"))) void free(void *p) { __libc_free(p); }
