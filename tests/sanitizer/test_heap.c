/* The checked heap and its reports, line by line. */
#define _GNU_SOURCE
#include "../support.h"

#include <errno.h>
#include <regex.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static char last[1 << 16];
static unsigned long seen;

static void keep_report(const char *text, void *ctx)
{
    (void)ctx;
    snprintf(last, sizeof last, "%s", text);
    seen++;
}

/* The lines of the last report matching each pattern, in order. */
static void expect_lines(const char *const *patterns)
{
    t_expect_lines(last, patterns);
}

static char hex[64];
static const char *addr(const void *p)
{
    snprintf(hex, sizeof hex, "0x%lx", (unsigned long)(uintptr_t)p);
    return hex;
}

/* ---- a script-like program: Frames name the functions --------------------------- */

typedef struct script_frame {
    crawl_frame frame;
    const char *function;
} script_frame;

static const void *sf_method(const crawl_frame *f) { return ((const script_frame *)f)->function; }
static int sf_describe(const crawl_frame *f, char *buf, size_t len)
{
    return snprintf(buf, len, "%s prog.script:1", ((const script_frame *)f)->function);
}
static int sf_describe_method(const void *m, uintptr_t pc, char *buf, size_t len)
{
    (void)pc;
    return snprintf(buf, len, "%s prog.script:1", (const char *)m);
}
static const crawl_frame_type script_type = {
    .name = "script", .flags = CRAWL_FRAME_FUNCTION, .method = sf_method,
    .describe = sf_describe, .describe_method = sf_describe_method,
};

#define SCRIPT(name)                                                                           \
    script_frame sf = {.function = name};                                                      \
    crawl_frame_push(&sf.frame, &script_type)
#define END_SCRIPT() crawl_frame_pop(&sf.frame)

NOINLINE static char *script_alloc(size_t n)
{
    SCRIPT("make_table");
    char *p = crawl_heap_malloc(n);
    END_SCRIPT();
    return p;
}

NOINLINE static void script_free(char *p)
{
    SCRIPT("drop_table");
    crawl_heap_free(p);
    END_SCRIPT();
}

NOINLINE static int script_read(char *p, size_t off, size_t size)
{
    SCRIPT("read_table");
    int rc = crawl_heap_check(p + off, size, 0);
    END_SCRIPT();
    return rc;
}

static void test_use_after_free(void **state)
{
    (void)state;
    char *p = script_alloc(40);
    script_free(p);
    unsigned long before = seen;
    assert_int_equal(script_read(p, 8, 4), 1);
    assert_int_equal(seen, before + 1);
    char where[64];
    snprintf(where, sizeof where, "%s", addr(p + 8));
    char l1[200], l2[200], l3[200];
    snprintf(l1, sizeof l1, "^==[0-9]+==ERROR: AddressSanitizer: heap-use-after-free on address %s at pc 0x[0-9a-f]+ bp 0x[0-9a-f]+ sp 0x[0-9a-f]+$", where);
    snprintf(l2, sizeof l2, "^READ of size 4 at %s thread T0$", where);
    snprintf(l3, sizeof l3, "^%s is located 8 bytes inside of 40-byte region \\[%s,", where, addr(p));
    expect_lines((const char *const[]){
        "^=================================================================$", l1, l2,
        /* a Frame comes right before the native frame that contains it */
        "^    #0 in read_table prog\\.script:1$",
        "^    #1 0x[0-9a-f]+ in script_read .*test_heap\\.c:[0-9]+$",
        "^    #2 0x[0-9a-f]+ in test_use_after_free ",
        l3,
        "^freed by thread T0 here:$",
        "^    #0 in drop_table prog\\.script:1$",
        "^    #1 0x[0-9a-f]+ in script_free .*test_heap\\.c:[0-9]+$",
        "^    #2 0x[0-9a-f]+ in test_use_after_free ",
        "^previously allocated by thread T0 here:$",
        "^    #0 in make_table prog\\.script:1$",
        "^    #1 0x[0-9a-f]+ in script_alloc .*test_heap\\.c:[0-9]+$",
        "^SUMMARY: AddressSanitizer: heap-use-after-free .*test_heap\\.c:[0-9]+ in script_read$",
        "^Shadow bytes around the buggy address:$",
        "^=>0x[0-9a-f]+:.*\\[fd\\]",
        "^Shadow byte legend \\(one shadow byte represents 8 application bytes\\):$",
        "^  Freed heap region:       fd$",
        NULL});
    assert_null(strstr(last, "ABORTING"));                      /* halt_on_error=0 */
}

static void test_partial_granule_and_both_sides(void **state)
{
    (void)state;
    char *p = script_alloc(13);
    unsigned long before = seen;
    assert_int_equal(script_read(p, 0, 13), 0);                 /* all of it: fine */
    assert_int_equal(script_read(p, 12, 1), 0);                 /* byte 12: fine */
    assert_int_equal(seen, before);
    char re[200];
    assert_int_equal(script_read(p, 13, 1), 1);                 /* byte 13: reported */
    snprintf(re, sizeof re, "^%s is located 0 bytes after 13-byte region \\[%s,%s\\)$", addr(p + 13), addr(p), addr(p + 13));
    re[sizeof re - 1] = '\0';
    {
        char a13[40];
        snprintf(a13, sizeof a13, "%s", addr(p + 13));
        char ap[40];
        snprintf(ap, sizeof ap, "%s", addr(p));
        snprintf(re, sizeof re, "^%s is located 0 bytes after 13-byte region \\[%s,%s\\)$", a13, ap, a13);
        char head[200];
        snprintf(head, sizeof head, "^READ of size 1 at %s thread T0$", a13);
        expect_lines((const char *const[]){"ERROR: AddressSanitizer: heap-buffer-overflow on address ",
                                           head, re, "^allocated by thread T0 here:$",
                                           "^    #0 in make_table prog\\.script:1$",
                                           "^=>0x[0-9a-f]+:.*00\\[05\\]", NULL});
    }
    /* a 4-byte read at 10 runs into byte 13: the headline and the access
     * line name where it starts, the location its first bad byte, as
     * AddressSanitizer's (GCC 12: "on address p+10", "READ of size 4 at
     * p+10", "p+13 is located 0 bytes to the right"); both said p+13 */
    assert_int_equal(script_read(p, 10, 4), 1);
    {
        char a10[40], a13[40], head[200], line[200], loc[200];
        snprintf(a10, sizeof a10, "%s", addr(p + 10));
        snprintf(a13, sizeof a13, "%s", addr(p + 13));
        snprintf(head, sizeof head, "heap-buffer-overflow on address %s at pc ", a10);
        snprintf(line, sizeof line, "^READ of size 4 at %s thread T0$", a10);
        snprintf(loc, sizeof loc, "^%s is located 0 bytes after 13-byte region", a13);
        expect_lines((const char *const[]){head, line, loc, NULL});
    }
    /* one byte before the region */
    assert_int_equal(script_read(p, (size_t)-1, 1), 1);
    expect_lines((const char *const[]){"heap-buffer-overflow",
                                       "is located 1 bytes before 13-byte region", NULL});
    /* a write far after */
    assert_int_equal(crawl_heap_check(p + 20, 2, 1), 1);
    expect_lines((const char *const[]){"^WRITE of size 2 at 0x[0-9a-f]+ thread T0$",
                                       "is located 7 bytes after 13-byte region", NULL});
    script_free(p);
}

static void test_double_and_bad_free(void **state)
{
    (void)state;
    char *p = script_alloc(24);
    script_free(p);
    unsigned long before = seen;
    script_free(p);
    assert_int_equal(seen, before + 1);
    char l1[200];
    snprintf(l1, sizeof l1, "^==[0-9]+==ERROR: AddressSanitizer: attempting double-free on %s in thread T0:$", addr(p));
    expect_lines((const char *const[]){l1, "^    #0 in drop_table prog\\.script:1$",
                                       "^    #1 0x[0-9a-f]+ in script_free ",
                                       "is located 0 bytes inside of 24-byte region",
                                       "^freed by thread T0 here:$",
                                       "^previously allocated by thread T0 here:$",
                                       "^SUMMARY: AddressSanitizer: double-free .* in script_free$",
                                       NULL});
    /* a stack address, and an address inside a live chunk */
    int local;
    crawl_heap_free(&local);
    char l2[200];
    snprintf(l2, sizeof l2, "^==[0-9]+==ERROR: AddressSanitizer: attempting free on address which was not malloc\\(\\)-ed: %s in thread T0$", addr(&local));
    expect_lines((const char *const[]){l2, "^    #0 0x[0-9a-f]+ in test_double_and_bad_free ",
                                       "^SUMMARY: AddressSanitizer: bad-free ", NULL});
    char *q = script_alloc(64);
    crawl_heap_free(q + 8);
    expect_lines((const char *const[]){"attempting free on address which was not malloc\\(\\)-ed",
                                       "is located 8 bytes inside of 64-byte region",
                                       "^allocated by thread T0 here:$", NULL});
    assert_int_equal(seen, before + 3);
    crawl_heap_free(q);
    assert_int_equal(seen, before + 3);
    crawl_heap_free(NULL);                                      /* fine, like free(NULL) */
    assert_int_equal(seen, before + 3);
}

static void test_poison(void **state)
{
    (void)state;
    char *p = crawl_heap_malloc(64);
    assert_int_equal(crawl_heap_size(p), 64);                   /* a live chunk's start */
    assert_int_equal(crawl_heap_size(p + 16), 0);
    int here;
    assert_int_equal(crawl_heap_size(&here), 0);
    assert_int_equal(crawl_heap_poison(p + 16, 16), 0);
    unsigned long before = seen;
    assert_int_equal(crawl_heap_check(p + 8, 8, 0), 0);
    assert_int_equal(crawl_heap_check(p + 20, 1, 0), 1);
    expect_lines((const char *const[]){"ERROR: AddressSanitizer: use-after-poison on address ",
                                       "is located 20 bytes inside of 64-byte region", NULL});
    assert_int_equal(crawl_heap_unpoison(p + 16, 16), 0);
    assert_int_equal(crawl_heap_check(p + 20, 1, 0), 0);
    assert_int_equal(seen, before + 1);
    int local;
    assert_int_equal(crawl_heap_poison(&local, 4), -EINVAL);
    crawl_heap_free(p);
    assert_int_equal(crawl_heap_size(p), 0);                    /* quarantined */
}

/* Manual poisoning follows AddressSanitizer: partial last granules, ranges
 * that end the chunk, and sizes that would wrap. */
static void test_poison_edges(void **state)
{
    (void)state;
    char *p = crawl_heap_malloc(64);
    unsigned long before = seen;
    assert_int_equal(crawl_heap_poison(p, SIZE_MAX), -EINVAL);
    assert_int_equal(crawl_heap_poison(p + 8, (size_t)-8), -EINVAL);
    /* unpoisoning 12 bytes makes all 12 addressable, not only 8 */
    assert_int_equal(crawl_heap_poison(p, 64), 0);
    assert_int_equal(crawl_heap_unpoison(p, 12), 0);
    assert_int_equal(crawl_heap_check(p + 8, 4, 0), 0);
    assert_int_equal(seen, before);
    assert_int_equal(crawl_heap_check(p + 12, 1, 0), 1);
    expect_lines((const char *const[]){"use-after-poison on address ",
                                       "is located 12 bytes inside of 64-byte region", NULL});
    /* unpoisoning the range that ends the chunk leaves other ranges poisoned */
    assert_int_equal(crawl_heap_unpoison(p, 64), 0);
    assert_int_equal(crawl_heap_poison(p, 16), 0);
    assert_int_equal(crawl_heap_poison(p + 48, 16), 0);
    assert_int_equal(crawl_heap_unpoison(p + 48, 16), 0);
    assert_int_equal(crawl_heap_check(p + 48, 16, 0), 0);
    assert_int_equal(crawl_heap_check(p, 1, 0), 1);
    assert_int_equal(seen, before + 2);
    crawl_heap_free(p);
    /* a 13-byte chunk: poisoning its last 5 bytes takes the tail granule,
     * unpoisoning them gives back exactly 13 */
    char *q = crawl_heap_malloc(13);
    assert_int_equal(crawl_heap_poison(q + 8, 5), 0);
    assert_int_equal(crawl_heap_check(q + 8, 1, 0), 1);
    assert_int_equal(crawl_heap_unpoison(q + 8, 5), 0);
    assert_int_equal(crawl_heap_check(q, 13, 0), 0);
    assert_int_equal(crawl_heap_check(q + 13, 1, 0), 1);
    expect_lines((const char *const[]){"heap-buffer-overflow", "is located 0 bytes after 13-byte region",
                                       NULL});
    assert_int_equal(seen, before + 4);
    crawl_heap_free(q);
}

/* malloc(0) chunks are found like any other, and a chunk header is more
 * than its magic: user data that copies one is not a chunk. */
static void test_zero_size_and_forged_headers(void **state)
{
    (void)state;
    char *z = script_alloc(0);
    unsigned long before = seen;
    assert_int_equal(crawl_heap_check(z, 1, 1), 1);
    char l[200];
    snprintf(l, sizeof l, "^%s is located 0 bytes after 0-byte region \\[%s,", addr(z), addr(z));
    expect_lines((const char *const[]){"heap-buffer-overflow", l, "^allocated by thread T0 here:$",
                                       "^    #0 in make_table prog\\.script:1$", NULL});
    script_free(z);
    /* the same access after the free is a use after free, as ASan says */
    assert_int_equal(crawl_heap_check(z, 1, 0), 1);
    expect_lines((const char *const[]){"ERROR: AddressSanitizer: heap-use-after-free on address",
                                       "^freed by thread T0 here:$", NULL});
    before++;
    /* a live chunk whose bytes copy the header of a chunk at p + 64 */
    char *p = crawl_heap_malloc(256);
    char *other = crawl_heap_malloc(8);
    __asm__ volatile("" : "+r"(other));  /* the header before it is read on purpose */
    memcpy(p + 64 - 32, other - 32, 32);
    crawl_heap_free(p + 64);
    expect_lines((const char *const[]){"attempting free on address which was not malloc\\(\\)-ed",
                                       "is located 64 bytes inside of 256-byte region", NULL});
    assert_int_equal(seen, before + 2);
    /* the heap never hands out memory inside the live chunk */
    for (int i = 0; i < 64; i++) {
        char *q = crawl_heap_malloc(8);
        assert_true(q + 8 <= p || q >= p + 256);
        crawl_heap_free(q);
    }
    crawl_heap_free(other);
    crawl_heap_free(p);
    assert_int_equal(seen, before + 2);
}

/* A report's stacks give way to its tail: with a very deep access stack the
 * SUMMARY line and the shadow dump are still there. */
NOINLINE static int deep_check(int n, char *p)
{
    int r = n ? deep_check(n - 1, p) : crawl_heap_check(p + 16, 1, 0);
    __asm__ volatile("" ::: "memory");
    return r;
}

static void test_deep_stack_report(void **state)
{
    (void)state;
    char *p = crawl_heap_malloc(16);
    assert_int_equal(deep_check(1500, p), 1);
    expect_lines((const char *const[]){"heap-buffer-overflow",
                                       "^    \\.\\.\\. \\(more frames: report text limit reached\\)$",
                                       "is located 0 bytes after 16-byte region",
                                       "^SUMMARY: AddressSanitizer: heap-buffer-overflow ",
                                       "^Shadow byte legend", "Poisoned by user: +f7$", NULL});
    crawl_heap_free(p);
}

/* malloc_context_size counts frames: an activation is one, though it takes
 * three words in the depot. */
static void test_context_counts_frames(void **state)
{
    (void)state;
    assert_int_equal(crawl_sanitizer_set_options("malloc_context_size=2"), 0);
    char *p = script_alloc(8);
    assert_int_equal(crawl_sanitizer_set_options("malloc_context_size=30"), 0);
    assert_int_equal(crawl_heap_check(p + 8, 1, 0), 1);
    expect_lines((const char *const[]){"^allocated by thread T0 here:$",
                                       "^    #0 in make_table prog\\.script:1$",
                                       "^    #1 0x[0-9a-f]+ in script_alloc ", "^$", NULL});
    const char *alloc = strstr(last, "allocated by thread T0 here:");
    assert_non_null(alloc);
    assert_null(strstr(alloc, "    #2 "));                   /* two frames kept */
    crawl_heap_free(p);
}

static void test_calloc_realloc_quarantine(void **state)
{
    (void)state;
    unsigned long before = seen;
    int *z = crawl_heap_calloc(10, sizeof(int));
    for (int i = 0; i < 10; i++)
        assert_int_equal(z[i], 0);
    volatile size_t huge = (size_t)-1;   /* past what alloc_size lets the compiler accept */
    assert_null(crawl_heap_calloc(huge, 16));                   /* overflow: NULL */
    for (int i = 0; i < 10; i++)
        z[i] = i * i;
    int *r = crawl_heap_realloc(z, 100 * sizeof(int));
    for (int i = 0; i < 10; i++)
        assert_int_equal(r[i], i * i);
    assert_int_equal(crawl_heap_check(z, 4, 0), 1);              /* the old block is freed */
    expect_lines((const char *const[]){"heap-use-after-free", NULL});
    /* freed chunks wait in the quarantine: the next same-size chunk is elsewhere */
    char *a = crawl_heap_malloc(32);
    crawl_heap_free(a);
    char *b = crawl_heap_malloc(32);
    assert_ptr_not_equal(a, b);
    crawl_heap_free(b);
    crawl_heap_free(r);
    assert_int_equal(seen, before + 1);
    assert_true(crawl_heap_owns(b) && !crawl_heap_owns(&before));
    assert_int_equal(crawl_heap_check(&before, 8, 0), 0);       /* outside: not ours to judge */
}

/* A long random sequence of in-bounds operations reports nothing. */
static void test_no_false_positives(void **state)
{
    (void)state;
    unsigned long before = seen;
    enum { SLOTS = 256 };
    char *ptr[SLOTS] = {0};
    size_t size[SLOTS] = {0};
    unsigned x = 12345;
    for (int step = 0; step < 100000; step++) {
        x = x * 1103515245u + 12345u;
        unsigned s = (x >> 8) % SLOTS, op = (x >> 20) % 8;
        if (!ptr[s]) {
            size[s] = (x >> 4) % 300;
            ptr[s] = op < 4 ? crawl_heap_malloc(size[s]) : crawl_heap_calloc(1, size[s]);
            memset(ptr[s], (int)s, size[s]);
        } else if (op == 0) {
            crawl_heap_free(ptr[s]);
            ptr[s] = NULL;
        } else if (op == 1) {
            size[s] = (x >> 3) % 500;
            ptr[s] = crawl_heap_realloc(ptr[s], size[s]);
            memset(ptr[s], 1, size[s]);
        } else if (size[s]) {
            size_t off = (x >> 5) % size[s], len = 1 + (x >> 11) % (size[s] - off);
            crawl_heap_check(ptr[s] + off, len, op & 1);
            crawl_heap_check(ptr[s] + size[s] - 1, 1, 0);       /* the last byte, any granule */
        }
    }
    for (int s = 0; s < SLOTS; s++)
        crawl_heap_free(ptr[s]);
    assert_int_equal(seen, before);
}

/* ---- halt_on_error=1 and log_path, in child processes --------------------------------- */

static void halt_child(void)
{
    crawl_sanitizer_set_options("halt_on_error=1:log_path=stderr");
    char *p = crawl_heap_malloc(8);
    crawl_heap_free(p);
    crawl_heap_free(p);
    _exit(0);                            /* not reached */
}

static void test_halt_and_log_path(void **state)
{
    (void)state;
    char out[1 << 16];
    int status = t_run_child(halt_child, out, sizeof out);
    assert_true(WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT);
    assert_non_null(strstr(out, "ERROR: AddressSanitizer: attempting double-free"));
    assert_non_null(strstr(out, "==ABORTING\n"));

    char dir[] = "/tmp/crawl-log-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char opt[200], path[300];
    snprintf(opt, sizeof opt, "log_path=%s/report", dir);
    assert_int_equal(crawl_sanitizer_set_options(opt), 0);
    char *p = crawl_heap_malloc(8);
    crawl_heap_check(p + 8, 1, 0);
    crawl_heap_free(p);
    /* a device is written as named: no /dev/null.PID beside it */
    char devpid[64];
    snprintf(devpid, sizeof devpid, "/dev/null.%d", (int)getpid());
    struct stat st;
    off_t before = stat(devpid, &st) == 0 ? st.st_size : -1;
    assert_int_equal(crawl_sanitizer_set_options("log_path=/dev/null"), 0);
    p = crawl_heap_malloc(8);
    crawl_heap_check(p + 8, 1, 0);
    crawl_heap_free(p);
    assert_int_equal(stat(devpid, &st) == 0 ? st.st_size : -1, before);
    /* /dev/stderr when stderr is a regular file: the report goes there,
     * and no /dev/stderr.PID is made (one was, in /dev) */
    char errpid[64];
    snprintf(errpid, sizeof errpid, "/dev/stderr.%d", (int)getpid());
    FILE *err = tmpfile();
    assert_non_null(err);
    int saved = dup(STDERR_FILENO);
    dup2(fileno(err), STDERR_FILENO);
    assert_int_equal(crawl_sanitizer_set_options("log_path=/dev/stderr"), 0);
    p = crawl_heap_malloc(8);
    crawl_heap_check(p + 8, 1, 0);
    crawl_heap_free(p);
    dup2(saved, STDERR_FILENO);
    close(saved);
    int made = stat(errpid, &st) == 0;
    if (made)
        unlink(errpid);
    assert_false(made);
    rewind(err);
    size_t got = fread(out, 1, sizeof out - 1, err);
    out[got] = '\0';
    fclose(err);
    assert_non_null(strstr(out, "ERROR: AddressSanitizer: heap-buffer-overflow"));
    snprintf(path, sizeof path, "%s/report.%d", dir, (int)getpid());
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    size_t n = fread(out, 1, sizeof out - 1, f);
    out[n] = '\0';
    fclose(f);
    unlink(path);
    rmdir(dir);
    assert_non_null(strstr(out, "ERROR: AddressSanitizer: heap-buffer-overflow"));
}

int main(void)
{
    crawl_thread_attach();
    crawl_set_report_callback(keep_report, NULL);
    if (crawl_sanitizer_set_options("halt_on_error=0:log_path=/dev/null") != 0)
        return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_use_after_free),
        cmocka_unit_test(test_partial_granule_and_both_sides),
        cmocka_unit_test(test_double_and_bad_free),
        cmocka_unit_test(test_poison),
        cmocka_unit_test(test_poison_edges),
        cmocka_unit_test(test_zero_size_and_forged_headers),
        cmocka_unit_test(test_deep_stack_report),
        cmocka_unit_test(test_context_counts_frames),
        cmocka_unit_test(test_calloc_realloc_quarantine),
        cmocka_unit_test(test_no_false_positives),
        cmocka_unit_test(test_halt_and_log_path),
    };
    return cmocka_run_group_tests_name("checked-heap", tests, NULL, NULL);
}
