/* crawl-ffi on its own: signature errors, values through calls and
 * closures, and the Frames a walk sees across qsort (C -> libffi -> libc ->
 * closure -> handler). */
#define _GNU_SOURCE
#include "../support.h"

#include <crawl/ffi.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void expect_error(const char *sig, const char *message)
{
    char err[256] = "";
    assert_null(crawl_ffi_wrap((void *)strlen, "strlen", sig, err, sizeof err));
    if (strcmp(err, message) != 0)
        fail_msg("signature \"%s\": got \"%s\", wanted \"%s\"", sig, err, message);
    err[0] = '\0';
    assert_null(crawl_ffi_closure_new(sig, NULL, NULL, NULL, err, sizeof err));
    assert_true(err[0] != '\0');
}

static void test_bad_signatures(void **state)
{
    (void)state;
    expect_error("x(i)", "bad signature \"x(i)\" at position 0: expected a return type (v i u l L z d p s)");
    expect_error("i[i]", "bad signature \"i[i]\" at position 1: expected '('");
    expect_error("i(iv)", "bad signature \"i(iv)\" at position 3: 'v' is not an argument type (i u l L z d p s)");
    expect_error("i(ii", "bad signature \"i(ii\" at position 4: expected ')' at the end");
    /* (the fault is the 'x': it named the ')' at position 3; found by a
     * hostile-input run) */
    expect_error("i(i)x", "bad signature \"i(i)x\" at position 4: 'x' after the closing ')'");
    expect_error("i(iiiiiiiiiiiiiiiii)", "bad signature \"i(iiiiiiiiiiiiiiiii)\": more than 16 arguments");
    char err[256];
    assert_null(crawl_ffi_open(NULL, "no_such_symbol_here", "v()", err, sizeof err));
    assert_string_equal(err, "symbol \"no_such_symbol_here\" not found in the process");
    assert_null(crawl_ffi_open("libno-such-library.so.9", "f", "v()", err, sizeof err));
    assert_non_null(strstr(err, "cannot open library \"libno-such-library.so.9\": "));
    /* a NULL function: refused (a call would jump to address 0) */
    assert_null(crawl_ffi_wrap(NULL, "f", "v()", err, sizeof err));
    assert_string_equal(err, "missing function pointer");
}

static void test_call_values(void **state)
{
    (void)state;
    char err[256];
    crawl_ffi_fn *len = crawl_ffi_open(NULL, "strlen", "z(s)", err, sizeof err);
    assert_non_null(len);
    assert_string_equal(crawl_ffi_name(len), "strlen");
    assert_int_equal(crawl_ffi_nargs(len), 1);
    assert_int_equal(crawl_ffi_arg_type(len, 0), 's');
    assert_int_equal(crawl_ffi_arg_type(len, 1), 0);
    assert_int_equal(crawl_ffi_ret_type(len), 'z');
    crawl_ffi_value arg = {.s = "crawl"}, ret = {0};
    crawl_ffi_call(len, &ret, &arg);
    assert_int_equal(ret.z, 5);
    crawl_ffi_free(len);
    /* int results are sign-extended, doubles pass in their registers */
    crawl_ffi_fn *atoi_fn = crawl_ffi_open("libc.so.6", "atoi", "i(s)", err, sizeof err);
    assert_non_null(atoi_fn);
    arg.s = "-42";
    crawl_ffi_call(atoi_fn, &ret, &arg);
    assert_int_equal(ret.i, -42);
    crawl_ffi_free(atoi_fn);
    crawl_ffi_fn *ldexp_fn = crawl_ffi_wrap((void *)ldexp, "ldexp",
                                            "d(di)", err, sizeof err);
    assert_non_null(ldexp_fn);
    crawl_ffi_value two[2] = {{.d = 1.5}, {.i = 3}};
    crawl_ffi_call(ldexp_fn, &ret, two);
    assert_true(ret.d == 12.0);
    crawl_ffi_free(ldexp_fn);
}

/* ---- across qsort ------------------------------------------------------------ */

typedef struct seen {
    char names[64][128];
    unsigned kinds[64];
    const void *methods[64];
    unsigned n;
} seen;
static seen W;
static int walked;

static crawl_action record(const crawl_cf *cf, void *ctx)
{
    seen *s = ctx;
    if (s->n == 64)
        return CRAWL_ABORT;
    crawl_cf_describe(cf, s->names[s->n], sizeof s->names[0]);
    s->kinds[s->n] = crawl_cf_kind(cf);
    s->methods[s->n] = crawl_cf_method(cf);
    s->n++;
    return CRAWL_CONTINUE;
}

static const char target[] = "the comparator";

static void compare_handler(const crawl_ffi_closure *c, crawl_ffi_value *ret,
                            const crawl_ffi_value *args, void *user)
{
    (void)c;
    ++*(int *)user;
    if (!walked) {
        walked = 1;
        memset(&W, 0, sizeof W);
        crawl_walk(record, &W, 0);
    }
    int a = *(const int *)args[0].p, b = *(const int *)args[1].p;
    ret->i = (a > b) - (a < b);
}

static unsigned find(const char *prefix, unsigned from)
{
    for (unsigned i = from; i < W.n; i++)
        if (strncmp(W.names[i], prefix, strlen(prefix)) == 0)
            return i;
    return ~0u;
}

NOINLINE static void sort_through_ffi(int *v, size_t n, int *calls)
{
    char err[256];
    crawl_ffi_closure *cmp = crawl_ffi_closure_new("i(pp)", compare_handler, calls, "a former one",
                                                  err, sizeof err);
    assert_non_null(cmp);
    crawl_ffi_closure_set_target(cmp, target);   /* what the entry Frame reports from now on */
    assert_int_equal(crawl_ffi_closure_nargs(cmp), 2);
    assert_int_equal(crawl_ffi_closure_arg_type(cmp, 1), 'p');
    assert_int_equal(crawl_ffi_closure_ret_type(cmp), 'i');
    crawl_ffi_fn *q = crawl_ffi_open(NULL, "qsort", "v(pzzp)", err, sizeof err);
    assert_non_null(q);
    crawl_ffi_value args[4] = {{.p = v}, {.z = n}, {.z = sizeof v[0]},
                               {.p = crawl_ffi_closure_code(cmp)}};
    crawl_ffi_call(q, NULL, args);
    crawl_ffi_free(q);
    crawl_ffi_closure_free(cmp);
}

static void test_frames_across_qsort(void **state)
{
    (void)state;
    int v[9] = {5, 3, 9, 1, 7, 2, 8, 6, 4}, calls = 0;
    walked = 0;
    sort_through_ffi(v, 9, &calls);
    for (int i = 0; i < 9; i++)
        assert_int_equal(v[i], i + 1);
    assert_true(calls >= 8);
    /* newest first: the handler, the entry Frame, libc's sort, the
     * transition Frame, then the C caller */
    unsigned h = find("compare_handler", 0);
    unsigned entry = find("[FFI callback into ", 0);
    unsigned sort = entry;               /* libc's (or a sanitizer's interceptor's) sort */
    while (sort < W.n && !strstr(W.names[sort], "sort"))
        sort++;
    unsigned call = find("[FFI call to qsort]", 0);
    unsigned caller = find("sort_through_ffi", 0);
    unsigned test = find("test_frames_across_qsort", 0);
    if (!(h < entry && entry < sort && sort < call && call < caller && caller < test &&
          test != ~0u)) {
        for (unsigned i = 0; i < W.n; i++)
            fprintf(stderr, "  %2u %s\n", i, W.names[i]);
        fail_msg("order: handler %u, entry %u, sort %u, call %u, caller %u, test %u", h, entry,
                 sort, call, caller, test);
    }
    assert_int_equal(W.kinds[entry], CRAWL_CF_FRAME);
    assert_ptr_equal(W.methods[entry], target);
    assert_int_equal(W.kinds[call], CRAWL_CF_FRAME);
    assert_int_equal(crawl_frame_count(), 0);              /* both Frames popped */
}

int main(void)
{
    crawl_thread_attach();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bad_signatures),
        cmocka_unit_test(test_call_values),
        cmocka_unit_test(test_frames_across_qsort),
    };
    return cmocka_run_group_tests_name("crawl-ffi", tests, NULL, NULL);
}
