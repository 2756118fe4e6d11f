/* crawlvm on Boehm: objects reachable only from the VM's (unscanned) value
 * stack survive collections because crawl reports them, and die when the
 * roots are withheld. Built twice: with crawl-boehm installed, and as
 * test_vm_gc_no_adapter without it (then those objects must die). */
#include "../support.h"
#include "vm_support.h"

#include <gc/gc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static vm_state *vm;

/* Disappearing links live in malloc'ed memory, which Boehm does not scan:
 * they observe objects without keeping them alive. */
#define MAX_TRACKED 4096
static void **links[MAX_TRACKED];
static int ntracked;

static value b_track(vm_state *v, int argc, value *argv)
{
    (void)argc;
    if (ntracked == MAX_TRACKED)
        vm_error(v, "too many tracked objects");
    void **link = malloc(sizeof *link);
    *link = (void *)argv[0];
    GC_general_register_disappearing_link(link, (void *)argv[0]);
    links[ntracked++] = link;
    return V_NIL;
}

static value b_alive(vm_state *v, int argc, value *argv)
{
    (void)v, (void)argc, (void)argv;
    int n = 0;
    for (int i = 0; i < ntracked; i++)
        n += *links[i] != NULL;
    return FIX(n);
}

static void untrack_all(void)
{
    for (int i = 0; i < ntracked; i++) {
        GC_unregister_disappearing_link(links[i]);
        free(links[i]);
    }
    ntracked = 0;
}

/* 200 nested calls, each holding a fresh vector in a local and nowhere
 * else; at the bottom, collect three times and count the survivors. */
static const char hold_script[] =
    "(define (hold n)\n"
    "  (let ((v (make-vector 4 n)))\n"
    "    (track v)\n"
    "    (if (> n 0) (hold (- n 1)) (begin (gc) (gc) (gc) (alive)))))\n"
    "(print (hold 199))\n";

static void keep_first_report(const char *text, void *ctx)
{
    char *buf = ctx;
    if (!buf[0])
        snprintf(buf, 1 << 16, "%s", text);
}

static int survivors(int withhold)
{
    run_result r;
    vm->withhold_roots = withhold;
    run(vm, hold_script, &r);
    vm->withhold_roots = 0;
    untrack_all();
    if (r.rc != 0)
        fail_msg("script failed: %s", r.err);
    return atoi(r.out);
}

static void test_vm_stack_objects_survive_only_through_crawl(void **state)
{
    (void)state;
    int kept = survivors(0), withheld = survivors(1);
    print_message("adapter %s: %d of 200 survive with roots reported, %d with roots withheld\n",
                  HAVE_ADAPTER ? "installed" : "not installed", kept, withheld);
    /* conservative scanning of the C stack may still see a few stale pointers */
    assert_true(withheld <= 10);
    if (HAVE_ADAPTER)
        assert_int_equal(kept, 200);
    else
        assert_true(kept <= 10);         /* without the adapter nothing keeps them */
}

static void test_contents_survive_many_collections(void **state)
{
    (void)state;
    if (!HAVE_ADAPTER)
        skip();
    run_result r;
    run(vm,
        /* deep recursion: every level's vector must be intact after collections below */
        "(define (deep n)\n"
        "  (let ((v (vector n (str n))))\n"
        "    (if (> n 0)\n"
        "        (let ((below (deep (- n 1))))\n"
        "          (assert (= (vector-ref v 0) n) \"vector clobbered\")\n"
        "          (assert (equal? (vector-ref v 1) (str n)) \"string clobbered\")\n"
        "          (+ below n))\n"
        "        (begin (gc) (gc) 0))))\n"
        "(print (deep 5000))\n"
        /* a million short-lived objects, a collection forced every 10000 */
        "(define keep (make-vector 100 nil))\n"
        "(define i 0)\n"
        "(define before (gc-count))\n"
        "(while (< i 1000000)\n"
        "  (let ((v (vector i (* i 2))))\n"
        "    (if (= (remainder i 10000) 0)\n"
        "        (begin (vector-set! keep (quotient i 10000) v) (gc))))\n"
        "  (set! i (+ i 1)))\n"
        "(define (check k)\n"
        "  (if (< k 100)\n"
        "      (begin (assert (= (vector-ref (vector-ref keep k) 1) (* 2 (* k 10000))))\n"
        "             (check (+ k 1)))\n"
        "      #t))\n"
        "(print (check 0) (>= (- (gc-count) before) 100))\n",
        &r);
    if (r.rc != 0)
        fail_msg("script failed: %s", r.err);
    assert_string_equal(r.out, "12502500\n#t #t\n");
}

/* A missing root in crawlvm itself (the segment's roots withheld), caught
 * by the sanitizer mode: the vector dies while the script still holds it,
 * and reading it reports use-after-collect with the script function that
 * allocated it, instead of reading reused memory. */
static void test_missing_root_is_use_after_collect(void **state)
{
    (void)state;
    if (!HAVE_ADAPTER)
        skip();
    assert_int_equal(crawl_sanitizer_set_options(
                         "halt_on_error=0:log_path=/dev/null:gc_alloc_stacks=1:gc_poison_collected=1"),
                     0);
    static char report[1 << 16];
    report[0] = '\0';
    crawl_set_report_callback(keep_first_report, report);
    vm->check_objects = 1;
    run_result r;
    vm->withhold_roots = 1;
    /* 12 vectors, each held only in a local of `hold` (on the VM stack,
     * whose roots are withheld); conservative scanning may keep the last
     * few through stray C words, not the first */
    run(vm,
        "(define (make n) (make-vector 2 n))\n"
        "(define (hold)\n"
        "  (let ((a (make 1)) (b (make 2)) (c (make 3)) (d (make 4)) (e (make 5)) (f (make 6))\n"
        "        (g (make 7)) (h (make 8)) (i (make 9)) (j (make 10)) (k (make 11)) (l (make 12)))\n"
        "    (gc) (gc) (gc)\n"
        "    (+ (vector-ref a 0) (vector-ref b 0) (vector-ref c 0) (vector-ref d 0))))\n"
        "(print (hold))\n",
        &r);
    vm->withhold_roots = 0;
    vm->check_objects = 0;
    crawl_set_report_callback(NULL, NULL);
    assert_int_equal(crawl_sanitizer_set_options("gc_alloc_stacks=0:gc_poison_collected=0"), 0);
    if (!report[0])
        fail_msg("no report; the script printed '%s', stderr: %s", r.out, r.err);
    t_expect_lines(report, (const char *const[]){
        "ERROR: AddressSanitizer: use-after-collect on address 0x[0-9a-f]+$",
        "^    #[0-9]+ in hold test.crawl:6$",
        "^collected by collection #[0-9]+",
        "^previously allocated by thread T0 here:$",
        "^    #[0-9]+ in make test.crawl:1$",
        "^    #[0-9]+ in hold test.crawl:3$",
        NULL});
}

int main(void)
{
    vm = test_vm(HAVE_ADAPTER);
    vm_def_builtin(vm, "track", 1, 1, b_track);
    vm_def_builtin(vm, "alive", 0, 0, b_alive);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_vm_stack_objects_survive_only_through_crawl),
        cmocka_unit_test(test_contents_survive_many_collections),
        cmocka_unit_test(test_missing_root_is_use_after_collect),
    };
    return cmocka_run_group_tests_name(HAVE_ADAPTER ? "crawlvm-gc" : "crawlvm-gc-no-adapter",
                                       tests, NULL, NULL);
}
