/* A deliberately buggy program for the preload test: reads a heap block
 * after freeing it. Built without crawl; run under libcrawl-preload.so.
 * With "closed", it first closes stderr and opens a file for reading,
 * which takes descriptor 2: the report still reaches the stderr it
 * started with. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

__attribute__((noinline)) static char *make_name(void)
{
    char *s = malloc(16);
    strcpy(s, "crawl");
    return s;
}

__attribute__((noinline)) static void drop(char *s) { free(s); }

__attribute__((noinline)) static int use(const char *s) { return s[0]; }

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "closed") == 0) {
        close(2);
        if (open("/proc/self/cmdline", O_RDONLY) != 2)
            return 3;
    }
    char *name = make_name();
    drop(name);
    printf("%d\n", use(name));           /* use after free */
    return 0;
}
