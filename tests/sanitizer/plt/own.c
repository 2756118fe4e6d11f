/* A library with an allocator of its own (a bump allocator over a static
 * pool): loaded with RTLD_DEEPBIND, its GOT binds malloc and free to these,
 * not to the process's. A hook that forwarded to the process's free would
 * hand glibc a pointer glibc never gave. */
#include <stddef.h>

static _Alignas(16) char pool[1 << 16];
static size_t used;

void *malloc(size_t n)
{
    n = (n + 15) & ~(size_t)15;
    if (n > sizeof pool - used)
        return NULL;
    void *p = pool + used;
    used += n;
    return p;
}

void free(void *p) { (void)p; }

void *plt_own_alloc(size_t n) { return malloc(n); }
void plt_own_free(void *p) { free(p); }
