/* GC roots through Frames: crawl_enum_roots, GCPROTECT, every thread's roots. */
#include "../support.h"

#include <pthread.h>
#include <string.h>

typedef struct root_rec {
    void **slot;
    unsigned flags;
    crawl_kind kind;
    crawl_frame *frame;
    const crawl_frame_type *type;       /* read during the callback: the Frame may be gone */
    unsigned depth;
    const void *method;
    unsigned thread;
} root_rec;

typedef struct roots {
    root_rec r[64];
    unsigned n;
} roots;

static void record_root(void **slot, unsigned flags, const crawl_cf *cf, void *ctx)
{
    roots *rs = ctx;
    if (rs->n < 64)
        rs->r[rs->n++] = (root_rec){slot, flags, crawl_cf_kind(cf), crawl_cf_frame(cf),
                                    crawl_cf_frame(cf)->type, crawl_cf_depth(cf),
                                    crawl_cf_method(cf), crawl_cf_thread(cf)};
}

/* An embedder's Frame holding two references. */
typedef struct holder {
    crawl_frame frame;
    void *a, *b;
} holder;

static void holder_roots(crawl_frame *f, crawl_roots *sink)
{
    holder *h = (holder *)f;
    crawl_roots_report(sink, &h->a, CRAWL_ROOT_INTERIOR);
    crawl_roots_report(sink, &h->b, CRAWL_ROOT_PINNED);
}

static const void *holder_method(const crawl_frame *f)
{
    (void)f;
    return "holder-method";
}

static const crawl_frame_type holder_type = {
    .name = "holder",
    .flags = CRAWL_FRAME_FUNCTION,
    .method = holder_method,
    .enum_roots = holder_roots,
};

static void test_gcprotect_and_custom_frames(void **state)
{
    (void)state;
    holder h = {.a = "A", .b = "B"};
    crawl_frame_push(&h.frame, &holder_type);
    label_frame noise = {.label = "no roots"};
    crawl_frame_push(&noise.frame, &t_label_type);
    void *x = "X", *y = "Y", *z = "Z";
    roots rs = {0};
    CRAWL_GCPROTECT_BEGIN(x, y, z);
    assert_int_equal(crawl_enum_roots(record_root, &rs, 0), CRAWL_WALK_DONE);
    /* the slots are the variables: a moving collector could update them */
    *rs.r[1].slot = "moved";
    assert_string_equal(y, "moved");
    CRAWL_GCPROTECT_END();
    crawl_frame_pop(&noise.frame);
    crawl_frame_pop(&h.frame);

    assert_int_equal(rs.n, 5);
    /* newest Frame first: the GCPROTECT (depth 0), then the holder (depth 2) */
    void **want_slots[5] = {&x, &y, &z, &h.a, &h.b};
    for (int i = 0; i < 5; i++) {
        assert_ptr_equal(rs.r[i].slot, want_slots[i]);
        assert_int_equal(rs.r[i].kind, CRAWL_CF_FRAME);
    }
    assert_int_equal(rs.r[0].depth, 0);
    assert_ptr_equal(rs.r[0].type, &crawl_gcprotect_type);
    assert_int_equal(rs.r[0].flags, 0);
    assert_ptr_equal(rs.r[3].frame, &h.frame);
    assert_int_equal(rs.r[3].depth, 2);
    assert_string_equal(rs.r[3].method, "holder-method");
    assert_int_equal(rs.r[3].flags, CRAWL_ROOT_INTERIOR);
    assert_int_equal(rs.r[4].flags, CRAWL_ROOT_PINNED);
    assert_ptr_equal(rs.r[3].type, &holder_type);
}

static void test_filters_and_errors(void **state)
{
    (void)state;
    holder h = {.a = "A", .b = "B"};
    crawl_frame_push(&h.frame, &holder_type);
    void *x = "X";
    roots rs = {0};
    CRAWL_GCPROTECT_BEGIN(x);
    /* GCPROTECT Frames are not functions */
    assert_int_equal(crawl_enum_roots(record_root, &rs, CRAWL_WALK_FUNCTIONS_ONLY),
                     CRAWL_WALK_DONE);
    assert_int_equal(crawl_enum_roots(NULL, NULL, 0), CRAWL_WALK_FAILED);
    CRAWL_GCPROTECT_END();
    assert_int_equal(rs.n, 2);
    assert_ptr_equal(rs.r[0].slot, &h.a);

    /* a corrupt chain fails after the Frames before the corruption: the
     * top Frame's roots are reported, nothing past its bad link */
    holder top = {.a = "C", .b = "D"};
    crawl_frame_push(&top.frame, &holder_type);
    crawl_frame *saved = top.frame.next;
    top.frame.next = (crawl_frame *)0x40;
    rs.n = 0;
    assert_int_equal(crawl_enum_roots(record_root, &rs, 0), CRAWL_WALK_FAILED);
    top.frame.next = saved;
    crawl_frame_pop(&top.frame);
    crawl_frame_pop(&h.frame);
    assert_int_equal(rs.n, 2);
    assert_ptr_equal(rs.r[0].slot, &top.a);
    assert_ptr_equal(rs.r[1].slot, &top.b);
}

/* Another thread parks with a holder Frame while this one enumerates every
 * thread's roots (the way a collector does with the world stopped). */
static pthread_barrier_t parked, release;
static holder *other_holder;
static int other_number;

static void *park_with_roots(void *arg)
{
    (void)arg;
    holder h = {.a = "other-a", .b = "other-b"};
    crawl_frame_push(&h.frame, &holder_type);
    other_holder = &h;
    other_number = crawl_thread_number();
    pthread_barrier_wait(&parked);
    pthread_barrier_wait(&release);
    crawl_frame_pop(&h.frame);
    crawl_thread_detach();
    return NULL;
}

static void test_roots_of_every_thread(void **state)
{
    (void)state;
    pthread_barrier_init(&parked, NULL, 2);
    pthread_barrier_init(&release, NULL, 2);
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, park_with_roots, NULL), 0);
    pthread_barrier_wait(&parked);
    void *mine = "mine";
    roots rs = {0};
    CRAWL_GCPROTECT_BEGIN(mine);
    assert_int_equal(crawl_enum_roots_all_threads(record_root, &rs, 0), CRAWL_WALK_DONE);
    CRAWL_GCPROTECT_END();
    pthread_barrier_wait(&release);
    pthread_join(t, NULL);
    int seen_mine = 0, seen_other = 0;
    int me = crawl_thread_number();
    assert_true(me >= 0 && other_number >= 0 && me != other_number);
    for (unsigned i = 0; i < rs.n; i++) {
        if (rs.r[i].slot == &mine) {
            seen_mine++;
            assert_int_equal(rs.r[i].thread, me);             /* roots say whose they are */
        }
        if (rs.r[i].slot == &other_holder->a || rs.r[i].slot == &other_holder->b) {
            seen_other++;
            assert_int_equal(rs.r[i].thread, other_number);
        }
    }
    assert_int_equal(seen_mine, 1);
    assert_int_equal(seen_other, 2);
    /* and crawl_enum_roots sees only the calling thread's */
    rs.n = 0;
    assert_int_equal(crawl_enum_roots(record_root, &rs, 0), CRAWL_WALK_DONE);
    assert_int_equal(rs.n, 0);
}

int main(void)
{
    crawl_thread_attach();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gcprotect_and_custom_frames),
        cmocka_unit_test(test_filters_and_errors),
        cmocka_unit_test(test_roots_of_every_thread),
    };
    return cmocka_run_group_tests_name("gcroots", tests, NULL, NULL);
}
