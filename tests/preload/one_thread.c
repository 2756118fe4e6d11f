/* The sampled heap profile while the process has one thread
 * (CRAWL__HOOK_SAMPLED_ONE: malloc counts bytes down in a word of the
 * preload's own), and its end at the second thread: through the preload's
 * pthread_create, the count goes on in the thread's crawl__hp_countdown
 * (no sample early or late); through glibc's own (a thread glibc makes
 * itself), the next slow path ends it. Each case in a child of its own:
 * the end is for good. Linked against libcrawl-preload.so, run with
 * CRAWL_OPTIONS=heap_profile=1:heap_sample_bytes=1000000000:
 * gpa_sample_rate=0. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/single_threaded.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include <crawl/heap_profile.h>
#include <crawl/sanitizer.h>

#include "../heap_live.h"

long *crawl__preload_countdown(void);

static void *nothing(void *arg) { return arg; }

static void *opaque_malloc(size_t n)
{
    void *p = malloc(n);
    __asm__ volatile("" : "+r"(p) : : "memory");   /* (not elided with its free) */
    return p;
}

/* fn in a child of its own: its exit status, 0 when every check held,
 * else the line of the first that did not */
static void in_child(int (*fn)(void))
{
    pid_t child = fork();
    assert_true(child >= 0);
    if (child == 0)
        _exit(fn());
    int status;
    assert_int_equal(waitpid(child, &status, 0), child);
    assert_true(WIFEXITED(status));
    if (WEXITSTATUS(status))
        print_message("the check at line %d failed\n", WEXITSTATUS(status));
    assert_int_equal(WEXITSTATUS(status), 0);
}

#define CHECK(c)                                                                               \
    do {                                                                                       \
        if (!(c))                                                                              \
            return __LINE__;             /* (this file is under 256 lines) */                   \
    } while (0)

/* one sample every 1e9 bytes: 10 allocations of 100 start the count (the
 * thread's first run-out only draws) and take 1010 off it, in the
 * preload's word; the thread made next finds the rest in the main
 * thread's crawl__hp_countdown (less what glibc's pthread_create
 * allocates), and no sample was taken for the switch */
static int carried_to_the_thread(void)
{
    CHECK(__libc_single_threaded);
    CHECK(crawl__hook_kind == CRAWL__HOOK_SAMPLED_ONE);
    CHECK(crawl__preload_countdown() != &crawl__hp_countdown);
    for (int i = 0; i < 10; i++)
        free(opaque_malloc(100));
    long word = *crawl__preload_countdown();
    CHECK(word > 0);
    size_t live = live_objects();
    pthread_t t;
    CHECK(pthread_create(&t, NULL, nothing, NULL) == 0);
    CHECK(pthread_join(t, NULL) == 0);
    CHECK(crawl__hook_kind == CRAWL__HOOK_SAMPLED);
    CHECK(crawl__preload_countdown() == &crawl__hp_countdown);
    long now = crawl__hp_countdown;
    CHECK(now <= word && now > word - 65536);
    CHECK(live_objects() == live);       /* (a count started again would sample at once) */
    free(opaque_malloc(100));            /* from the thread's word now */
    CHECK(crawl__hp_countdown == now - 101);
    return 0;
}

static void test_carried_to_the_thread(void **state)
{
    (void)state;
    in_child(carried_to_the_thread);
}

/* A thread made by glibc's pthread_create itself (as timer_create's
 * SIGEV_THREAD helper is) passes the preload by: the kind stays until the
 * next slow path, which sees glibc's word and ends it. Sampling every 64
 * bytes, so that the next malloc of 200 takes one. */
static int thread_glibc_made(void)
{
    crawl_heap_profile_stop();
    CHECK(crawl_sanitizer_set_options("heap_sample_bytes=64") == 0);
    CHECK(crawl_heap_profile_start() == 0);
    CHECK(crawl__hook_kind == CRAWL__HOOK_SAMPLED_ONE);
    void *libc = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);
    CHECK(libc != NULL);
    int (*glibc_create)(pthread_t *, const pthread_attr_t *, void *(*)(void *), void *) =
        (int (*)(pthread_t *, const pthread_attr_t *, void *(*)(void *), void *))dlsym(
            libc, "pthread_create");
    CHECK(glibc_create != NULL && glibc_create != pthread_create);
    pthread_t t;
    CHECK(glibc_create(&t, NULL, nothing, NULL) == 0);
    CHECK(pthread_join(t, NULL) == 0);
    CHECK(!__libc_single_threaded);
    /* (nothing told crawl; glibc's calloc of the thread's TLS vector, a
     * slow path under every kind, may have ended it already) */
    for (int i = 0; i < 4; i++)
        free(opaque_malloc(200));
    CHECK(crawl__hook_kind == CRAWL__HOOK_SAMPLED);
    CHECK(crawl__preload_countdown() == &crawl__hp_countdown);
    dlclose(libc);
    return 0;
}

static void test_thread_glibc_made(void **state)
{
    (void)state;
    in_child(thread_glibc_made);
}

/* every allocation recorded, or the pool on: never the preload's word */
static int other_modes_keep_their_kinds(void)
{
    crawl_heap_profile_stop();
    CHECK(crawl_sanitizer_set_options("heap_sample_bytes=0") == 0);
    CHECK(crawl_heap_profile_start() == 0);
    CHECK(crawl__hook_kind == CRAWL__HOOK_SLOW);
    crawl_heap_profile_stop();
    CHECK(crawl_sanitizer_set_options("heap_sample_bytes=4096:gpa_sample_rate=100") == 0);
    CHECK(crawl_heap_profile_start() == 0);
    CHECK(crawl__hook_kind == CRAWL__HOOK_BOTH);
    return 0;
}

static void test_other_modes_keep_their_kinds(void **state)
{
    (void)state;
    in_child(other_modes_keep_their_kinds);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_carried_to_the_thread),
        cmocka_unit_test(test_thread_glibc_made),
        cmocka_unit_test(test_other_modes_keep_their_kinds),
    };
    return cmocka_run_group_tests_name("preload_one_thread", tests, NULL, NULL);
}
