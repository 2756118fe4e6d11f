/* Under the preload with heap_profile=1: each thread's first allocations
 * are made inside pthread_getattr_np (as Boehm's GC_init and thread
 * registration do), where glibc holds the thread's lock: recording them
 * attached the thread, which calls pthread_getattr_np again, and the
 * process waited for ever (crawlvm --heap-profile -e 1 hung in GC_init).
 * Prints the stack sizes and "ok"; ctest's timeout catches the hang. A
 * later allocation of each thread is recorded with its stack. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include <crawl/heap_profile.h>

static size_t stack_size(void)
{
    pthread_attr_t attr;
    void *addr;
    size_t size = 0;
    if (pthread_getattr_np(pthread_self(), &attr) != 0)
        return 0;
    pthread_attr_getstack(&attr, &addr, &size);
    pthread_attr_destroy(&attr);
    return size;
}

static void *later;

__attribute__((noinline)) static void allocate_later(void)
{
    later = malloc(4000);
    __asm__ volatile("" ::: "memory");
}

static void *thread_main(void *arg)
{
    *(size_t *)arg = stack_size();
    return NULL;
}

int main(void)
{
    size_t main_size = stack_size(), thread_size = 0;
    pthread_t t;
    if (pthread_create(&t, NULL, thread_main, &thread_size) != 0)
        return 2;
    pthread_join(t, NULL);
    allocate_later();
    printf("main %s, thread %s, recording %d\n", main_size ? "sized" : "0",
           thread_size ? "sized" : "0", crawl_heap_profile_active());
    fflush(stdout);
    crawl_heap_profile_write_fd(1, CRAWL_HEAP_FOLDED);
    free(later);
    printf("ok\n");
    return main_size && thread_size ? 0 : 1;
}
