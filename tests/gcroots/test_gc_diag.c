/* crawl-boehm's GC-root diagnostics, each against a planted bug and
 * against correct code: the census, why-alive, root verification
 * (bad-root, double-root), unreported references, GC stress and
 * use-after-collect. Reports are collected through the report callback
 * (halt_on_error=0, log_path=/dev/null). */
#define GC_THREADS
#include <gc/gc.h>

#include "../support.h"

#include <crawl/boehm.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* ---- collecting reports and text ------------------------------------------------- */

static char reports[1 << 18];
static size_t reports_len;
static unsigned nreports;

static void keep_report(const char *text, void *ctx)
{
    (void)ctx;
    nreports++;
    reports_len += (size_t)snprintf(reports + reports_len, sizeof reports - reports_len, "%s",
                                    text);
    if (reports_len >= sizeof reports)
        reports_len = sizeof reports - 1;
}

static void clear_reports(void)
{
    reports[0] = '\0';
    reports_len = 0;
    nreports = 0;
}

/* What fn writes on a file descriptor, as a string (a temp file). */
static char text[1 << 16];
static const char *capture_fd(int (*fn)(const void *, int), const void *arg, int *rc)
{
    FILE *tmp = tmpfile();
    assert_non_null(tmp);
    *rc = fn(arg, fileno(tmp));
    rewind(tmp);
    size_t n = fread(text, 1, sizeof text - 1, tmp);
    text[n] = '\0';
    fclose(tmp);
    return text;
}

static int census_to(const void *unused, int fd)
{
    (void)unused;
    crawl_gc_census(fd);
    return 0;
}

/* Run fn on a new Boehm-registered thread with a fresh, zeroed stack: no
 * stale words from earlier tests, which conservative scanning would see. */
static void run_on_fresh_thread(void *(*fn)(void *))
{
    pthread_t t;
    void *stack = start_on_fresh_stack(&t, fn, NULL);   /* GC_pthread_create */
    pthread_join(t, NULL);
    munmap(stack, FRESH_STACK_SIZE);
}

/* ---- a Frame type reporting what the test plants ------------------------------------ */

typedef struct planted {
    crawl_frame frame;
    void *slot[3];
    unsigned flags[3];
    unsigned n;
    int twice;                           /* report slot[0] a second time */
} planted;

static void planted_roots(crawl_frame *f, crawl_roots *sink)
{
    planted *p = (planted *)f;
    for (unsigned i = 0; i < p->n; i++)
        crawl_roots_report(sink, &p->slot[i], p->flags[i]);
    if (p->twice)
        crawl_roots_report(sink, &p->slot[0], p->flags[0]);
}

static int planted_describe(const crawl_frame *f, char *buf, size_t len)
{
    return snprintf(buf, len, "planted x%u", ((const planted *)f)->n);
}

static const crawl_frame_type planted_type = {
    .name = "planted",
    .describe = planted_describe,
    .enum_roots = planted_roots,
};

typedef struct obj {
    void *field[4];
} obj;

/* ---- the census ----------------------------------------------------------------- */

typedef struct found_root {
    void **want;
    crawl_gc_root got;
    int n;
} found_root;

static void find_slot(const crawl_gc_root *r, void *ctx)
{
    found_root *f = ctx;
    if (r->slot == f->want) {
        f->got = *r;
        f->n++;
    }
}

NOINLINE static void census_holder(void)
{
    obj *a = crawl_gc_malloc(sizeof *a);
    obj *b = crawl_gc_malloc(sizeof *b);
    CRAWL_GCPROTECT_BEGIN(a, b);
    found_root f = {.want = (void **)&b};
    unsigned n = crawl_gc_census_each(find_slot, &f);
    assert_true(n >= 2);
    assert_int_equal(f.n, 1);
    assert_int_equal(f.got.thread, crawl_thread_number());
    assert_string_equal(f.got.frame_type, "gcprotect");
    assert_ptr_equal(f.got.value, b);
    assert_ptr_equal(f.got.object, b);
    assert_int_equal(f.got.object_size, sizeof(obj));
    assert_non_null(strstr(f.got.native, "census_holder"));   /* the native frame holding it */
    assert_true(f.got.alloc_stack != 0);
    assert_int_equal(crawl_gc_alloc_stack(b), f.got.alloc_stack);
    int rc;
    const char *out = capture_fd(census_to, NULL, &rc);
    char want[200];
    snprintf(want, sizeof want, "^thread T%d:$", crawl_thread_number());
    t_expect_lines(out, (const char *const[]){
        "^crawl-boehm root census",
        want,
        "^  #[0-9]+ Frame 'gcprotect' 0x[0-9a-f]+ \\(\\[GCPROTECT Frame: 2 slot\\(s\\)\\]\\) in "
        "census_holder .*test_gc_diag.c:[0-9]+: slot 0x[0-9a-f]+ = 0x[0-9a-f]+ -> 32-byte object",
        "^    #0 0x[0-9a-f]+ in crawl_gc_malloc ",
        "^    #1 0x[0-9a-f]+ in census_holder .*test_gc_diag.c:[0-9]+$",
        "^[0-9]+ roots$",
        NULL});
    CRAWL_GCPROTECT_END();
}

static void test_census(void **state)
{
    (void)state;
    census_holder();
}

/* Another thread's roots: the census names the native function holding its
 * Frame too, found by a scan of that thread's stack (it cannot be walked
 * from the collecting thread). */
static pthread_barrier_t parked, released;
static void **parked_slot;

NOINLINE static void parked_holder(void)
{
    obj *mine = crawl_gc_malloc(sizeof *mine);
    CRAWL_GCPROTECT_BEGIN(mine);
    parked_slot = (void **)&mine;
    pthread_barrier_wait(&parked);
    pthread_barrier_wait(&released);     /* in a call: its return address is below the Frame */
    CRAWL_GCPROTECT_END();
}

/* Zero the stack below the caller: alloca, on the thread's own stack even
 * where AddressSanitizer moves arrays to a fake stack. */
NOINLINE static void scrub_below(void)
{
    char *p = __builtin_alloca(16384);
    memset(p, 0, 16384);
    __asm__ volatile("" : : "r"(p) : "memory");
}

static void *park(void *unused)
{
    (void)unused;
    crawl_thread_attach();
    /* the scan takes the first code pointer below the Frame: attach's
     * callees leave theirs where parked_holder's locals will be (README:
     * a stale code pointer could be named instead) */
    scrub_below();
    parked_holder();
    crawl_thread_detach();
    return NULL;
}

static void test_census_other_thread(void **state)
{
    (void)state;
    pthread_barrier_init(&parked, NULL, 2);
    pthread_barrier_init(&released, NULL, 2);
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, park, NULL), 0);   /* GC_pthread_create */
    pthread_barrier_wait(&parked);
    found_root f = {.want = parked_slot};
    crawl_gc_census_each(find_slot, &f);
    pthread_barrier_wait(&released);
    pthread_join(t, NULL);
    assert_int_equal(f.n, 1);
    assert_true((int)f.got.thread != crawl_thread_number());
    if (!strstr(f.got.native, "parked_holder") || !strstr(f.got.native, "(stack scan)"))
        fail_msg("the other thread's Frame lives in '%s'", f.got.native);
}

/* ---- why alive ------------------------------------------------------------------ */

obj *gc_diag_global;   /* not static: stores to it cannot be dropped */

static int why(const void *o, int fd) { return crawl_gc_why(o, fd); }

NOINLINE static void why_paths(void)
{
    obj *a = crawl_gc_malloc(sizeof *a);
    a->field[2] = crawl_gc_malloc(sizeof(obj));   /* offset 16 */
    int rc;
    const char *out;
    CRAWL_GCPROTECT_BEGIN(a);
    out = capture_fd(why, a, &rc);
    assert_int_equal(rc, 0);
    t_expect_lines(out, (const char *const[]){
        "^why is 0x[0-9a-f]+ \\(32 bytes\\) alive: reached from roots reported by Frames, 0 steps:$",
        "^  root: slot 0x[0-9a-f]+ reported by Frame 'gcprotect'",
        "<- the object$",
        "was allocated by thread T[0-9]+ here:$",
        "^    #1 0x[0-9a-f]+ in why_paths ",
        NULL});
    out = capture_fd(why, a->field[2], &rc);
    assert_int_equal(rc, 1);
    t_expect_lines(out, (const char *const[]){
        "reached from roots reported by Frames, 1 step:$",
        "^  -> holds 0x[0-9a-f]+ \\(32-byte object\\)$",
        "^  -> at offset 16 of that object: 0x[0-9a-f]+ \\(32-byte object\\)  <- the object$",
        NULL});
    CRAWL_GCPROTECT_END();
    gc_diag_global = crawl_gc_malloc(sizeof *gc_diag_global);
    out = capture_fd(why, gc_diag_global, &rc);
    assert_int_equal(rc, 0);
    t_expect_lines(out, (const char *const[]){"reached from static data, 0 steps:$",
                                              "^  root: static data of ", NULL});
    gc_diag_global = NULL;
}

/* int why_in_rbx(const void *unused, int fd): crawl_gc_why(p, fd) of a
 * fresh 32-byte object p that its caller holds in rbx alone (in no word
 * of any frame that the search scans: crawl_gc_why's own frames save it).
 * In assembly, so that no compiler keeps a copy on the stack. */
__asm__(".text\n"
        ".type why_in_rbx, @function\n"
        "why_in_rbx:\n"
        ".cfi_startproc\n"
        "push %rbx\n"
        ".cfi_def_cfa_offset 16\n"
        ".cfi_offset %rbx, -16\n"
        "push %r12\n"
        ".cfi_def_cfa_offset 24\n"
        ".cfi_offset %r12, -24\n"
        "sub $8, %rsp\n"
        ".cfi_def_cfa_offset 32\n"
        "mov %esi, %r12d\n"
        "mov $32, %edi\n"
        "call crawl_gc_malloc@PLT\n"
        "mov %rax, %rbx\n"
        "mov %rax, %rdi\n"
        "mov %r12d, %esi\n"
        "call crawl_gc_why@PLT\n"
        "add $8, %rsp\n"
        ".cfi_def_cfa_offset 24\n"
        "pop %r12\n"
        ".cfi_def_cfa_offset 16\n"
        "pop %rbx\n"
        ".cfi_def_cfa_offset 8\n"
        "ret\n"
        ".cfi_endproc\n"
        ".size why_in_rbx, .-why_in_rbx\n");
int why_in_rbx(const void *unused, int fd);

/* An object held only in a local of the caller's frame: a stack word (also
 * without libunwind, where the walk that recovers registers fails: that
 * lost every stack root) */
NOINLINE static int why_from_local(const void *unused, int fd)
{
    (void)unused;
    obj *volatile held = crawl_gc_malloc(sizeof(obj));
    int rc = crawl_gc_why((const void *)held, fd);
    held = NULL;
    return rc;
}

NOINLINE static void why_stack_word(void)
{
    int rc;
    const char *out = capture_fd(why_from_local, NULL, &rc);
    assert_int_equal(rc, 0);
    t_expect_lines(out, (const char *const[]){
        "^why is 0x[0-9a-f]+ \\(32 bytes\\) alive: reached from this thread's stack and "
        "registers, 0 steps:$",
        "^  root: stack word 0x[0-9a-f]+ \\(sp\\+[0-9]+\\) in the frame of why_from_local ",
        NULL});
}

/* An object the caller holds only in a callee-saved register is alive
 * (Boehm scans registers): why names the register (it said "no root
 * reaches it; the next collection may free it"). */
NOINLINE static void why_register(void)
{
    if (getenv("CRAWL_TEST_NO_LIBUNWIND")) {
        print_message("no libunwind: no register roots, skipped\n");
        return;
    }
    int rc;
    const char *out = capture_fd(why_in_rbx, NULL, &rc);
    assert_int_equal(rc, 0);
    t_expect_lines(out, (const char *const[]){
        "^why is 0x[0-9a-f]+ \\(32 bytes\\) alive: reached from this thread's stack and "
        "registers, 0 steps:$",
        "^  root: register rbx of .*why_in_rbx.* at its call of crawl_gc_why \\(scanned "
        "conservatively\\)$",
        NULL});
}

/* A precise trace for Boehm's normal kind that knows only field[0]: why
 * then follows that field, and no longer field[2]. */
static void first_field_only(const void *o, size_t size, crawl_gc_visit_fn visit, void *ctx)
{
    (void)size;
    visit(&((obj *const)o)->field[0], ctx);
}

NOINLINE static void precise_trace(void)
{
    obj *a = crawl_gc_malloc(sizeof *a);
    a->field[0] = crawl_gc_malloc(sizeof(obj));
    a->field[2] = crawl_gc_malloc(sizeof(obj));
    int rc;
    const char *out;
    CRAWL_GCPROTECT_BEGIN(a);
    assert_int_equal(crawl_gc_set_trace(1, first_field_only), 0);
    out = capture_fd(why, a->field[0], &rc);
    assert_int_equal(rc, 1);
    t_expect_lines(out, (const char *const[]){"reached from roots reported by Frames",
                                              "^  -> at offset 0 of that object: ", NULL});
    out = capture_fd(why, a->field[2], &rc);
    assert_null(strstr(out, "reached from roots reported by Frames"));   /* not through a */
    assert_int_equal(crawl_gc_set_trace(1, NULL), 0);
    out = capture_fd(why, a->field[2], &rc);
    assert_int_equal(rc, 1);
    t_expect_lines(out, (const char *const[]){"^  -> at offset 16 of that object: ", NULL});
    CRAWL_GCPROTECT_END();
    assert_int_equal(crawl_gc_set_trace(-1, first_field_only), -EINVAL);
}

static void test_why(void **state)
{
    (void)state;
    why_paths();
    why_stack_word();
    why_register();
    precise_trace();
    int rc;
    const char *out = capture_fd(why, NULL, &rc);
    assert_int_equal(rc, -1);
    assert_string_equal(out, "crawl_gc_why: NULL is not a GC object\n");
    int local;
    out = capture_fd(why, &local, &rc);
    assert_int_equal(rc, -1);
    assert_non_null(strstr(out, "is not in the GC heap"));
}

/* ---- root verification ---------------------------------------------------------- */

static int odd_is_immediate(uintptr_t v) { return (v & 1) != 0; }

NOINLINE static obj *planted_alloc(void) { return crawl_gc_malloc(sizeof(obj)); }

NOINLINE static void plant_and_verify(void)
{
    obj *o = planted_alloc();
    int on_stack;
    planted p = {.n = 3};
    p.slot[0] = (char *)o + 8;           /* interior, without CRAWL_ROOT_INTERIOR */
    p.slot[1] = &on_stack;               /* not in the GC heap */
    p.slot[2] = (void *)(uintptr_t)0x2a1;    /* an immediate (odd) */
    crawl_frame_push(&p.frame, &planted_type);
    clear_reports();
    unsigned problems = crawl_gc_verify();
    crawl_frame_pop(&p.frame);
    assert_int_equal(problems, 2);
    t_expect_lines(reports, (const char *const[]){
        "ERROR: crawl-boehm: bad-root: slot 0x[0-9a-f]+ holds 0x[0-9a-f]+: 8 bytes into the "
        "32-byte object at 0x[0-9a-f]+ \\(an interior pointer in a slot not reported with "
        "CRAWL_ROOT_INTERIOR\\)",
        "^  reported by Frame 'planted' at 0x[0-9a-f]+ \\(planted x3\\)",
        "^  which lives in the frame of plant_and_verify .*test_gc_diag.c:[0-9]+$",
        "^  the 32-byte object at 0x[0-9a-f]+ was allocated by thread T[0-9]+ here:$",
        "^    #1 0x[0-9a-f]+ in planted_alloc .*test_gc_diag.c:[0-9]+$",
        "^SUMMARY: crawl-boehm: bad-root$",
        "ERROR: crawl-boehm: bad-root: .*: not NULL, not an immediate, and not in the GC heap",
        "^SUMMARY: crawl-boehm: bad-root$",
        NULL});
    assert_null(strstr(reports, "0x2a1"));    /* the immediate passed */

    /* the same slots, declared right: interior allowed, no bad value */
    planted ok = {.n = 2, .flags = {CRAWL_ROOT_INTERIOR, 0}};
    ok.slot[0] = (char *)o + 8;
    ok.slot[1] = o;
    crawl_frame_push(&ok.frame, &planted_type);
    clear_reports();
    assert_int_equal(crawl_gc_verify(), 0);
    crawl_frame_pop(&ok.frame);
    assert_int_equal(nreports, 0);

    /* a slot reported twice */
    planted twice = {.n = 1, .twice = 1};
    twice.slot[0] = o;
    crawl_frame_push(&twice.frame, &planted_type);
    clear_reports();
    assert_int_equal(crawl_gc_verify(), 1);
    crawl_frame_pop(&twice.frame);
    t_expect_lines(reports, (const char *const[]){
        "ERROR: crawl-boehm: double-root: slot 0x[0-9a-f]+ reported twice in one collection",
        "^  reported by Frame 'planted'", "^SUMMARY: crawl-boehm: double-root$", NULL});
    __asm__ volatile("" : : "r"(o) : "memory");
}

static void test_verify_planted_bugs(void **state)
{
    (void)state;
    crawl_gc_set_immediate_fn(odd_is_immediate);
    plant_and_verify();
    crawl_gc_set_immediate_fn(NULL);
}

/* gc_verify=1: every collection checks the roots; the report comes at the
 * next crawl_gc_* call. */
NOINLINE static void verify_every_collection(void)
{
    int on_stack;
    planted p = {.n = 1};
    p.slot[0] = &on_stack;
    crawl_frame_push(&p.frame, &planted_type);
    assert_int_equal(crawl_sanitizer_set_options("gc_verify=1"), 0);
    (void)crawl_gc_malloc(8);            /* reads the new options */
    clear_reports();
    GC_gcollect();
    assert_int_equal(nreports, 0);       /* not from inside the collection */
    (void)crawl_gc_malloc(8);
    crawl_frame_pop(&p.frame);
    assert_int_equal(crawl_sanitizer_set_options("gc_verify=0"), 0);
    assert_true(nreports >= 1);
    assert_non_null(strstr(reports, "bad-root"));
}

static void test_verify_at_every_collection(void **state)
{
    (void)state;
    verify_every_collection();
}

/* A collection that sees far more roots than the one before it: the
 * double-root set grows inside the collection (it used to fill up and spin
 * forever with the world stopped). */
#define MANY 20000
typedef struct many {
    crawl_frame frame;
    void *slot[MANY];
} many;

static void many_roots(crawl_frame *f, crawl_roots *sink)
{
    for (int i = 0; i < MANY; i++)
        crawl_roots_report(sink, &((many *)f)->slot[i], 0);
}

static const crawl_frame_type many_type = {.name = "many", .enum_roots = many_roots};

static void test_verify_many_more_roots(void **state)
{
    (void)state;
    clear_reports();
    assert_int_equal(crawl_sanitizer_set_options("gc_verify=1"), 0);
    (void)crawl_gc_malloc(8);            /* reads the option */
    GC_gcollect();                       /* a verifying collection with few roots */
    {
        many local;                      /* a Frame lives on the stack: 160 KiB */
        for (int i = 0; i < MANY; i++)
            local.slot[i] = i % 2 ? crawl_gc_malloc(16) : NULL;
        crawl_frame_push(&local.frame, &many_type);
        GC_gcollect();                   /* 20,000 more roots than the last one saw */
        (void)crawl_gc_malloc(8);        /* reports what it found: nothing */
        crawl_frame_pop(&local.frame);
    }
    assert_int_equal(crawl_sanitizer_set_options("gc_verify=0"), 0);
    assert_int_equal(nreports, 0);
    assert_true(crawl_boehm_last_root_count() >= MANY);
}

/* ---- unreported references -------------------------------------------------------- */

NOINLINE static void *correct_code(void *unused)
{
    (void)unused;
    crawl_thread_attach();
    obj *a = crawl_gc_malloc(sizeof *a);
    a->field[0] = crawl_gc_malloc(sizeof(obj));
    CRAWL_GCPROTECT_BEGIN(a);
    clear_reports();
    unsigned n = crawl_gc_verify();
    if (n)
        fprintf(stderr, "%s", reports);
    assert_int_equal(n, 0);
    CRAWL_GCPROTECT_END();
    crawl_thread_detach();
    return NULL;
}

static void test_verify_silent_on_correct_code(void **state)
{
    (void)state;
    run_on_fresh_thread(correct_code);
}

NOINLINE static obj *forgotten_alloc(void) { return crawl_gc_malloc(sizeof(obj)); }

NOINLINE static void *forgets_a_root(void *unused)
{
    (void)unused;
    crawl_thread_attach();
    obj *volatile only_here = forgotten_alloc();   /* a C local no Frame reports */
    clear_reports();
    unsigned n = crawl_gc_verify();
    if (n < 1 || !strstr(reports, "unreported-reference"))
        fprintf(stderr, "verify found %u:\n%s", n, reports);
    assert_true(n >= 1);
    t_expect_lines(reports, (const char *const[]){
        "ERROR: crawl-boehm: unreported-reference: 0x[0-9a-f]+ \\(32-byte object\\) is alive "
        "only through a word the collector scans conservatively",
        "^  the word at 0x[0-9a-f]+ \\(sp\\+[0-9]+\\) in the frame of forgets_a_root "
        ".*test_gc_diag.c:[0-9]+$",
        "^    #1 0x[0-9a-f]+ in forgotten_alloc .*test_gc_diag.c:[0-9]+$",
        "^SUMMARY: crawl-boehm: unreported-reference$",
        NULL});
    char want[40];
    snprintf(want, sizeof want, "%p", (void *)only_here);
    assert_non_null(strstr(reports, want));
    crawl_thread_detach();
    return NULL;
}

static void test_unreported_reference(void **state)
{
    (void)state;
    run_on_fresh_thread(forgets_a_root);
}

/* One object kept by words in two frames: the report lists both, newest
 * first (it listed the first only: in a -O0 build of crawl, that was a
 * stale copy in a frame that never held it, and the real one went
 * unnamed). */
NOINLINE static void *holds_it_too(obj *a)
{
    obj *volatile again = a;            /* the newer frame's word */
    clear_reports();
    unsigned n = crawl_gc_verify();
    /* this object's report (a stale word from an earlier test may add
     * another's) */
    char want[64];
    snprintf(want, sizeof want, "unreported-reference: %p ", (void *)a);
    const char *at = strstr(reports, want);
    if (n < 1 || !at)
        fprintf(stderr, "verify found %u:\n%s", n, reports);
    assert_true(n >= 1);
    assert_non_null(at);
    char mine[4096];
    const char *end = strstr(at, "SUMMARY:");
    size_t len = end ? (size_t)(end - at) + strlen("SUMMARY: crawl-boehm: unreported-reference") : strlen(at);
    snprintf(mine, sizeof mine, "ERROR: crawl-boehm: %.*s", (int)len, at);
    t_expect_lines(mine, (const char *const[]){
        "ERROR: crawl-boehm: unreported-reference: 0x[0-9a-f]+ \\(32-byte object\\)",
        "^  the word at 0x[0-9a-f]+ \\(sp\\+[0-9]+\\) in the frame of holds_it_too "
        ".*test_gc_diag.c:[0-9]+$",
        "^  the word at 0x[0-9a-f]+ \\(sp\\+[0-9]+\\) in the frame of holds_it_twice "
        ".*test_gc_diag.c:[0-9]+$",
        "^  \\(a slot its function never wrote may hold a stale copy from an earlier call\\)$",
        "^SUMMARY: crawl-boehm: unreported-reference$",
        NULL});
    return (void *)again->field[0];
}

NOINLINE static void *holds_it_twice(void *unused)
{
    (void)unused;
    crawl_thread_attach();
    obj *volatile mine = forgotten_alloc();   /* the older frame's word */
    void *r = holds_it_too(mine);
    (void)mine->field[0];
    crawl_thread_detach();
    return r;
}

static void test_unreported_reference_in_two_frames(void **state)
{
    (void)state;
    run_on_fresh_thread(holds_it_twice);
}

/* ---- GC stress ------------------------------------------------------------------- */

static void test_gc_stress(void **state)
{
    (void)state;
    assert_int_equal(crawl_sanitizer_set_options("gc_stress=1"), 0);
    (void)crawl_gc_malloc(8);
    GC_word before = GC_get_gc_no();
    for (int i = 0; i < 10; i++)
        (void)crawl_gc_malloc(16);
    GC_word after = GC_get_gc_no();
    assert_int_equal(crawl_sanitizer_set_options("gc_stress=3"), 0);
    (void)crawl_gc_malloc(8);
    GC_word before3 = GC_get_gc_no();
    for (int i = 0; i < 30; i++)
        (void)crawl_gc_malloc(16);
    GC_word after3 = GC_get_gc_no();
    assert_int_equal(crawl_sanitizer_set_options("gc_stress=0"), 0);
    assert_int_equal(after - before, 10);     /* one collection per allocation */
    assert_int_equal(after3 - before3, 10);   /* one per three */
}

/* gc_stress_transitions: a collection at every transition Frame push. */
NOINLINE static void push_transitions(int n)
{
    for (int i = 0; i < n; i++) {
        crawl_transition t;
        crawl_transition_push(&t, NULL);
        crawl_frame_pop(&t.frame);
    }
}

static void test_gc_stress_transitions(void **state)
{
    (void)state;
    GC_word before = GC_get_gc_no();
    push_transitions(5);
    assert_int_equal(GC_get_gc_no() - before, 0);
    assert_int_equal(crawl_sanitizer_set_options("gc_stress_transitions=1"), 0);
    before = GC_get_gc_no();
    push_transitions(5);
    GC_word stressed = GC_get_gc_no() - before;
    assert_int_equal(crawl_sanitizer_set_options("gc_stress_transitions=0"), 0);
    before = GC_get_gc_no();
    push_transitions(5);
    assert_int_equal(stressed, 5);
    assert_int_equal(GC_get_gc_no() - before, 0);
}

/* ---- use after collect ----------------------------------------------------------- */

/* The only copies, XOR'ed: the collector cannot see them. Many objects,
 * so that a stray copy of a pointer left in a register or a dead stack
 * slot (which keeps one alive) cannot keep them all. */
#define NLOST 64
static uintptr_t hidden[NLOST];
#define HIDE 0x5a5a5a5a5a5a5a5aull

NOINLINE static void lost_alloc(void)
{
    for (int i = 0; i < NLOST; i++) {
        obj *o = crawl_gc_malloc(sizeof *o);
        o->field[0] = (void *)0x1234;
        hidden[i] = (uintptr_t)o ^ HIDE;
    }
}

static int GC_CALLBACK never_stop(void) { return 0; }

NOINLINE static void scrub_stack(void)
{
    volatile char pad[16384];
    memset((char *)pad, 0, sizeof pad);
}

NOINLINE static void *use_after_collect(void *unused)
{
    (void)unused;
    crawl_thread_attach();
    lost_alloc();
    scrub_stack();
    /* Boehm sweeps lazily: a GC_try_to_collect whose stop function is not
     * GC_never_stop_func first sweeps what the previous collection found,
     * which is when the disclaim hook quarantines it */
    GC_try_to_collect(never_stop);
    GC_try_to_collect(never_stop);
    obj *o = NULL;
    for (int i = 0; i < NLOST && !o; i++) {
        obj *x = (obj *)(hidden[i] ^ HIDE);
        unsigned char first;
        memcpy(&first, (const void *)x, 1);
        if (first == 0xdb)               /* poisoned: collected */
            o = x;
    }
    if (!o)
        fail_msg("none of %d lost objects was collected", NLOST);
    clear_reports();
    assert_int_equal(crawl_gc_check(&o->field[0], sizeof(void *), 0), 1);
    t_expect_lines(reports, (const char *const[]){
        "ERROR: AddressSanitizer: use-after-collect on address 0x[0-9a-f]+$",
        "^READ of size 8 at 0x[0-9a-f]+ thread T[0-9]+$",
        "^    #0 0x[0-9a-f]+ in use_after_collect .*test_gc_diag.c:[0-9]+$",
        "is located 0 bytes inside of 32-byte object",
        "^collected by collection #[0-9]+, which thread T[0-9]+ started here:$",
        "^    #[0-9]+ 0x[0-9a-f]+ in use_after_collect .*test_gc_diag.c:[0-9]+$",
        "^previously allocated by thread T[0-9]+ here:$",
        "^    #1 0x[0-9a-f]+ in lost_alloc .*test_gc_diag.c:[0-9]+$",
        "^SUMMARY: AddressSanitizer: use-after-collect$",
        NULL});
    int rc;
    const char *out = capture_fd(why, o, &rc);          /* a freed pointer: a clear answer */
    assert_int_equal(rc, -1);
    t_expect_lines(out, (const char *const[]){
        "^why is 0x[0-9a-f]+ alive: it is not: collection #[0-9]+ collected it", NULL});
    crawl_thread_detach();
    return NULL;
}

static void test_use_after_collect(void **state)
{
    (void)state;
    assert_int_equal(crawl_sanitizer_set_options("gc_poison_collected=1"), 0);
    run_on_fresh_thread(use_after_collect);
    assert_int_equal(crawl_sanitizer_set_options("gc_poison_collected=0"), 0);
}

/* ---- checked accesses and bad input ---------------------------------------------------- */

static void test_check_bounds_and_bad_input(void **state)
{
    (void)state;
    obj *o = crawl_gc_malloc(20);
    clear_reports();
    assert_int_equal(crawl_gc_check(o, 20, 1), 0);
    assert_int_equal(crawl_gc_check(NULL, 8, 0), 0);          /* nothing to check */
    int local;
    assert_int_equal(crawl_gc_check(&local, 4, 0), 0);        /* not the GC heap */
    assert_int_equal(nreports, 0);
    assert_int_equal(crawl_gc_check((char *)o + 16, 8, 0), 1);
    t_expect_lines(reports, (const char *const[]){
        "ERROR: AddressSanitizer: heap-buffer-overflow on address 0x[0-9a-f]+$",
        "^    #0 0x[0-9a-f]+ in test_check_bounds_and_bad_input ",
        "is located 0 bytes after 20-byte object", NULL});   /* its first bad byte */
    char at[64];
    snprintf(at, sizeof at, "\n%p is located 0 bytes after", (void *)((char *)o + 20));
    assert_non_null(strstr(reports, at));
    /* with neither gc_alloc_stacks nor gc_poison_collected, crawl records no
     * object: nothing is checked (as boehm.h says) */
    assert_int_equal(crawl_sanitizer_set_options("gc_alloc_stacks=0"), 0);
    obj *plain = crawl_gc_malloc(20);
    assert_int_equal(crawl_gc_check((char *)plain + 16, 8, 0), 0);
    assert_int_equal(crawl_sanitizer_set_options("gc_alloc_stacks=1"), 0);
    assert_int_equal(crawl_gc_alloc_stack(NULL), 0);
    assert_int_equal(crawl_gc_census_each(NULL, NULL), 0);
}

int main(void)
{
    GC_INIT();
    GC_allow_register_threads();
    crawl_thread_attach();
    crawl_boehm_install();
    crawl_set_report_callback(keep_report, NULL);
    if (crawl_sanitizer_set_options("halt_on_error=0:log_path=/dev/null:gc_alloc_stacks=1") != 0)
        return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_census),
        cmocka_unit_test(test_census_other_thread),
        cmocka_unit_test(test_why),
        cmocka_unit_test(test_verify_planted_bugs),
        cmocka_unit_test(test_verify_at_every_collection),
        cmocka_unit_test(test_verify_many_more_roots),
        cmocka_unit_test(test_verify_silent_on_correct_code),
        cmocka_unit_test(test_unreported_reference),
        cmocka_unit_test(test_unreported_reference_in_two_frames),
        cmocka_unit_test(test_gc_stress),
        cmocka_unit_test(test_gc_stress_transitions),
        cmocka_unit_test(test_use_after_collect),
        cmocka_unit_test(test_check_bounds_and_bad_input),
    };
    return cmocka_run_group_tests_name("gc-diagnostics", tests, NULL, NULL);
}
