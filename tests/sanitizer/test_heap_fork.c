/* fork() while other threads allocate, free and report through the
 * checked heap: the child must be able to do all three (the sanitizer's
 * locks are taken across fork, so none is left held in the child). */
#define _GNU_SOURCE
#include "../support.h"

#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

static volatile int stop;
static unsigned long seen;

static void count_report(const char *text, void *ctx)
{
    (void)text, (void)ctx;
    __atomic_add_fetch(&seen, 1, __ATOMIC_RELAXED);
}

static void *churn(void *arg)
{
    (void)arg;
    while (!stop) {
        char *p = crawl_heap_malloc(64);
        crawl_heap_check(p + 64, 1, 0);  /* a report (halt_on_error=0) */
        crawl_heap_free(p);
    }
    return NULL;
}

static void test_fork_under_heap_traffic(void **state)
{
    (void)state;
    pthread_t t[2];
    for (int i = 0; i < 2; i++)
        assert_int_equal(pthread_create(&t[i], NULL, churn, NULL), 0);
    int hung = 0, failed = 0;
    for (int i = 0; i < 60; i++) {
        pid_t pid = fork();
        if (pid == 0) {
            alarm(10);
            char *p = crawl_heap_malloc(32);
            unsigned long before = seen;
            int ok = p && crawl_heap_check(p + 32, 1, 0) == 1 && seen == before + 1;
            crawl_heap_free(p);
            ok = ok && crawl_sanitizer_set_options("malloc_context_size=20") == 0;
            _exit(ok ? 0 : 3);
        }
        int status;
        assert_int_equal(waitpid(pid, &status, 0), pid);
        if (WIFSIGNALED(status) && WTERMSIG(status) == SIGALRM)
            hung++;
        else if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
            failed++;
    }
    stop = 1;
    for (int i = 0; i < 2; i++)
        pthread_join(t[i], NULL);
    print_message("60 forks: %d children hung, %d failed; %lu reports in the parent\n", hung,
                  failed, seen);
    assert_int_equal(hung, 0);
    assert_int_equal(failed, 0);
}

int main(void)
{
    crawl_thread_attach();
    crawl_set_report_callback(count_report, NULL);
    if (crawl_sanitizer_set_options("halt_on_error=0:log_path=/dev/null") != 0)
        return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fork_under_heap_traffic),
    };
    return cmocka_run_group_tests_name("heap-fork", tests, NULL, NULL);
}
