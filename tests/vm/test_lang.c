/* crawlvm language semantics: what scripts compute and print. */
#define GC_THREADS                      /* threads made here are Boehm's */
#include "../support.h"
#include "vm_support.h"

#include <gc/gc.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static vm_state *vm;

/* Evaluate src; its output must be exactly want. */
static void expect_out(const char *src, const char *want)
{
    run_result r;
    run(vm, src, &r);
    if (r.rc != 0 || strcmp(r.out, want) != 0)
        fail_msg("%s\n  printed \"%s\" (rc %d, stderr: %s)\n  wanted  \"%s\"", src, r.out, r.rc,
                 r.err, want);
}

/* Evaluate src; it must fail with an error line containing want. */
static void expect_error(const char *src, const char *want)
{
    run_result r;
    run(vm, src, &r);
    if (r.rc != -1 || !strstr(r.err, want))
        fail_msg("%s\n  rc %d, stderr: %s\n  wanted an error containing \"%s\"", src, r.rc, r.err,
                 want);
}

static void test_arithmetic(void **state)
{
    (void)state;
    expect_out("(print (+ 1 2) (- 10 4) (* 6 7) (quotient 17 5) (remainder 17 5))",
               "3 6 42 3 2\n");
    expect_out("(print (+ 1 2 3 4) (- 5) (* 2 3 4) (+))", "10 -5 24 0\n");
    expect_out("(print (< 1 2) (<= 2 2) (> 1 2) (>= 3 2) (= 4 4) (not #f) (not 0))",
               "#t #t #f #t #t #t #f\n");
    expect_out("(print 4611686018427387903 -4611686018427387904)",
               "4611686018427387903 -4611686018427387904\n");
    expect_error("(+ 4611686018427387903 1)", "error: integer overflow in +");
    expect_error("(* 4611686018427387903 2)", "error: integer overflow in *");
    expect_error("(quotient 1 0)", "error: division by zero in quotient");
    expect_error("(+ 1 \"a\")", "error: type error: + expects integers, got string");
}

static void test_definitions_and_scope(void **state)
{
    (void)state;
    expect_out("(define x 5) (define (sq n) (* n n)) (print (sq x))", "25\n");
    expect_out("(define (fact n) (if (< n 2) 1 (* n (fact (- n 1))))) (print (fact 20))",
               "2432902008176640000\n");
    expect_out("(print (let ((a 1) (b 2)) (let ((a 10)) (+ a b))))", "12\n");
    expect_out("(define a 1) (print (let ((a 2) (b a)) b))", "1\n");   /* inits see the outer a */
    expect_out("(define n 0) (set! n (+ n 5)) (print n)", "5\n");
    expect_out("(define (f) (define y 3) (set! y (+ y 1)) y) (print (f))", "4\n");
    expect_out("(print (begin 1 2 3) (if #f 1))", "3 nil\n");
    expect_out("(print (and 1 2 3) (and 1 #f 3) (or #f nil 7) (or) (and))", "3 #f 7 #f #t\n");
    expect_out("(define i 0) (define s 0) (while (< i 10) (set! s (+ s i)) (set! i (+ i 1))) (print s)",
               "45\n");
}

static void test_closures(void **state)
{
    (void)state;
    expect_out("(define (adder n) (lambda (x) (+ x n))) (define add5 (adder 5)) (print (add5 10))",
               "15\n");
    expect_out("(define (compose f g) (lambda (x) (f (g x))))"
               "(print ((compose (lambda (x) (* x 2)) (lambda (x) (+ x 1))) 5))",
               "12\n");
    /* an internal define calls itself, and a lambda inside it captures it */
    expect_out("(define (outer n) (define (count k) (if (= k 0) 0 (+ 1 (count (- k 1)))))"
               " (let ((again (lambda () (count n)))) (+ (count n) (again)))) (print (outer 7))",
               "14\n");
    expect_out("(define (mk) (let ((a 1) (b 2)) (lambda () (lambda () (+ a b))))) (print (((mk))))",
               "3\n");
    expect_error("(define (f) (let ((x 1)) (lambda () (set! x 2))))",
                 "cannot set! 'x': it is captured from an enclosing function");
}

static void test_strings_and_vectors(void **state)
{
    (void)state;
    expect_out("(print \"a\\tb\" (string-length \"hello\") (string-append \"ab\" \"cd\" \"\"))",
               "a\tb 5 abcd\n");
    expect_out("(define v (make-vector 3 0)) (vector-set! v 1 \"x\") (print v (vector-length v))",
               "[0 \"x\" 0] 3\n");
    expect_out("(print (vector 1 (vector 2 3)) (equal? (vector 1 \"a\") (vector 1 \"a\")) "
               "(eq? (vector) (vector)))",
               "[1 [2 3]] #t #f\n");
    /* longer than any fixed buffer: printed whole */
    expect_out("(print (string-length (str (make-vector 100 \"abcdef\"))))", "901\n");
    expect_out("(print (str 42) (string? (str 1)) (integer? 1) (vector? 1) (nil? nil) "
               "(procedure? print))",
               "42 #t #t #f #t #t\n");
    expect_error("(vector-ref (vector 1 2) 2)",
                 "error: index out of range: vector-ref index 2 of a 2-element vector");
    expect_error("(vector-ref 5 0)", "error: type error: vector-ref expects a vector, got integer");
}

/* Shared and cyclic vectors: printing and equal? end, in bounded time. */
static void test_shared_structure(void **state)
{
    (void)state;
    run_result r;
    /* a vector that holds itself twice: 2^64 paths to depth 64 */
    run(vm, "(define v (vector 1 2)) (vector-set! v 0 v) (vector-set! v 1 v) (print v)", &r);
    assert_int_equal(r.rc, 0);
    assert_true(strncmp(r.out, "[[[[[[[[", 8) == 0);
    /* a 40-level DAG, each level holding the one below twice: 2^40 leaves */
    const char *dag = "(define (dag n) (if (= n 0) (vector) "
                      "(let ((c (dag (- n 1)))) (vector c c)))) (define d (dag 40)) ";
    char src[512];
    snprintf(src, sizeof src, "%s (print d)", dag);
    run(vm, src, &r);
    assert_int_equal(r.rc, 0);
    assert_true(strncmp(r.out, "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[] []]", 46) == 0);
    snprintf(src, sizeof src, "%s (print (equal? d d))", dag);
    expect_out(src, "#t\n");
    snprintf(src, sizeof src, "%s (print (equal? d (dag 40)))", dag);
    expect_error(src, "error: equal?: more than 10000000 element comparisons (shared or cyclic "
                      "vectors?)");
    snprintf(src, sizeof src, "%s (print (equal? (dag 12) (dag 12)))", dag);
    expect_out(src, "#t\n");
}

static void test_buffers(void **state)
{
    (void)state;
    expect_out("(define b (make-buffer 16)) (buffer-i32-set! b 3 -7) (buffer-u8-set! b 0 255)"
               "(print (buffer-i32-ref b 3) (buffer-u8-ref b 0) (buffer-size b))",
               "-7 255 16\n");
    expect_error("(define b (make-buffer 13)) (buffer-u8-ref b 13)",
                 "error: index out of range: buffer-u8-ref index 13 of a 13-element buffer");
    expect_error("(define b (make-buffer 8)) (buffer-free b) (buffer-i32-ref b 0)",
                 "error: buffer-i32-ref: buffer used after buffer-free");
    expect_error("(define b (make-buffer 8)) (buffer-free b) (buffer-free b)",
                 "error: buffer-free: buffer already freed");
    /* a value the element cannot hold is refused, not cut to its low bits
     * (-1 read back as 255, 4294967297 as 1; found by an outside test) */
    expect_out("(define b (make-buffer 8)) (buffer-i32-set! b 0 -2147483648)"
               "(buffer-i32-set! b 1 2147483647) (buffer-u8-set! b 0 0)"
               "(print (buffer-i32-ref b 0) (buffer-i32-ref b 1))",
               "-2147483648 2147483647\n");
    expect_error("(define b (make-buffer 8)) (buffer-u8-set! b 0 -1)",
                 "error: buffer-u8-set!: -1 does not fit in a byte (0 to 255)");
    expect_error("(define b (make-buffer 8)) (buffer-u8-set! b 0 256)",
                 "error: buffer-u8-set!: 256 does not fit in a byte (0 to 255)");
    expect_error("(define b (make-buffer 8)) (buffer-i32-set! b 0 4294967297)",
                 "error: buffer-i32-set!: 4294967297 does not fit in a 32-bit integer "
                 "(-2147483648 to 2147483647)");
    expect_error("(define b (make-buffer 8)) (buffer-i32-set! b 0 -2147483649)",
                 "error: buffer-i32-set!: -2147483649 does not fit in a 32-bit integer");
}

static void test_errors_and_tracebacks(void **state)
{
    (void)state;
    run_result r;
    run(vm, "(define (inner x) (vector-ref x 0))\n(define (outer) (inner 5))\n(outer)\n", &r);
    assert_int_equal(r.rc, -1);
    const char *want = "Traceback (most recent call first):\n"
                       "  inner at test.crawl:1\n"
                       "  outer at test.crawl:2\n"
                       "  <toplevel> at test.crawl:3\n"
                       "error: type error: vector-ref expects a vector, got integer\n";
    if (strcmp(r.err, want) != 0)
        fail_msg("got:\n%s\nwanted:\n%s", r.err, want);
    expect_error("(undefined-thing)", "error: unbound variable 'undefined-thing'");
    expect_error("(define (f a b) a) (f 1)", "error: bad arity: f takes 2 argument(s), got 1");
    expect_error("(vector-ref (vector))", "error: bad arity: vector-ref takes 2 argument(s), got 1");
    expect_error("(5 1)", "error: type error: cannot call integer");
    expect_error("(error \"custom\" 42 \"x\")", "error: custom 42 \"x\"");
    /* a NUL byte in the message shows as \0 (the message ended there) */
    expect_error("(error \"a\\0b\" 1)", "error: a\\0b 1");
    expect_error("(assert (= 1 2) \"math\")", "error: assertion failed: math");
    expect_error("(set! nope 1)", "error: set! of undefined variable 'nope'");
    expect_error("(define (r n) (+ 1 (r n))) (r 1)", "error: stack overflow");
    /* the VM is usable after every error */
    expect_out("(print \"still fine\")", "still fine\n");
}

static void test_syntax_errors(void **state)
{
    (void)state;
    expect_error("(print 1", "test.crawl:1:1: syntax error: unclosed '(' (end of file reached)");
    expect_error("\n  )", "test.crawl:2:3: syntax error: unexpected ')'");
    expect_error("(print \"abc)", "test.crawl:1:8: syntax error: unterminated string");
    /* (a backslash at the very end said "unknown escape '\'"; found by a
     * hostile-input run) */
    expect_error("(print \"abc\\", "test.crawl:1:8: syntax error: unterminated string");
    expect_error("'x", "test.crawl:1:1: syntax error: unsupported syntax ''x'");
    expect_error("(print 99999999999999999999)", "test.crawl:1:8: syntax error: integer 99999999999999999999 does not fit in 62 bits");
    expect_error("(if)", "test.crawl:1:1: error: if takes a condition");
    expect_error("(let (x) x)", "test.crawl:1:7: error: a let binding is (name value)");
    expect_error("(lambda (1) 1)", "test.crawl:1:10: error: parameters must be names");
}

/* Found in review; each once went wrong. */
static void test_review_regressions(void **state)
{
    (void)state;
    /* a define inside a let initialiser used to shift the let's slots */
    expect_out("(define (f) (let ((x (begin (define z 3) 10))) (list-of x z)))"
               "(define (list-of a b) (vector a b)) (print (f))",
               "[10 3]\n");
    expect_out("(define (g) (let ((a 1) (b (begin (define z 3) 20))) (vector a b z))) (print (g))",
               "[1 20 3]\n");
    /* errors of set! name the set!'s line, not its value's */
    expect_error("(set! undefinedvar\n 5)", "error: set! of undefined variable 'undefinedvar'");
    run_result r;
    run(vm, "(set! undefinedvar\n 5)", &r);
    assert_non_null(strstr(r.err, "  <toplevel> at test.crawl:1\n"));
    /* operators compiled inline cannot be redefined behind their back */
    expect_error("(define (< a b) #t)", "test.crawl:1:9: error: cannot redefine '<'");
    expect_error("(set! + 1)", "cannot redefine '+'");
    /* internal functions: earlier ones may use later ones only if not captured early */
    expect_out("(define (f) (define (a) 1) (define (b) (+ (a) 1)) (b)) (print (f))", "2\n");
    expect_error("(define (F) (define (ev n) (if (= n 0) #t (od (- n 1))))"
                 " (define (od n) (if (= n 0) #f (ev (- n 1)))) (ev 10))",
                 "'od' is captured before its define has run");
    /* self-containing vectors: printing stops, equal? refuses */
    expect_out("(define v (make-vector 1 0)) (vector-set! v 0 v) (print (string-length (str v)) "
               "(equal? v v))",
               "133 #t\n");   /* 64 "[", "[...]", 64 "]" */
    expect_error("(define v (make-vector 1 0)) (vector-set! v 0 v)"
                 "(define w (make-vector 1 0)) (vector-set! w 0 w) (equal? v w)",
                 "equal?: vectors nested more than 10000 deep");
    /* strings compare by length and bytes, NUL included */
    expect_out("(print (equal? \"a\\0b\" \"a\\0c\") (equal? \"a\\0b\" \"a\\0b\"))", "#f #t\n");
}

/* Found by an outside test of hostile scripts. */
static void test_outside_regressions(void **state)
{
    (void)state;
    /* strings print whole, NUL bytes included (printing stopped at the
     * first: "a" and ["c"]) */
    run_result r;
    run(vm, "(print \"a\\0b\" (vector \"c\\0d\"))", &r);
    assert_int_equal(r.rc, 0);
    static const char want[] = "a\0b [\"c\0d\"]\n";
    assert_int_equal(r.out_len, sizeof want - 1);
    assert_memory_equal(r.out, want, sizeof want - 1);
    /* a string longer than an int counts formats to its whole length (the
     * int lengths came out negative); only what fits is read, so a header
     * that claims 3 GiB over 64 bytes is enough here */
    vstring *big = malloc(sizeof *big + 64);
    big->h.type = T_STRING;
    big->len = 3000000000u;
    memset(big->s, 'x', 64);
    char buf[16];
    assert_int_equal(vm_format_value((value)big, buf, sizeof buf, 1), 3000000002u);
    assert_string_equal(buf, "\"xxxxxxxxxxxxxx");
    free(big);
    /* peek-i32 at an address that is not mapped, or an index whose byte
     * offset overflows, is a script error (both ended in SIGSEGV; the
     * second was signed overflow under UBSan) */
    static const char peek[] = "(define m (ffi-fn nil \"malloc\" \"p(z)\")) (define p (m 16)) ";
    char src[256];
    snprintf(src, sizeof src, "%s(peek-i32 p 1000000000000)", peek);
    expect_error(src, "error: peek-i32: cannot read 4 bytes at 0x");
    snprintf(src, sizeof src, "%s(peek-i32 p 4611686018427387903)", peek);
    expect_error(src, "error: peek-i32: index 4611686018427387903 out of range");
    snprintf(src, sizeof src, "%s(peek-i32 p -4611686018427387904)", peek);
    expect_error(src, "error: peek-i32: index -4611686018427387904 out of range");
    expect_error("(peek-i32 ((ffi-fn nil \"strtoul\" \"p(spi)\") \"8\" nil 10))",
                 "error: peek-i32: cannot read 4 bytes at 0x8");
    /* an FFI integer argument the C type cannot hold is refused (it was cut
     * to its low bits: (abs 4294967297) printed 1) */
    expect_error("((ffi-fn nil \"abs\" \"i(i)\") 4294967297)",
                 "error: ffi error: argument 1 of abs: 4294967297 does not fit in a C int");
    expect_error("((ffi-fn nil \"malloc\" \"p(z)\") -1)",
                 "error: ffi error: argument 1 of malloc: -1 does not fit in a C size_t");
    expect_out("(print ((ffi-fn nil \"abs\" \"i(i)\") -2147483647))", "2147483647\n");
    /* globals are found by a hash of their names (a linear search took
     * 22 s for 100,000 defines): 300 of them, across three growths of the
     * table (few: the suite runs under gc_stress, a collection per allocation), each found again by name and by the script */
    size_t cap = 300 * 40;
    char *src2 = malloc(cap), *at = src2;
    for (int i = 0; i < 300; i++)
        at += sprintf(at, "(define hg%d %d)\n", i, 3 * i);
    sprintf(at, "(print (+ hg0 hg7 hg299))");
    expect_out(src2, "918\n");
    free(src2);
    for (int i = 0; i < 300; i += 13) {
        char name[32];
        snprintf(name, sizeof name, "hg%d", i);
        assert_int_equal(vm_get_global(vm, name), FIX(3 * i));
        assert_int_equal(vm_global_index(vm, name), vm_global_index(vm, name));
    }
    assert_int_equal(vm_get_global(vm, "hg300"), V_UNBOUND);
    /* a function's locals are found by a hash too (a linear search took
     * 4.5 s for 20,000 internal defines in one body; found by an outside
     * test): 200 defines, across three growths of the index, with a let
     * that shadows two of them and gives them back when it ends */
    char *src4 = malloc(200 * 40 + 400), *at4 = src4;
    at4 += sprintf(at4, "(define (many) ");
    for (int i = 0; i < 200; i++)
        at4 += sprintf(at4, "(define lv%d %d) ", i, 5 * i);
    sprintf(at4, "(define inner (let ((lv3 -1) (lv150 -2)) (+ lv3 lv150 lv199)))"
                 " (+ inner lv3 lv150 lv199)) (print (many))");
    expect_out(src4, "2752\n");         /* (-1 - 2 + 995) + 15 + 750 + 995 */
    free(src4);
    /* a function's name prints whole, however long (found in review: cut
     * at 511 bytes, without its ">") */
    char longname[601];
    memset(longname, 'f', 600);
    longname[600] = '\0';
    char *src3 = malloc(2000);
    snprintf(src3, 2000, "(define (%s) 1) (print (string-length (str %s)))", longname, longname);
    expect_out(src3, "612\n");       /* "#<function " + 600 + ">" */
    free(src3);
}

/* A VM made on one thread runs on another that calls vm_eval (one at a
 * time), callbacks included (found in review: callbacks compared the
 * calling thread with the VM's maker and returned 0, so qsort did not
 * sort). */
static run_result elsewhere;

static void *eval_elsewhere(void *arg)
{
    (void)arg;
    crawl_thread_attach();
    run(vm,
        "(define qs (ffi-fn \"libc.so.6\" \"qsort\" \"v(pzzp)\")) (define b (make-buffer 8))"
        "(buffer-i32-set! b 0 5) (buffer-i32-set! b 1 3)"
        "(qs b 2 4 (ffi-callback (lambda (x y) (- (peek-i32 x) (peek-i32 y))) \"i(pp)\"))"
        "(print (buffer-i32-ref b 0) (buffer-i32-ref b 1))",
        &elsewhere);
    crawl_thread_detach();
    return NULL;
}

static void test_eval_on_another_thread(void **state)
{
    (void)state;
    pthread_t t;                         /* (Boehm's pthread_create: GC_THREADS) */
    assert_int_equal(pthread_create(&t, NULL, eval_elsewhere, NULL), 0);
    assert_int_equal(pthread_join(t, NULL), 0);
    if (elsewhere.rc != 0 || strcmp(elsewhere.out, "3 5\n") != 0)
        fail_msg("printed \"%s\" (rc %d, stderr: %s)", elsewhere.out, elsewhere.rc, elsewhere.err);
    expect_out("(print 1)", "1\n");     /* and back on this one */
}

/* Buffers finalized after their VM is freed: their memory is released by
 * the allocator they came from, and the freed VM is not touched (its
 * counter was: a use after free under AddressSanitizer). */
static void test_buffers_outlive_their_vm(void **state)
{
    (void)state;
    vm_state *other = vm_new();
    assert_non_null(other);
    vm_open_libs(other);
    run_result r;
    run(other, "(define i 0) (while (< i 50) (make-buffer 1000) (set! i (+ i 1))) (print i)", &r);
    assert_int_equal(r.rc, 0);
    assert_string_equal(r.out, "50\n");
    vm_free(other);
    GC_gcollect();
    GC_invoke_finalizers();
}

static void test_deep_nesting_is_refused(void **state)
{
    (void)state;
    size_t depth = 20000, len = depth * 6 + 8;
    char *src = malloc(len);
    size_t at = 0;
    for (size_t i = 0; i < depth; i++)
        at += (size_t)sprintf(src + at, "(+ 1 ");
    for (size_t i = 0; i < depth; i++)
        src[at++] = ')';
    src[at] = '\0';
    expect_error(src, "syntax error: nesting deeper than 10000 levels");
    free(src);
}

/* vm_call of a builtin from C: its arguments are roots while it runs. */
static value b_collect_then_join(vm_state *v, int argc, value *argv)
{
    for (int i = 0; i < 3; i++)
        GC_gcollect();
    for (int i = 0; i < 200; i++)                 /* reuse what a collection freed */
        vm_make_vector(4, FIX(i));
    char buf[64];
    snprintf(buf, sizeof buf, "%s+%s", ((vstring *)argv[0])->s, ((vstring *)argv[1])->s);
    (void)argc;
    (void)v;
    return vm_make_string(buf, strlen(buf));
}

NOINLINE static value *fresh_args(void)
{
    value *args = malloc(2 * sizeof *args);      /* not scanned by Boehm */
    args[0] = vm_make_string("alpha", 5);
    args[1] = vm_make_string("beta", 4);
    return args;
}

NOINLINE static void clobber_stack(void)
{
    volatile char junk[16384];
    memset((char *)junk, 0, sizeof junk);
}

static void test_vm_call_builtin_roots_its_arguments(void **state)
{
    (void)state;
    vm_def_builtin(vm, "collect-then-join", 2, 2, b_collect_then_join);
    value *args = fresh_args();
    clobber_stack();
    value r = vm_call(vm, vm_get_global(vm, "collect-then-join"), 2, args);
    assert_string_equal(((vstring *)r)->s, "alpha+beta");
    free(args);
}

/* vm_call and OP_CALL share one native-call path: the same checks, the
 * same words, whether a script or C makes the call. */
static value b_call_with_none(vm_state *v, int argc, value *argv)
{
    (void)argc;
    return vm_call(v, argv[0], 0, NULL);
}

static void test_vm_call_and_op_call_say_the_same(void **state)
{
    (void)state;
    vm_def_builtin(vm, "call-with-none", 1, 1, b_call_with_none);
    expect_error("(call-with-none vector-ref)",
                 "error: bad arity: vector-ref takes 2 argument(s), got 0");
    expect_error("(vector-ref)", "error: bad arity: vector-ref takes 2 argument(s), got 0");
    expect_out("(print (call-with-none +))", "0\n");   /* variadic: no arguments is fine */
    expect_error("(call-with-none 5)", "error: type error: cannot call integer");
}

static void test_backtrace_builtin(void **state)
{
    (void)state;
    expect_out("(define (a) (backtrace))\n(define (b) (a))\n(b)\n",
               "Traceback (most recent call first):\n"
               "  a at test.crawl:1\n"
               "  b at test.crawl:2\n"
               "  <toplevel> at test.crawl:3\n");
}

int main(void)
{
    vm = test_vm(1);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_arithmetic),
        cmocka_unit_test(test_definitions_and_scope),
        cmocka_unit_test(test_closures),
        cmocka_unit_test(test_strings_and_vectors),
        cmocka_unit_test(test_shared_structure),
        cmocka_unit_test(test_buffers),
        cmocka_unit_test(test_errors_and_tracebacks),
        cmocka_unit_test(test_syntax_errors),
        cmocka_unit_test(test_backtrace_builtin),
        cmocka_unit_test(test_review_regressions),
        cmocka_unit_test(test_outside_regressions),
        cmocka_unit_test(test_eval_on_another_thread),
        cmocka_unit_test(test_buffers_outlive_their_vm),
        cmocka_unit_test(test_deep_nesting_is_refused),
        cmocka_unit_test(test_vm_call_builtin_roots_its_arguments),
        cmocka_unit_test(test_vm_call_and_op_call_say_the_same),
    };
    return cmocka_run_group_tests_name("crawlvm-language", tests, NULL, NULL);
}
