/* An embedder that forgets two roots, and crawl-boehm's diagnostics
 * finding each one. A "VM" keeps its objects in GC memory and reports the
 * slots of its script frames to the collector through a Frame; two bugs:
 *
 *   1. a cache in malloc'ed memory holds a GC pointer (Boehm does not scan
 *      malloc'ed memory): the object is collected under it, and the next
 *      use reads freed memory — use-after-collect;
 *   2. a native helper keeps a GC pointer only in a C local while it calls
 *      back into the VM: alive only because Boehm scans C stacks
 *      conservatively, which a precise or moving collector would not do —
 *      unreported-reference.
 *
 * Run: build/dev/examples/forgot_root (options are set below; CRAWL_OPTIONS
 * can add more). */
#include <gc/gc.h>

#include <crawl/boehm.h>
#include <crawl/crawl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct value {
    const char *name;
    struct value *link;
} value;

/* A script function's activation: its name and its locals (GC values). */
typedef struct script_frame {
    crawl_frame frame;
    const char *function;
    int line;
    value *locals[2];
} script_frame;

static int script_describe(const crawl_frame *f, char *buf, size_t len)
{
    const script_frame *s = (const script_frame *)f;
    return snprintf(buf, len, "%s script.vm:%d", s->function, s->line);
}

static const void *script_method(const crawl_frame *f)
{
    return ((const script_frame *)f)->function;
}

static int script_describe_method(const void *method, uintptr_t pc, char *buf, size_t len)
{
    (void)pc;
    return snprintf(buf, len, "%s script.vm", (const char *)method);
}

static void script_roots(crawl_frame *f, crawl_roots *sink)
{
    script_frame *s = (script_frame *)f;
    for (int i = 0; i < 2; i++)
        crawl_roots_report(sink, (void **)&s->locals[i], 0);
}

static const crawl_frame_type script_type = {
    .name = "script",
    .flags = CRAWL_FRAME_FUNCTION,
    .method = script_method,
    .describe = script_describe,
    .enum_roots = script_roots,
    .describe_method = script_describe_method,
};

static value *new_value(const char *name)
{
    value *v = crawl_gc_malloc(sizeof *v);
    v->name = name;
    return v;
}

/* ---- bug 1: a GC pointer only in malloc'ed memory --------------------------- */

typedef struct cache {
    value *last;                         /* Boehm never looks here */
} cache;

static cache *the_cache;

__attribute__((noinline)) static void remember(const char *name)
{
    script_frame f = {.function = "remember", .line = 3};
    crawl_frame_push(&f.frame, &script_type);
    the_cache->last = new_value(name);   /* the bug: no root reports the_cache->last */
    crawl_frame_pop(&f.frame);
}

__attribute__((noinline)) static void scrub_stack(void)
{
    volatile char pad[8192];
    memset((char *)pad, 0, sizeof pad);
}

__attribute__((noinline)) static void use_cache(void)
{
    script_frame f = {.function = "use-cache", .line = 9};
    crawl_frame_push(&f.frame, &script_type);
    value *v = the_cache->last;
    if (crawl_gc_check(&v->name, sizeof v->name, 0) == 0)   /* what a checked VM does */
        printf("the cached value is %s\n", v->name);
    crawl_frame_pop(&f.frame);
}

/* ---- bug 2: a GC pointer only in a C local ----------------------------------- */

__attribute__((noinline)) static void call_back_into_vm(void)
{
    script_frame f = {.function = "callback", .line = 14};
    crawl_frame_push(&f.frame, &script_type);
    printf("\n$ crawl_gc_verify() from a script callback\n");
    fflush(stdout);
    crawl_gc_verify();
    crawl_frame_pop(&f.frame);
}

__attribute__((noinline)) static void native_helper(void)
{
    value *volatile temp = new_value("temp");   /* the bug: kept only here */
    call_back_into_vm();
    (void)temp->name;
}

int main(void)
{
    GC_INIT();
    crawl_thread_attach();
    crawl_boehm_install();
    crawl_sanitizer_set_options("halt_on_error=0:gc_alloc_stacks=1:gc_poison_collected=1");
    the_cache = malloc(sizeof *the_cache);

    script_frame top = {.function = "main", .line = 1};
    top.locals[0] = new_value("config");
    crawl_frame_push(&top.frame, &script_type);

    printf("$ crawl_gc_census()\n");
    fflush(stdout);
    crawl_gc_census(STDOUT_FILENO);

    remember("answer");
    scrub_stack();
    printf("\n$ crawl_gc_why(the cached value)\n");
    fflush(stdout);
    crawl_gc_why(the_cache->last, STDOUT_FILENO);
    printf("\n$ two collections, then the script reads the cache\n");
    fflush(stdout);
    crawl_gc_verify();                   /* collections crawl-boehm runs sweep as they go */
    crawl_gc_verify();
    use_cache();

    native_helper();
    crawl_frame_pop(&top.frame);
    printf("\n%lu reports\n", crawl_sanitizer_report_count());
    free(the_cache);
    return 0;
}
