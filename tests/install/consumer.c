/* An outside program: compiles against exactly the public contract of the
 * core issue, found through pkg-config or find_package(crawl). */
#include <crawl/crawl.h>
#include <stdio.h>
#include <string.h>

typedef struct my_frame {
    crawl_frame base;
    const char *what;
} my_frame;

static int my_describe(const crawl_frame *f, char *buf, size_t len)
{
    return snprintf(buf, len, "my %s", ((const my_frame *)f)->what);
}

static const crawl_frame_type my_type = {
    .name = "mine",
    .flags = CRAWL_FRAME_FUNCTION,
    .method = NULL,
    .describe = my_describe,
    .enum_roots = NULL,
};

static crawl_action on_frame(const crawl_cf *cf, void *ctx)
{
    int *seen = ctx;
    if (crawl_cf_kind(cf) == CRAWL_CF_FRAME && crawl_cf_frame(cf)->type == &my_type)
        *seen = (int)crawl_cf_depth(cf);
    (void)crawl_cf_ip(cf);
    (void)crawl_cf_sp(cf);
    (void)crawl_cf_method(cf);
    return CRAWL_CONTINUE;
}

int main(void)
{
    if (crawl_thread_attach() != 0)
        return 1;
    my_frame f = {.what = "frame"};
    crawl_frame_push(&f.base, &my_type);
    if (crawl_frame_top() != &f.base)
        return 1;
    int seen = -1;
    unsigned flags[] = {0, CRAWL_WALK_FAST, CRAWL_WALK_SKIP_NATIVE, CRAWL_WALK_FUNCTIONS_ONLY,
                        CRAWL_WALK_SIGNAL_SAFE, CRAWL_WALK_SKIP_FRAMES};
    for (unsigned i = 0; i < sizeof flags / sizeof flags[0]; i++) {
        seen = -1;
        crawl_walk_status st = crawl_walk(on_frame, &seen, flags[i]);
        if (st != CRAWL_WALK_DONE || (seen < 0) != !!(flags[i] & CRAWL_WALK_SKIP_FRAMES))
            return 1;
    }
    if (crawl_walk(NULL, NULL, 0) != CRAWL_WALK_FAILED)
        return 1;
    crawl_walk_status (*ctx_walk)(const ucontext_t *, crawl_walk_fn, void *, unsigned) =
        crawl_walk_context;
    (void)ctx_walk;
    crawl_kind k = CRAWL_CF_VM;
    crawl_action a = CRAWL_ABORT;
    crawl_walk_status s = CRAWL_WALK_ABORTED;
    crawl_roots *sink = NULL;
    (void)k, (void)a, (void)s, (void)sink;
    /* the umbrella has every libcrawl header: the guarded pool's too */
    if (crawl_gpa_owns(&f) || crawl_heap_profile_active() < 0)
        return 1;
    crawl_frame_pop(&f.base);
    crawl_thread_detach();
    printf("consumer: ok\n");
    return 0;
}
