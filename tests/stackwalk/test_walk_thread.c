/* Walks of other threads (crawl_walk_thread), thread dumps
 * (crawl_print_all_threads) and the dump on a signal: a stopped worker's
 * Frames come back in order with its native frames around them; a thread
 * that blocks the signal times out; an exited one is -ESRCH. */
#define _GNU_SOURCE
#include "../support.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

typedef struct named_frame {
    crawl_frame frame;
    const char *fn;
} named_frame;

static int nf_describe(const crawl_frame *f, char *buf, size_t len)
{
    return snprintf(buf, len, "script %s", ((const named_frame *)f)->fn);
}
static const void *nf_method(const crawl_frame *f) { return ((const named_frame *)f)->fn; }
static const crawl_frame_type script_type = {
    .name = "script", .flags = CRAWL_FRAME_FUNCTION, .describe = nf_describe, .method = nf_method,
};

typedef struct worker {
    pthread_t t;
    pid_t tid;
    int number;                          /* crawl_thread_number() on the worker */
    int block_signal;
    named_frame *frames[3];
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int ready, quit;
} worker;

NOINLINE static void worker_leaf(worker *w)
{
    if (w->block_signal) {
        sigset_t s;
        sigemptyset(&s);
        sigaddset(&s, SIGRTMIN + 3);
        pthread_sigmask(SIG_BLOCK, &s, NULL);
    }
    pthread_mutex_lock(&w->lock);
    w->tid = (pid_t)syscall(SYS_gettid);
    w->number = crawl_thread_number();
    w->ready = 1;
    pthread_cond_broadcast(&w->cond);
    while (!w->quit)
        pthread_cond_wait(&w->cond, &w->lock);   /* stopped here, in the kernel */
    pthread_mutex_unlock(&w->lock);
}

static const char *names[3] = {"outer", "middle", "inner"};

NOINLINE static void nest(worker *w, int depth)
{
    named_frame f = {.fn = names[depth]};
    crawl_frame_push(&f.frame, &script_type);
    w->frames[depth] = &f;
    if (depth < 2)
        nest(w, depth + 1);
    else
        worker_leaf(w);
    crawl_frame_pop(&f.frame);
}

static void *worker_main(void *arg)
{
    worker *w = arg;
    pthread_setname_np(pthread_self(), w->block_signal ? "blocker" : "crawl-worker");
    nest(w, 0);
    return NULL;
}

static void start(worker *w, int block)
{
    memset(w, 0, sizeof *w);
    w->block_signal = block;
    pthread_mutex_init(&w->lock, NULL);
    pthread_cond_init(&w->cond, NULL);
    assert_int_equal(pthread_create(&w->t, NULL, worker_main, w), 0);
    pthread_mutex_lock(&w->lock);
    while (!w->ready)
        pthread_cond_wait(&w->cond, &w->lock);
    pthread_mutex_unlock(&w->lock);
}

static void stop(worker *w)
{
    pthread_mutex_lock(&w->lock);
    w->quit = 1;
    pthread_cond_broadcast(&w->cond);
    pthread_mutex_unlock(&w->lock);
    pthread_join(w->t, NULL);
}

typedef struct seen {
    crawl_frame *frames[16];
    unsigned nframes;
    uintptr_t ips[64];
    unsigned nips;
    int leaf_at, first_frame_at, n;
    unsigned thread;
} seen;

static crawl_action collect(const crawl_cf *cf, void *ctx)
{
    seen *s = ctx;
    s->thread = crawl_cf_thread(cf);
    if (crawl_cf_kind(cf) == CRAWL_CF_FRAME && s->nframes < 16) {
        if (s->first_frame_at < 0)
            s->first_frame_at = s->n;
        s->frames[s->nframes++] = crawl_cf_frame(cf);
    } else if (crawl_cf_kind(cf) == CRAWL_CF_NATIVE && s->nips < 64) {
        s->ips[s->nips++] = crawl_cf_ip(cf);   /* symbolized after the target goes on */
    }
    s->n++;
    return CRAWL_CONTINUE;
}

static void test_walk_other_thread(void **state)
{
    (void)state;
    worker w;
    start(&w, 0);
    for (int round = 0; round < 2; round++) {   /* fast, then precise */
        seen s = {.first_frame_at = -1};
        int rc = crawl_walk_thread(w.tid, collect, &s, round ? 0 : CRAWL_WALK_FAST, 2000);
        assert_int_equal(rc, 0);
        /* the Frames, newest first, as pushed */
        assert_int_equal(s.nframes, 3);
        assert_ptr_equal(s.frames[0], &w.frames[2]->frame);
        assert_ptr_equal(s.frames[1], &w.frames[1]->frame);
        assert_ptr_equal(s.frames[2], &w.frames[0]->frame);
        assert_int_equal(s.thread, (unsigned)w.number);
        /* native frames: worker_leaf among them, before (newer than) the
         * Frames -- in precise mode; frame pointers stop in libc's wait */
        int leaf = 0;
        for (unsigned i = 0; i < s.nips; i++) {
            crawl_symbol sym;
            char buf[512];
            if (crawl_symbolize(s.ips[i] - 1, &sym, buf, sizeof buf) == 0 && sym.function &&
                strcmp(sym.function, "worker_leaf") == 0)
                leaf = 1;
        }
        if (round == 1 && !leaf)
            fail_msg("worker_leaf not among %u native frames", s.nips);
        assert_true(s.first_frame_at > 0);   /* native frames came first */
    }
    stop(&w);
}

static void test_blocked_times_out_exited_is_esrch(void **state)
{
    (void)state;
    worker w;
    start(&w, 1);
    seen s = {.first_frame_at = -1};
    assert_int_equal(crawl_walk_thread(w.tid, collect, &s, 0, 200), -ETIMEDOUT);
    assert_int_equal(s.n, 0);
    pid_t tid = w.tid;
    stop(&w);                            /* the pending signal is ignored when it lands */
    assert_int_equal(crawl_walk_thread(tid, collect, &s, 0, 200), -ESRCH);
    assert_int_equal(crawl_walk_thread(0, collect, &s, 0, 200), -EINVAL);
    assert_int_equal(crawl_walk_thread(tid, NULL, &s, 0, 200), -EINVAL);
}

static char *read_all(FILE *f)
{
    long n = ftell(f);
    char *buf = calloc(1, (size_t)n + 1);
    assert_int_equal(pread(fileno(f), buf, (size_t)n, 0), n);
    return buf;
}

static void test_print_all_threads(void **state)
{
    (void)state;
    worker a, b;
    start(&a, 0);
    start(&b, 0);
    FILE *f = tmpfile();
    int walked = crawl_print_all_threads(fileno(f), 0);
    fseek(f, 0, SEEK_END);
    char *out = read_all(f);
    fclose(f);
    assert_true(walked >= 3);            /* main and the two workers */
    if (!strstr(out, "crawl thread dump (pid ") || !strstr(out, "\"crawl-worker\" T") ||
        !strstr(out, " in script inner") || !strstr(out, " in worker_leaf ")) {
        print_message("%s\n", out);
        fail_msg("the dump lacks a worker's block");
    }
    /* inner, middle, outer in that order, for each worker */
    const char *p = strstr(out, "\"crawl-worker\"");
    const char *i1 = strstr(p, "script inner"), *m1 = strstr(p, "script middle"),
               *o1 = strstr(p, "script outer");
    assert_true(i1 && m1 && o1 && i1 < m1 && m1 < o1);
    free(out);
    stop(&a);
    stop(&b);
}

static void test_dump_on_signal(void **state)
{
    (void)state;
    worker w;
    start(&w, 0);
    FILE *f = tmpfile();
    assert_int_equal(crawl_install_thread_dump(SIGQUIT, fileno(f)), 0);
    raise(SIGQUIT);
    char *out = NULL;
    for (int i = 0; i < 300; i++) {      /* the helper thread writes it */
        fseek(f, 0, SEEK_END);
        free(out);
        out = read_all(f);
        if (strstr(out, "script outer"))
            break;
        usleep(10000);
    }
    assert_non_null(strstr(out, "crawl thread dump (pid "));
    assert_non_null(strstr(out, "script outer"));
    free(out);
    signal(SIGQUIT, SIG_DFL);
    fclose(f);
    stop(&w);
}

int main(void)
{
    crawl_thread_attach();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_walk_other_thread),
        cmocka_unit_test(test_blocked_times_out_exited_is_esrch),
        cmocka_unit_test(test_print_all_threads),
        cmocka_unit_test(test_dump_on_signal),
    };
    return cmocka_run_group_tests_name("walk_thread", tests, NULL, NULL);
}
