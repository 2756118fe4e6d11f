/* Sanitizer options: "key=value:key=value", from crawl_default_options(),
 * CRAWL_OPTIONS and the API. A string is applied whole or not at all. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <unistd.h>

#include <stdatomic.h>

#include "sanitizer/internal.h"

/* Programs may define it to set their defaults. */
__attribute__((weak)) const char *crawl_default_options(void);


/* The options in effect: an immutable snapshot, replaced whole by each
 * successful set, so a reader on another thread (a malloc in flight) sees
 * one consistent set. Old snapshots stay allocated, chained from the newest:
 * a reader may still hold one. */
typedef struct snapshot {
    san_options o;
    const struct snapshot *older;
} snapshot;
static const snapshot first = {.o = {
    .halt_on_error = 1,
    .malloc_context_size = 30,
    .quarantine_bytes = (size_t)64 << 20,
    .redzone = 16,
    .fast_unwind_on_malloc = 0,
    .depot_budget = (size_t)256 << 20,
}};
static const snapshot *_Atomic current = &first;
static pthread_once_t once = PTHREAD_ONCE_INIT;
static pthread_mutex_t options_lock = PTHREAD_MUTEX_INITIALIZER;

static const char help_text[] =
    "crawl sanitizer options (key=value, separated by ':'):\n"
    "  halt_on_error=1         abort after a report (0: go on)\n"
    "  log_path=PATH           write reports to PATH.PID (stderr, stdout: those;\n"
    "                          a device or FIFO such as /dev/null: PATH itself)\n"
    "  malloc_context_size=30  frames kept per allocation/free stack (1..256)\n"
    "  quarantine_size_mb=64   freed memory kept unallocatable (0..65536)\n"
    "  redzone=16              minimum redzone bytes (16..2048, a power of 2)\n"
    "  fast_unwind_on_malloc=0 1: frame-pointer walks for allocation stacks (0: DWARF CFI)\n"
    "  depot_budget_mb=256     memory the stack depot may use (1..65536)\n"
    "  help=1                  print this\n";

static void warn(const char *what, const char *item, size_t len)
{
    char line[300];
    int n = snprintf(line, sizeof line, "crawl: %s '%.*s' in sanitizer options; none applied\n",
                     what, (int)(len > 200 ? 200 : len), item);
    ssize_t w = write(STDERR_FILENO, line, (size_t)n);
    (void)w;
}

static int number(const char *v, size_t len, long lo, long hi, long *out)
{
    char tmp[32];
    if (len == 0 || len >= sizeof tmp)
        return -1;
    memcpy(tmp, v, len);
    tmp[len] = '\0';
    char *end;
    errno = 0;
    if (tmp[0] < '0' || tmp[0] > '9')
        return -1;                       /* no sign, no blanks */
    long x = strtol(tmp, &end, 10);
    if (errno || *end || x < lo || x > hi)
        return -1;
    *out = x;
    return 0;
}

/* Parse into *o; 0, or -EINVAL after one warning line. */
static int parse(const char *s, san_options *o, int *want_help)
{
    while (*s) {
        const char *item = s, *end = strchr(s, ':');
        size_t len = end ? (size_t)(end - s) : strlen(s);
        s += len + (end != NULL);
        if (len == 0)
            continue;                    /* "a=1::b=2" and a trailing ':' are fine */
        const char *eq = memchr(item, '=', len);
        if (!eq || eq == item) {
            warn("malformed item (expected key=value)", item, len);
            return -EINVAL;
        }
        size_t klen = (size_t)(eq - item), vlen = len - klen - 1;
        const char *v = eq + 1;
        long x;
#define KEY(name) (klen == sizeof name - 1 && memcmp(item, name, klen) == 0)
        if (KEY("halt_on_error") && number(v, vlen, 0, 1, &x) == 0)
            o->halt_on_error = (int)x;
        else if (KEY("fast_unwind_on_malloc") && number(v, vlen, 0, 1, &x) == 0)
            o->fast_unwind_on_malloc = (int)x;
        else if (KEY("help") && number(v, vlen, 0, 1, &x) == 0)
            *want_help = (int)x;
        else if (KEY("malloc_context_size") && number(v, vlen, 1, CRAWL_DEPOT_MAX_FRAMES, &x) == 0)
            o->malloc_context_size = (unsigned)x;
        else if (KEY("quarantine_size_mb") && number(v, vlen, 0, 65536, &x) == 0)
            o->quarantine_bytes = (size_t)x << 20;
        else if (KEY("depot_budget_mb") && number(v, vlen, 1, 65536, &x) == 0)
            o->depot_budget = (size_t)x << 20;
        else if (KEY("redzone") && number(v, vlen, 16, 2048, &x) == 0 && !(x & (x - 1)))
            o->redzone = (unsigned)x;
        else if (KEY("log_path") && vlen > 0 && vlen < sizeof o->log_path) {
            memcpy(o->log_path, v, vlen);
            o->log_path[vlen] = '\0';
        } else if (KEY("halt_on_error") || KEY("fast_unwind_on_malloc") || KEY("help") ||
                   KEY("malloc_context_size") || KEY("quarantine_size_mb") ||
                   KEY("depot_budget_mb") || KEY("redzone") || KEY("log_path")) {
            warn("bad value in", item, len);
            return -EINVAL;
        } else {
            warn("unknown option", item, klen);
            return -EINVAL;
        }
#undef KEY
    }
    return 0;
}

static int apply(const char *s)
{
    if (!s)
        return -EINVAL;
    int help = 0;
    pthread_mutex_lock(&options_lock);
    const snapshot *old = atomic_load_explicit(&current, memory_order_relaxed);
    san_options o = old->o;
    int rc = parse(s, &o, &help);
    if (rc == 0) {
        snapshot *n = malloc(sizeof *n);
        if (n) {
            *n = (snapshot){.o = o, .older = old};
            atomic_store_explicit(&current, n, memory_order_release);
            san_depot_set_budget(o.depot_budget);
        } else {
            rc = -ENOMEM;
        }
    }
    pthread_mutex_unlock(&options_lock);
    if (rc == 0 && help) {
        ssize_t w = write(STDERR_FILENO, help_text, sizeof help_text - 1);
        (void)w;
    }
    return rc;
}

void san_options_fork(int lock)
{
    if (lock)
        pthread_mutex_lock(&options_lock);
    else
        pthread_mutex_unlock(&options_lock);
}

static void fork_prepare(void)
{
    san_options_fork(1);
    san_report_fork(1);
    san_heap_fork(1);
}

static void fork_release(void)
{
    san_heap_fork(0);
    san_report_fork(0);
    san_options_fork(0);
}

static void init(void)
{
    pthread_atfork(fork_prepare, fork_release, fork_release);
    if (crawl_default_options)
        apply(crawl_default_options());
    /* never from the environment of a set-uid or set-gid program */
    const char *env = getauxval(AT_SECURE) ? NULL : getenv("CRAWL_OPTIONS");
    if (env)
        apply(env);
}

const san_options *san_opts(void)
{
    pthread_once(&once, init);
    return &atomic_load_explicit(&current, memory_order_acquire)->o;
}

int crawl_sanitizer_set_options(const char *options)
{
    pthread_once(&once, init);
    return apply(options);
}

int crawl_sanitizer_get_options(char *buf, size_t len)
{
    const san_options *o = san_opts();
    int n = snprintf(buf, len,
                     "halt_on_error=%d:log_path=%s:malloc_context_size=%u:quarantine_size_mb=%zu:"
                     "redzone=%u:fast_unwind_on_malloc=%d:depot_budget_mb=%zu",
                     o->halt_on_error, o->log_path[0] ? o->log_path : "stderr",
                     o->malloc_context_size, o->quarantine_bytes >> 20, o->redzone,
                     o->fast_unwind_on_malloc, o->depot_budget >> 20);
    return n;
}
