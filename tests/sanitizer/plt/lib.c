/* A library for test_plt_hooks, built three times (PLT_NAME a, b, c): it
 * allocates through its PLT and takes malloc's address through its GOT. */
#include <stdlib.h>
#include <string.h>

#define CAT2(a, b) a##b
#define CAT(a, b) CAT2(a, b)
#define FN(x) CAT(CAT(plt_, PLT_NAME), x)

void *FN(_alloc)(size_t n) { return malloc(n); }
char *FN(_dup)(const char *s) { return strdup(s); }
void FN(_free)(void *p) { free(p); }
void *FN(_malloc_address)(void) { return (void *)&malloc; }

#ifdef PLT_WITH_DLOPEN
#include <dlfcn.h>
void *FN(_dlopen)(const char *path, int flags) { return dlopen(path, flags); }
#endif
