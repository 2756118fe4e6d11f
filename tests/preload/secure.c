/* The preload in a set-uid program: linked against libcrawl-preload.so (as
 * LD_PRELOAD is refused there by the loader, /etc/ld.so.preload or a link
 * is how it would get in), with gpa_sample_rate=1 it samples every
 * allocation -- unless the process runs with AT_SECURE (set-uid/set-gid),
 * where the preload must pass every call to glibc. CRAWL_OPTIONS is not
 * read in such a process, so the rate is set by the program itself (the
 * refusal is the preload's, not the options'). Prints how many of 100
 * allocations went to the pool. */
#include <stdio.h>
#include <stdlib.h>
#include <sys/auxv.h>

#include <crawl/guarded.h>
#include <crawl/sanitizer.h>

int main(void)
{
    if (crawl_sanitizer_set_options("gpa_sample_rate=1") != 0)
        return 2;
    /* the thread's countdown (started at the default rate before main)
     * picks the new rate up when it runs out: within 2 x 5000 calls */
    for (int i = 0; i < 10001; i++) {
        void *volatile p = malloc(32);   /* volatile: the pair is not elided */
        free(p);
    }
    int sampled = 0;
    for (int i = 0; i < 100; i++) {
        void *p = malloc(32);
        sampled += crawl_gpa_owns(p);
        free(p);
    }
    printf("secure=%lu sampled=%d\n", getauxval(AT_SECURE), sampled);
    return 0;
}
