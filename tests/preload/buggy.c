/* A deliberately buggy program for the preload test: reads a heap block
 * after freeing it. Built without crawl; run under libcrawl-preload.so. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

__attribute__((noinline)) static char *make_name(void)
{
    char *s = malloc(16);
    strcpy(s, "crawl");
    return s;
}

__attribute__((noinline)) static void drop(char *s) { free(s); }

__attribute__((noinline)) static int use(const char *s) { return s[0]; }

int main(void)
{
    char *name = make_name();
    drop(name);
    printf("%d\n", use(name));           /* use after free */
    return 0;
}
