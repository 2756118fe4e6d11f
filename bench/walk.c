/* bench/walk: ns per frame for crawl's walks and the unwinders a user would
 * otherwise pick, in one process, from the bottom of recursions of depth 8,
 * 32 and 128.
 *
 * Every method makes a whole walk, as a user calls it: from the bottom of
 * the recursion up to main and the C library's start frames (as far as the
 * method gets), and the time is divided by the frames it returned, so the
 * fixed cost of a walk counts, as it does for a malloc hook capturing short
 * stacks. The frame counts are printed. Each figure is the median of 21
 * batches. libunwind is opened with dlopen(RTLD_LOCAL) here too, so glibc's
 * backtrace() and libgcc's _Unwind_Backtrace are the real ones. */
#define _GNU_SOURCE
#include <crawl/crawl.h>
#include <dlfcn.h>
#include <execinfo.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unwind.h>
#define UNW_LOCAL_ONLY
#include <libunwind.h>
#include "bench.h"

#define BATCHES 21
#define MAX_FRAMES 256                   /* more than any walk here returns */

static int (*p_unw_backtrace)(void **, int);
static int (*p_getcontext)(unw_context_t *);
static int (*p_init_local)(unw_cursor_t *, unw_context_t *);
static int (*p_step)(unw_cursor_t *);
static int (*p_get_reg)(unw_cursor_t *, unw_regnum_t, unw_word_t *);

static unsigned depth;                   /* the recursion's height */
static void *sink[MAX_FRAMES];
static volatile unsigned long guard;
static uintptr_t stack_lo, stack_hi;     /* the bare loops stay on the stack */

/* ---- the methods: each unwinds `depth` frames from its caller ------------ */

/* The frame-pointer chain with the least checking a user could get away
 * with: on the stack and moving towards its base. */
#define FP_OK(fp, prev) ((uintptr_t)(fp) > (uintptr_t)(prev) && (uintptr_t)(fp) < stack_hi - 16)

__attribute__((noinline)) static int bare_fp_loop(void)
{
    void **fp = __builtin_frame_address(0), **prev = (void **)stack_lo;
    unsigned n = 0;
    while (n < MAX_FRAMES && FP_OK(fp, prev)) {
        sink[n++] = fp[1];
        prev = fp;
        fp = (void **)fp[0];
    }
    return (int)n;
}

/* The floor for any per-frame callback API: the bare loop plus one indirect
 * call per frame to an empty function. */
typedef int (*frame_cb)(uintptr_t ip, uintptr_t sp, unsigned depth);
__attribute__((noinline)) static int empty_cb(uintptr_t ip, uintptr_t sp, unsigned d)
{
    (void)ip, (void)sp, (void)d;
    __asm__ volatile("");
    return 0;
}
static frame_cb volatile the_cb = empty_cb;

__attribute__((noinline)) static int bare_fp_loop_callback(void)
{
    frame_cb cb = the_cb;
    void **fp = __builtin_frame_address(0), **prev = (void **)stack_lo;
    unsigned n = 0;
    while (n < MAX_FRAMES && FP_OK(fp, prev)) {
        sink[n] = fp[1];
        if (cb((uintptr_t)fp[1], (uintptr_t)fp, n++))
            break;
        prev = fp;
        fp = (void **)fp[0];
    }
    return (int)n;
}

/* The callback does what the bare loop does: store the pc. */
static crawl_action take(const crawl_cf *cf, void *ctx)
{
    unsigned *n = ctx;
    sink[*n] = (void *)crawl_cf_ip(cf);
    return ++*n < MAX_FRAMES ? CRAWL_CONTINUE : CRAWL_ABORT;
}

static int walk_with(unsigned flags)
{
    unsigned n = 0;
    crawl_walk(take, &n, flags);
    return (int)n;
}

__attribute__((noinline)) static int crawl_fast(void) { return walk_with(CRAWL_WALK_FAST); }
__attribute__((noinline)) static int crawl_precise(void) { return walk_with(0); }
__attribute__((noinline)) static int crawl_precise_ss(void)
{
    return walk_with(CRAWL_WALK_SIGNAL_SAFE);
}

/* The walk's own cost: a callback that reads nothing from the crawl_cf. */
static crawl_action count_only(const crawl_cf *cf, void *ctx)
{
    (void)cf;
    unsigned *n = ctx;
    return ++*n < MAX_FRAMES ? CRAWL_CONTINUE : CRAWL_ABORT;
}

__attribute__((noinline)) static int crawl_fast_count(void)
{
    unsigned n = 0;
    crawl_walk(count_only, &n, CRAWL_WALK_FAST);
    return (int)n;
}

__attribute__((noinline)) static int crawl_bt_fast(void)
{
    return crawl_backtrace((uintptr_t *)sink, MAX_FRAMES, CRAWL_WALK_FAST);
}

__attribute__((noinline)) static int crawl_bt_precise(void)
{
    return crawl_backtrace((uintptr_t *)sink, MAX_FRAMES, 0);
}

__attribute__((noinline)) static int crawl_bt_precise_ss(void)
{
    return crawl_backtrace((uintptr_t *)sink, MAX_FRAMES, CRAWL_WALK_SIGNAL_SAFE);
}

__attribute__((noinline)) static int glibc_backtrace(void)
{
    return backtrace(sink, MAX_FRAMES);
}

typedef struct { unsigned n; } ub_state;
static _Unwind_Reason_Code ub_take(struct _Unwind_Context *ctx, void *arg)
{
    ub_state *s = arg;
    sink[s->n] = (void *)_Unwind_GetIP(ctx);
    return ++s->n >= MAX_FRAMES ? _URC_END_OF_STACK : _URC_NO_REASON;
}

__attribute__((noinline)) static int libgcc_unwind_backtrace(void)
{
    ub_state s = {0};
    _Unwind_Backtrace(ub_take, &s);
    return (int)s.n;
}

__attribute__((noinline)) static int libunwind_backtrace(void)
{
    return p_unw_backtrace(sink, MAX_FRAMES);
}

__attribute__((noinline)) static int libunwind_step_loop(void)
{
    unw_context_t uc;
    unw_cursor_t cur;
    p_getcontext(&uc);
    p_init_local(&cur, &uc);
    unsigned n = 0;
    do {
        unw_word_t ip;
        p_get_reg(&cur, UNW_REG_IP, &ip);
        sink[n++] = (void *)ip;
    } while (n < MAX_FRAMES && p_step(&cur) > 0);
    return (int)n;
}

/* ---- harness ----------------------------------------------------------------- */

typedef struct method {
    const char *name;
    int (*fn)(void);
    int with_frames;                   /* run inside a recursion that pushes Frames */
    double ns[3];                      /* per depth */
    int frames[3];                     /* frames one walk returned, per depth */
} method;

static method methods[] = {
    {"bare frame-pointer loop", bare_fp_loop, 0, {0}, {0}},
    {"bare loop + empty callback per frame", bare_fp_loop_callback, 0, {0}, {0}},
    {"crawl_walk fast", crawl_fast, 0, {0}, {0}},
    {"crawl_walk fast, callback reads nothing", crawl_fast_count, 0, {0}, {0}},
    {"crawl_walk fast, 1 Frame per 4 frames", crawl_fast, 1, {0}, {0}},
    {"crawl_backtrace fast", crawl_bt_fast, 0, {0}, {0}},
    {"crawl_walk precise", crawl_precise, 0, {0}, {0}},
    {"crawl_walk precise, 1 Frame per 4", crawl_precise, 1, {0}, {0}},
    {"crawl_backtrace precise", crawl_bt_precise, 0, {0}, {0}},
    {"crawl_walk precise, signal-safe", crawl_precise_ss, 0, {0}, {0}},
    {"crawl_backtrace precise, signal-safe", crawl_bt_precise_ss, 0, {0}, {0}},
    {"libunwind unw_backtrace", libunwind_backtrace, 0, {0}, {0}},
    {"libgcc _Unwind_Backtrace", libgcc_unwind_backtrace, 0, {0}, {0}},
    {"glibc backtrace()", glibc_backtrace, 0, {0}, {0}},
    {"libunwind unw_step loop", libunwind_step_loop, 0, {0}, {0}},
};
#define NMETHODS (sizeof methods / sizeof methods[0])

static crawl_frame_type bench_frame_type = {.name = "bench"};

static unsigned reps_for(const method *m)
{
    /* about 2e6 frames a batch for cheap methods, fewer for slow ones */
    int cheap = m->fn == bare_fp_loop || m->fn == bare_fp_loop_callback || m->fn == crawl_fast ||
                m->fn == crawl_fast_count || m->fn == crawl_bt_fast || m->fn == libunwind_backtrace;
    return (cheap ? 2000000 : 40000) / (depth + 6) + 1;
}

/* Time every method of this recursion (with or without Frames) at the
 * bottom, interleaved: batch b of every method runs before batch b+1 of
 * any, so drift on a shared machine hits all methods alike. */
static void time_here(int with_frames, int d, unsigned scale)
{
    static double batch[NMETHODS][BATCHES];
    for (unsigned i = 0; i < NMETHODS; i++) {
        if (methods[i].with_frames != with_frames)
            continue;
        int got = methods[i].fn();
        if (got < (int)depth) {
            fprintf(stderr, "%s unwound %d frames of a recursion %u deep\n", methods[i].name,
                    got, depth);
            exit(1);
        }
        methods[i].frames[d] = got;
    }
    for (int b = 0; b < BATCHES; b++)
        for (unsigned i = 0; i < NMETHODS; i++) {
            const method *m = &methods[i];
            if (m->with_frames != with_frames)
                continue;
            unsigned reps = reps_for(m) / scale + 1;
            double t0 = now_ns();
            for (unsigned r = 0; r < reps; r++)
                m->fn();
            batch[i][b] = (now_ns() - t0) / reps / m->frames[d];
        }
    for (unsigned i = 0; i < NMETHODS; i++) {
        if (methods[i].with_frames != with_frames)
            continue;
        methods[i].ns[d] = bench_median(batch[i], BATCHES);
    }
}

/* Recurse to the requested height (pushing a Frame every 4th level when
 * asked), then time there. */
__attribute__((noinline)) static void descend(unsigned level, int with_frames, int d,
                                              unsigned scale)
{
    if (level > 0) {
        crawl_frame f;
        int push = with_frames && level % 4 == 0;
        if (push)
            crawl_frame_push(&f, &bench_frame_type);
        descend(level - 1, with_frames, d, scale);
        if (push)
            crawl_frame_pop(&f);
        guard += level;                 /* no tail call: keep every frame */
        return;
    }
    time_here(with_frames, d, scale);
}

/* ---- precise walks through a mix of frames with and without frame pointers */

double bench_mix_nofp(unsigned level);
double bench_mix_descend(unsigned level);
static int (*mix_fn)(void);
static double mix_result;
static int mix_frames;

static const struct {
    const char *name;
    int (*fn)(void);
} mix_methods[] = {
    {"crawl_walk precise", crawl_precise},
    {"crawl_backtrace precise", crawl_bt_precise},
    {"crawl_backtrace precise, signal-safe", crawl_bt_precise_ss},
    {"libunwind unw_backtrace", libunwind_backtrace},
    {"libunwind unw_step loop", libunwind_step_loop},
};
#define NMIX (sizeof mix_methods / sizeof mix_methods[0])
static double mix_ns[NMIX][3];
static int mix_got[NMIX][3];

/* Time mix_fn from here: the median ns per frame into mix_result. */
static void time_mix_here(void)
{
    double b[BATCHES];
    unsigned reps = (mix_fn == libunwind_backtrace ? 2000000 : 200000) / (depth + 6) + 1;
    if (mix_fn == libunwind_step_loop)
        reps = 40000 / (depth + 6) + 1;
    int got = mix_fn();
    if (got < (int)depth) {
        fprintf(stderr, "a method unwound %d frames of a recursion %u deep\n", got, depth);
        exit(1);
    }
    for (int k = 0; k < BATCHES; k++) {
        double t0 = now_ns();
        for (unsigned r = 0; r < reps; r++)
            mix_fn();
        b[k] = (now_ns() - t0) / reps / got;
    }
    mix_result = bench_median(b, BATCHES);
    mix_frames = got;
}

/* Alternate: this function keeps a frame pointer, bench_mix_nofp does not. */
__attribute__((noinline)) double bench_mix_descend(unsigned level)
{
    if (level > 0) {
        double r = level % 2 ? bench_mix_nofp(level - 1) : bench_mix_descend(level - 1);
        guard += level;
        return r;
    }
    time_mix_here();
    return 0;
}

/* ---- every frame a different call site (no repeated return address) ---- */

typedef double (*distinct_fn)(unsigned level);
static distinct_fn distinct[64];
#define DISTINCT(n)                                                                    \
    __attribute__((noinline)) static double distinct_##n(unsigned level)               \
    {                                                                                  \
        if (level == 0) {                                                              \
            time_mix_here();                                                           \
            return 0;                                                                  \
        }                                                                              \
        double r = distinct[((n) + 1) % 64](level - 1);                                \
        guard += level * (n);                                                          \
        return r;                                                                      \
    }
#define DISTINCT8(a) DISTINCT(a##0) DISTINCT(a##1) DISTINCT(a##2) DISTINCT(a##3) \
    DISTINCT(a##4) DISTINCT(a##5) DISTINCT(a##6) DISTINCT(a##7)
DISTINCT8(0) DISTINCT8(1) DISTINCT8(2) DISTINCT8(3) DISTINCT8(4) DISTINCT8(5) DISTINCT8(6)
DISTINCT8(7)
#define REF8(a) distinct_##a##0, distinct_##a##1, distinct_##a##2, distinct_##a##3, \
    distinct_##a##4, distinct_##a##5, distinct_##a##6, distinct_##a##7
static distinct_fn distinct_init[64] = {REF8(0), REF8(1), REF8(2), REF8(3),
                                        REF8(4), REF8(5), REF8(6), REF8(7)};
static double distinct_ns[NMIX][3];
static int distinct_got[NMIX][3];

static void load_libunwind(void)
{
    void *h = dlopen("libunwind.so.8", RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        fprintf(stderr, "cannot open libunwind.so.8: %s\n", dlerror());
        exit(1);
    }
    *(void **)&p_unw_backtrace = dlsym(h, "unw_backtrace");
    *(void **)&p_getcontext = dlsym(h, "_Ux86_64_getcontext");
    *(void **)&p_init_local = dlsym(h, "_ULx86_64_init_local");
    *(void **)&p_step = dlsym(h, "_ULx86_64_step");
    *(void **)&p_get_reg = dlsym(h, "_ULx86_64_get_reg");
    if (!p_unw_backtrace || !p_getcontext || !p_init_local || !p_step || !p_get_reg) {
        fprintf(stderr, "libunwind.so.8 lacks an expected symbol\n");
        exit(1);
    }
}

static const char *module_of(void *fn)
{
    Dl_info di;
    const char *s = (dladdr(fn, &di) && di.dli_fname) ? di.dli_fname : "?";
    const char *slash = strrchr(s, '/');
    return slash ? slash + 1 : s;
}

int main(int argc, char **argv)
{
    /* --quick: fewer repetitions (a smoke run, not a measurement) */
    unsigned scale = (argc > 1 && strcmp(argv[1], "--quick") == 0) ? 20 : 1;
    static const unsigned depths[3] = {8, 32, 128};
    load_libunwind();
    crawl_thread_attach();
    crawl_thread_stack_bounds(&stack_lo, &stack_hi);
    /* cold start: the first precise walk reads CFI; the second finds rules */
    uintptr_t pcs[64];
    double t0 = now_ns();
    int cold_n = crawl_backtrace(pcs, 64, 0);
    double cold = now_ns() - t0;
    t0 = now_ns();
    crawl_backtrace(pcs, 64, 0);
    double warm = now_ns() - t0;
    printf("bench/walk: ns per frame, median of %d batches (backtrace from %s, "
           "_Unwind_Backtrace from %s)\n\n",
           BATCHES, module_of((void *)backtrace), module_of((void *)_Unwind_Backtrace));
    for (int d = 0; d < 3; d++) {
        depth = depths[d];
        descend(depth, 0, d, scale);
        descend(depth, 1, d, scale);
    }
    for (int d = 0; d < 3; d++) {
        depth = depths[d];
        for (unsigned i = 0; i < NMIX; i++) {
            mix_fn = mix_methods[i].fn;
            bench_mix_descend(depth);
            mix_ns[i][d] = mix_result;
            mix_got[i][d] = mix_frames;
        }
    }
    memcpy(distinct, distinct_init, sizeof distinct);
    for (int d = 0; d < 3; d++) {
        depth = depths[d];
        for (unsigned i = 0; i < NMIX; i++) {
            mix_fn = mix_methods[i].fn;
            distinct[0](depth);
            distinct_ns[i][d] = mix_result;
            distinct_got[i][d] = mix_frames;
        }
    }
    printf("%-40s %10s %10s %10s   frames per walk\n", "method", "depth 8", "depth 32",
           "depth 128");
    for (unsigned i = 0; i < NMETHODS; i++)
        printf("%-40s %10.2f %10.2f %10.2f   %d/%d/%d\n", methods[i].name, methods[i].ns[0],
               methods[i].ns[1], methods[i].ns[2], methods[i].frames[0], methods[i].frames[1],
               methods[i].frames[2]);
    printf("\nprecise walks through frames alternately with and without frame pointers:\n");
    for (unsigned i = 0; i < NMIX; i++)
        printf("%-40s %10.2f %10.2f %10.2f   %d/%d/%d\n", mix_methods[i].name, mix_ns[i][0],
               mix_ns[i][1], mix_ns[i][2], mix_got[i][0], mix_got[i][1], mix_got[i][2]);
    for (unsigned i = 0; i < 3; i++)
        for (unsigned r = 3; r < 5; r++)
            printf("%-40s / %-24s %7.2fx %9.2fx %9.2fx\n", mix_methods[i].name, mix_methods[r].name,
                   mix_ns[i][0] / mix_ns[r][0], mix_ns[i][1] / mix_ns[r][1],
                   mix_ns[i][2] / mix_ns[r][2]);
    printf("\nevery frame a different call site (64 functions in turn; no return address repeats\n"
           "within 64 frames, so no recursion shortcut applies):\n");
    for (unsigned i = 0; i < NMIX; i++)
        printf("%-40s %10.2f %10.2f %10.2f   %d/%d/%d\n", mix_methods[i].name, distinct_ns[i][0],
               distinct_ns[i][1], distinct_ns[i][2], distinct_got[i][0], distinct_got[i][1],
               distinct_got[i][2]);
    for (unsigned i = 0; i < 3; i++)
        printf("%-40s / %-24s %7.2fx %9.2fx %9.2fx\n", mix_methods[i].name, mix_methods[3].name,
               distinct_ns[i][0] / distinct_ns[3][0], distinct_ns[i][1] / distinct_ns[3][1],
               distinct_ns[i][2] / distinct_ns[3][2]);
    printf("\ncold start: first precise crawl_backtrace (%d frames, from main) %.0f us; "
           "the next %.2f us\n",
           cold_n, cold / 1000, warm / 1000);
    printf("\nratios (lower is faster)\n");
    /* every method up to unw_backtrace, against the bare loop + callback
     * (the floor of any callback API) and unw_backtrace */
    const method *floor_cb = &methods[1], *unwbt = floor_cb;
    while (unwbt->fn != libunwind_backtrace)
        unwbt++;
    for (unsigned i = 2; &methods[i] < unwbt; i++)
        for (int r = 0; r < 2; r++) {
            const method *base = r ? unwbt : floor_cb;
            printf("%-40s / %-24.24s %7.2fx %9.2fx %9.2fx\n", methods[i].name, base->name,
                   methods[i].ns[0] / base->ns[0], methods[i].ns[1] / base->ns[1],
                   methods[i].ns[2] / base->ns[2]);
        }
    /* signal-safe against normal-context precise walks */
    for (unsigned i = 0; i < NMETHODS; i++)
        if (strstr(methods[i].name, "signal-safe"))
            for (unsigned k = 0; k < NMETHODS; k++)
                if (strncmp(methods[k].name, methods[i].name, strlen(methods[k].name)) == 0 &&
                    k != i && methods[k].fn != crawl_fast)
                    printf("%-40s / %-24.24s %7.2fx %9.2fx %9.2fx\n", methods[i].name,
                           methods[k].name, methods[i].ns[0] / methods[k].ns[0],
                           methods[i].ns[1] / methods[k].ns[1], methods[i].ns[2] / methods[k].ns[2]);
    return 0;
}
