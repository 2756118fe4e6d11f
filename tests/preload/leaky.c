/* Planted leaks for the preload's leak check (tests/preload/heap.sh):
 * a list kept by a global (reachable, not a leak), a list whose head is
 * dropped (1 direct + 3 indirect leaks), a buffer dropped in leak_direct
 * (a direct leak), and a string freed (gone). */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <signal.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

struct node {
    struct node *next;
    char pad[24];
};
void *keep;

__attribute__((noinline)) static void *make_list(int n)
{
    struct node *head = NULL;
    for (int i = 0; i < n; i++) {
        struct node *x = malloc(sizeof *x);
        x->next = head;
        head = x;
    }
    return head;
}

__attribute__((noinline)) static void *kept_list(void) { return make_list(3); }
__attribute__((noinline)) static void lost_list(void)
{
    volatile void *lost = make_list(4);
    lost = NULL;
    (void)lost;
}

__attribute__((noinline)) static void leak_direct(void)
{
    char *volatile p = malloc(100);
    memset(p, 1, 100);
    p = NULL;
}

__attribute__((noinline)) static void scrub(void)
{
    volatile char junk[16384];
    explicit_bzero((char *)junk, sizeof junk);   /* not a dead store to optimize away */
}

/* "map": mapped regions for heap_profile_mmap=1: 4 pages, one of them
 * unmapped again; 2 pages grown to 5 by mremap (wherever it moves); and 1
 * page unmapped whole. Live at exit: 8 pages in 3 regions, all mapped by
 * map_pages. */
void *mapped[3];

__attribute__((noinline)) static void *map_pages(size_t n)
{
    void *p = mmap(NULL, n * (size_t)getpagesize(), PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        exit(4);
    return p;
}

static void map_regions(void)
{
    size_t pg = (size_t)getpagesize();
    mapped[0] = map_pages(4);
    munmap((char *)mapped[0] + pg, pg);
    mapped[1] = mremap(map_pages(2), 2 * pg, 5 * pg, MREMAP_MAYMOVE);
    if (mapped[1] == MAP_FAILED)
        exit(5);
    mapped[2] = map_pages(1);
    munmap(mapped[2], pg);
}

/* "signal FILE": ask for a profile with SIGUSR2 (heap_profile_signal=12)
 * and wait until FILE is written, before anything is freed. */
static void dump_and_wait(const char *file)
{
    kill(getpid(), SIGUSR2);
    for (int i = 0; i < 500; i++) {
        struct stat st;
        if (stat(file, &st) == 0 && st.st_size > 0)
            return;
        usleep(10000);
    }
    fprintf(stderr, "leaky: %s not written\n", file);
    exit(3);
}

int main(int argc, char **argv)
{
    keep = kept_list();
    lost_list();
    leak_direct();
    if (argc == 3 && strcmp(argv[1], "signal") == 0)
        dump_and_wait(argv[2]);
    if (argc == 2 && strcmp(argv[1], "map") == 0)
        map_regions();
    char *s = strdup("hello");
    puts(s);
    free(s);
    scrub();
    return 0;
}
