/* The thread registry when a thread's exit goes unseen: a thread wipes
 * every pthread key's value (crawl's too, so its exit key's destructor
 * never runs) and exits; a new thread on the same stack, and TLS, then
 * attaches. With the registry's links in the TLS, the new thread's zeros
 * and its neighbours' unlinks wrote over live links: a cycle (the dump and
 * the leak check spun for ever) or live threads dropped from the list
 * (found by a review). Each step checks the attached threads a dump
 * lists, by number. */
#define _GNU_SOURCE
#include "../support.h"

#if defined(__SANITIZE_THREAD__)
#define CRAWL_UNDER_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define CRAWL_UNDER_TSAN 1
#endif
#endif

#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static pthread_barrier_t bar[8];
static pthread_t self_of[8];

/* "T0 T1 ..." of a dump of every attached thread */
static void listed(char *out, size_t len)
{
    static char buf[1 << 16];
    int p[2];
    assert_int_equal(pipe(p), 0);
    crawl_print_all_threads(p[1], 0);
    close(p[1]);
    ssize_t k = read(p[0], buf, sizeof buf - 1);
    close(p[0]);
    buf[k > 0 ? k : 0] = '\0';
    out[0] = '\0';
    for (char *l = strtok(buf, "\n"); l; l = strtok(NULL, "\n")) {
        const char *t = l[0] == '"' ? strstr(l, "\" T") : NULL;
        if (t) {
            size_t n = strlen(out);
            snprintf(out + n, len - n, "%s%.*s", n ? " " : "", (int)strcspn(t + 2, " "), t + 2);
        }
    }
}

static void *alive(void *arg)
{
    crawl_thread_attach();
    self_of[(long)arg] = pthread_self();
    pthread_barrier_wait(&bar[(long)arg]);   /* started */
    pthread_barrier_wait(&bar[(long)arg]);   /* let go */
    return NULL;
}

static void *unseen(void *arg)
{
    crawl_thread_attach();
    self_of[(long)arg] = pthread_self();
    for (pthread_key_t k = 0; k < 1024; k++)
        pthread_setspecific(k, NULL);    /* (EINVAL for keys never made) */
    return NULL;
}

static void start(void *(*fn)(void *), long i, size_t stack_mib)
{
    pthread_attr_t at;
    pthread_attr_init(&at);
    pthread_attr_setstacksize(&at, stack_mib << 20);
    pthread_t t;
    assert_int_equal(pthread_create(&t, &at, fn, (void *)i), 0);
    pthread_attr_destroy(&at);
    if (fn == alive)
        pthread_barrier_wait(&bar[i]);
    else
        assert_int_equal(pthread_join(t, NULL), 0);
}

static void let_go(long i, pthread_t t)
{
    pthread_barrier_wait(&bar[i]);
    assert_int_equal(pthread_join(t, NULL), 0);
}

static void test_unseen_exits(void **state)
{
    (void)state;
#if defined(CRAWL_UNDER_TSAN)
    skip();                              /* (wiping every key's value wipes TSan's own too) */
#endif
    crawl_thread_attach();
    for (int i = 0; i < 8; i++)
        pthread_barrier_init(&bar[i], NULL, 2);
    char have[512];
    /* (stack sizes of their own, so that glibc hands each stack on to the
     * thread meant to reuse it) */
    start(unseen, 1, 8);                 /* S1, gone unseen */
    start(alive, 2, 64);                 /* N */
    start(unseen, 3, 16);                /* S3, gone unseen */
    start(alive, 4, 128);                /* X */
    start(alive, 5, 16);                 /* A, on S3's stack */
    start(alive, 6, 8);                  /* Z, on S1's stack */
    if (!pthread_equal(self_of[5], self_of[3]) || !pthread_equal(self_of[6], self_of[1]))
        skip();                          /* (glibc did not reuse the stacks: nothing to test) */
    unsigned n0 = (unsigned)crawl_thread_number();
    char want[512];
    listed(have, sizeof have);
    /* main, N, X, A, Z (the dump lists them by number); S1 and S3 gone */
    snprintf(want, sizeof want, "T%u T%u T%u T%u T%u", n0, n0 + 2, n0 + 4, n0 + 5, n0 + 6);
    assert_string_equal(have, want);
    let_go(2, self_of[2]);               /* N exits: X, A, Z, main stay */
    listed(have, sizeof have);
    snprintf(want, sizeof want, "T%u T%u T%u T%u", n0, n0 + 4, n0 + 5, n0 + 6);
    assert_string_equal(have, want);
    let_go(4, self_of[4]);               /* X exits */
    listed(have, sizeof have);
    snprintf(want, sizeof want, "T%u T%u T%u", n0, n0 + 5, n0 + 6);
    assert_string_equal(have, want);
    let_go(5, self_of[5]);
    let_go(6, self_of[6]);
    listed(have, sizeof have);
    snprintf(want, sizeof want, "T%u", n0);
    assert_string_equal(have, want);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_unseen_exits),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
