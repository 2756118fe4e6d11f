/* A library for test_plt_hooks, built five times (PLT_NAME a to e): it
 * allocates and maps through its PLT and takes malloc's and mmap's
 * addresses through its GOT. */
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define CAT2(a, b) a##b
#define CAT(a, b) CAT2(a, b)
#define FN(x) CAT(CAT(plt_, PLT_NAME), x)

void *FN(_alloc)(size_t n) { return malloc(n); }
char *FN(_dup)(const char *s) { return strdup(s); }
void FN(_free)(void *p) { free(p); }
void *FN(_realloc)(void *p, size_t n) { return realloc(p, n); }
void *FN(_malloc_address)(void) { return (void *)&malloc; }
void *FN(_map)(size_t n)
{
    return mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
}
int FN(_unmap)(void *p, size_t n) { return munmap(p, n); }
void *FN(_mmap_address)(void) { return (void *)&mmap; }

#ifdef PLT_WITH_DLOPEN
#include <dlfcn.h>
void *FN(_dlopen)(const char *path, int flags) { return dlopen(path, flags); }
#endif
