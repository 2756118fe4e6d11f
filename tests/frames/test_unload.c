/* A host that dlopen's libcrawl, attaches a thread, and dlclose's libcrawl
 * before the thread exits: the thread's exit must not call into unmapped
 * code (libcrawl is linked -z nodelete). This program does not link
 * libcrawl. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>

#include <cmocka.h>

static int (*attach)(void);
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cond = PTHREAD_COND_INITIALIZER;
static int stage;

static void wait_for(int s)
{
    pthread_mutex_lock(&lock);
    while (stage < s)
        pthread_cond_wait(&cond, &lock);
    pthread_mutex_unlock(&lock);
}

static void go(int s)
{
    pthread_mutex_lock(&lock);
    stage = s;
    pthread_cond_broadcast(&cond);
    pthread_mutex_unlock(&lock);
}

static void *attached_thread(void *arg)
{
    *(int *)arg = attach();
    go(1);
    wait_for(2);                         /* libcrawl has been dlclose'd */
    return NULL;                         /* runs crawl's thread-exit hook */
}

static void test_dlclose_with_attached_thread(void **state)
{
    (void)state;
    void *h = dlopen(LIBCRAWL, RTLD_NOW | RTLD_LOCAL);
    assert_non_null(h);
    *(void **)&attach = dlsym(h, "crawl_thread_attach");
    assert_non_null(attach);
    int rc = -1;
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, attached_thread, &rc), 0);
    wait_for(1);
    assert_int_equal(rc, 0);
    assert_int_equal(dlclose(h), 0);
    /* still mapped: nodelete */
    assert_non_null(dlopen(LIBCRAWL, RTLD_NOW | RTLD_NOLOAD));
    go(2);
    assert_int_equal(pthread_join(t, NULL), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dlclose_with_attached_thread),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
