/* Sanitizer options: "key=value:key=value", from crawl_default_options(),
 * CRAWL_OPTIONS and the API. A string is applied whole or not at all. */
#include <errno.h>
#include <signal.h>
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
#define SAN_DEFAULT_FLAG(v) (v)
#define SAN_DEFAULT_UINT(v) (v)
#define SAN_DEFAULT_POW2(v) (v)
#define SAN_DEFAULT_MB(v) ((size_t)(v) << 20)
#define SAN_DEFAULT_PATH(v) v
#define SAN_DEFAULT_FILE(v) v
static const snapshot first = {.o = {
#define SAN_OPTION(key, kind, field, def, lo, hi, help) .field = SAN_DEFAULT_##kind(def),
#include "sanitizer/options.def"
#undef SAN_OPTION
}};
static const snapshot *_Atomic current = &first;
static pthread_once_t once = PTHREAD_ONCE_INIT;
static atomic_ulong serial;             /* successful sets so far */
#define MAX_LISTENERS 8
static void (*_Atomic listeners[MAX_LISTENERS])(void);
static pthread_mutex_t options_lock = PTHREAD_MUTEX_INITIALIZER;

/* "  key=default" padded to column 26, then the help line; continuation
 * lines are indented to the same column. */
#define SAN_SHOW_FLAG(v) #v
#define SAN_SHOW_UINT(v) #v
#define SAN_SHOW_POW2(v) #v
#define SAN_SHOW_MB(v) #v
#define SAN_SHOW_PATH(v) "PATH"
#define SAN_SHOW_FILE(v) "FILE"
static const struct option_help {
    const char *key_default, *help;
} help_lines[] = {
#define SAN_OPTION(key, kind, field, def, lo, hi, help) {#key "=" SAN_SHOW_##kind(def), help},
#include "sanitizer/options.def"
#undef SAN_OPTION
    {"help=1", "print this"},
};

static void print_help(void)
{
    char buf[4096];
    size_t n = (size_t)snprintf(buf, sizeof buf,
                                "crawl sanitizer options (key=value, separated by ':'):\n");
    for (size_t i = 0; i < sizeof help_lines / sizeof help_lines[0]; i++) {
        n += (size_t)snprintf(buf + n, sizeof buf - n, "  %-23s ", help_lines[i].key_default);
        for (const char *h = help_lines[i].help; *h && n < sizeof buf - 32; h++) {
            buf[n++] = *h;
            if (*h == '\n')
                n += (size_t)snprintf(buf + n, sizeof buf - n, "%26s", "");
        }
        buf[n++] = '\n';
    }
    crawl__write_all(STDERR_FILENO, buf, n);
}

/* One line: what is wrong with item, then what the option takes when that
 * is known (takes: "" for none). */
static void warn(const char *what, const char *item, size_t len, const char *takes)
{
    char line[400];
    int n = snprintf(line, sizeof line, "crawl: %s '%.*s' in sanitizer options%s%s%s; none applied\n",
                     what, (int)(len > 200 ? 200 : len), item, *takes ? " (takes " : "", takes,
                     *takes ? ")" : "");
    crawl__write_all(STDERR_FILENO, line, (size_t)n);
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

/* One value of each kind into its field: 1 if it is valid. */
static int parse_FLAG(const char *v, size_t len, long lo, long hi, int *out)
{
    long x;
    return number(v, len, lo, hi, &x) == 0 ? (*out = (int)x, 1) : 0;
}

static int parse_UINT(const char *v, size_t len, long lo, long hi, unsigned *out)
{
    long x;
    return number(v, len, lo, hi, &x) == 0 ? (*out = (unsigned)x, 1) : 0;
}

static int parse_POW2(const char *v, size_t len, long lo, long hi, unsigned *out)
{
    long x;
    return number(v, len, lo, hi, &x) == 0 && !(x & (x - 1)) ? (*out = (unsigned)x, 1) : 0;
}

static int parse_MB(const char *v, size_t len, long lo, long hi, size_t *out)
{
    long x;
    return number(v, len, lo, hi, &x) == 0 ? (*out = (size_t)x << 20, 1) : 0;
}

static int parse_PATH(const char *v, size_t len, long lo, long hi, char (*out)[512])
{
    (void)lo, (void)hi;
    if (len == 0 || len >= sizeof *out)
        return 0;
    memcpy(*out, v, len);
    (*out)[len] = '\0';
    return 1;
}

/* A FILE may also be set to nothing again ("key=" is allowed). */
static int parse_FILE(const char *v, size_t len, long lo, long hi, char (*out)[512])
{
    (void)lo, (void)hi;
    if (len >= sizeof *out)
        return 0;
    memcpy(*out, v, len);
    (*out)[len] = '\0';
    return 1;
}

/* What an option of each kind (options.def) takes, for the warning line
 * of a value its parse_ refused. */
static void takes_FLAG(long lo, long hi, char *out, size_t size)
{
    (void)lo, (void)hi;
    snprintf(out, size, "0 or 1");
}

static void takes_UINT(long lo, long hi, char *out, size_t size)
{
    snprintf(out, size, "%ld .. %ld", lo, hi);
}

static void takes_POW2(long lo, long hi, char *out, size_t size)
{
    snprintf(out, size, "a power of 2, %ld .. %ld", lo, hi);
}

static void takes_MB(long lo, long hi, char *out, size_t size)
{
    snprintf(out, size, "%ld .. %ld, in MiB", lo, hi);
}

static void takes_PATH(long lo, long hi, char *out, size_t size)
{
    (void)lo, (void)hi;
    snprintf(out, size, "a path shorter than 512 bytes");
}

#define takes_FILE takes_PATH

/* What heap_profile_signal takes: 1 to 64 but those sw_signal_refused
 * refuses (its list: a run of 4 or more as "a-b"), the walk signal named
 * apart, as it is now */
static void takes_signal(char *out, size_t size)
{
    int walk = sw_walk_signal_now();
    int refused[65] = {0};
    for (int sig = 1; sig <= 64; sig++)
        refused[sig] = sig != walk && sw_signal_refused(sig);
    size_t n = (size_t)snprintf(out, size, "1 .. 64 but ");
    const char *sep = "";
    for (int sig = 1; sig <= 64 && n < size; sig++) {
        if (!refused[sig])
            continue;
        int last = sig;
        while (last < 64 && refused[last + 1])
            last++;
        if (last - sig >= 3) {
            n += (size_t)snprintf(out + n, size - n, "%s%d-%d", sep, sig, last);
        } else {
            for (int k = sig; k <= last && n < size; k++, sep = ", ")
                n += (size_t)snprintf(out + n, size - n, "%s%d", sep, k);
        }
        sep = ", ";
        sig = last;
    }
    if (n < size)
        snprintf(out + n, size - n, " and crawl's walk signal, %d", walk);
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
            warn("malformed item (expected key=value)", item, len, "");
            return -EINVAL;
        }
        size_t klen = (size_t)(eq - item), vlen = len - klen - 1;
        const char *v = eq + 1;
        int found = 0, ok = 0;
        char takes[80] = "";
#define KEY(name) (klen == sizeof name - 1 && memcmp(item, name, klen) == 0)
#define SAN_OPTION(key, kind, field, def, lo, hi, help)                                        \
    if (!found && KEY(#key)) {                                                                 \
        found = 1;                                                                             \
        ok = parse_##kind(v, vlen, lo, hi, &o->field);                                         \
        if (!ok)                                                                               \
            takes_##kind(lo, hi, takes, sizeof takes);                                         \
    }
#include "sanitizer/options.def"
#undef SAN_OPTION
        if (!found && KEY("help")) {
            long x;
            found = 1;
            ok = number(v, vlen, 0, 1, &x) == 0;
            if (ok)
                *want_help = (int)x;
            else
                takes_FLAG(0, 1, takes, sizeof takes);
        }
        if (!found) {
            warn("unknown option", item, klen, "");
            return -EINVAL;
        }
        if (!ok) {
            warn("bad value in", item, len, takes);
            return -EINVAL;
        }
#undef KEY
    }
    /* values a range cannot say (sw_signal_refused: the signals no handler
     * can catch, those a fault raises, glibc's own, crawl's walk signal) */
    int bad_signal = o->heap_profile_signal && sw_signal_refused((int)o->heap_profile_signal);
    if (bad_signal) {
        char item[40];
        int n = snprintf(item, sizeof item, "heap_profile_signal=%u", o->heap_profile_signal);
        char takes[120];
        takes_signal(takes, sizeof takes);
        warn("bad value in", item, (size_t)n, takes);
        return -EINVAL;
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
            atomic_fetch_add_explicit(&serial, 1, memory_order_release);
            san_depot_set_budget(o.depot_budget);
        } else {
            rc = -ENOMEM;
        }
    }
    pthread_mutex_unlock(&options_lock);
    if (rc == 0 && o.gpa_sample_rate != old->o.gpa_sample_rate)
        san_gpa_rate_changed();
    if (rc == 0 && o.perf_map != old->o.perf_map)
        crawl_perf_map(o.perf_map);      /* stackwalk's own switch */
    if (rc == 0 && help)
        print_help();
    if (rc == 0) {
        san_hook_kind_update();          /* (not through san_opts: init calls this) */
        for (int i = 0; i < MAX_LISTENERS; i++) {
            void (*fn)(void) = atomic_load(&listeners[i]);
            if (fn)
                fn();
        }
    }
    return rc;
}

unsigned san_gpa_rate_now(void)
{
    return atomic_load_explicit(&current, memory_order_acquire)->o.gpa_sample_rate;
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
    san_gpa_fork(1);
    san_hp_fork(1);
}

static void fork_release(void)
{
    san_hp_fork(0);
    san_gpa_fork(0);
    san_heap_fork(0);
    san_report_fork(0);
    san_options_fork(0);
}

static void fork_child(void)
{
    san_hp_fork_child();
    san_leak_fork_child();
    fork_release();
}

static atomic_int initialized;           /* init() has run: san_opts skips pthread_once */

static void init(void)
{
    pthread_atfork(fork_prepare, fork_release, fork_child);
    if (crawl_default_options)
        apply(crawl_default_options());
    /* never from the environment of a set-uid or set-gid program */
    const char *env = getauxval(AT_SECURE) ? NULL : getenv("CRAWL_OPTIONS");
    if (env)
        apply(env);
    /* a program run with options (the preload's GWP-ASan, a report's
     * log_path) gets its reports even if it closes stderr before them */
    if (crawl_default_options || env)
        san_keep_stderr();
    atomic_store_explicit(&initialized, 1, memory_order_release);
}

/* Read at load when there are options at all: some act without a
 * sanitizer call (perf_map), the depot's puts are signal-safe and never
 * read options themselves (depot_budget_mb), and help=1 or a bad key
 * should be answered whatever the program calls. */
__attribute__((constructor)) static void options_at_load(void)
{
    const char *env = getauxval(AT_SECURE) ? NULL : getenv("CRAWL_OPTIONS");
    if (crawl_default_options || env)
        pthread_once(&once, init);
}

const san_options *san_opts(void)
{
    if (!atomic_load_explicit(&initialized, memory_order_acquire))
        pthread_once(&once, init);
    return &atomic_load_explicit(&current, memory_order_acquire)->o;
}

int crawl_sanitizer_set_options(const char *options)
{
    pthread_once(&once, init);
    return apply(options);
}

#define SAN_PRINT_FLAG(o, f) "%d", (o)->f
#define SAN_PRINT_UINT(o, f) "%u", (o)->f
#define SAN_PRINT_POW2(o, f) "%u", (o)->f
#define SAN_PRINT_MB(o, f) "%zu", (o)->f >> 20
#define SAN_PRINT_PATH(o, f) "%s", (o)->f[0] ? (o)->f : "stderr"
#define SAN_PRINT_FILE(o, f) "%s", (o)->f

int crawl_sanitizer_get_options(char *buf, size_t len)
{
    const san_options *o = san_opts();
    char tmp[4096];
    size_t n = 0;
#define SAN_OPTION(key, kind, field, def, lo, hi, help)                                        \
    n += (size_t)snprintf(tmp + n, sizeof tmp - n, "%s" #key "=", n ? ":" : "");               \
    if (n < sizeof tmp)                                                                        \
        n += (size_t)snprintf(tmp + n, sizeof tmp - n, SAN_PRINT_##kind(o, field));            \
    if (n > sizeof tmp - 1)                                                                    \
        n = sizeof tmp - 1;
#include "sanitizer/options.def"
#undef SAN_OPTION
    return snprintf(buf, len, "%s", tmp);
}

int crawl_sanitizer_on_options_change(void (*fn)(void))
{
    if (!fn)
        return -EINVAL;
    for (int i = 0; i < MAX_LISTENERS; i++) {
        void (*expected)(void) = NULL;
        /* (a failed exchange loads the slot: another thread may have put
         * this very fn there meanwhile) */
        if (atomic_compare_exchange_strong(&listeners[i], &expected, fn) || expected == fn)
            return 0;
    }
    return -ENOSPC;
}

unsigned long crawl_sanitizer_options_serial(void)
{
    pthread_once(&once, init);
    return atomic_load_explicit(&serial, memory_order_acquire);
}

#define SAN_LONG_FLAG(o, f) (long)(o)->f
#define SAN_LONG_UINT(o, f) (long)(o)->f
#define SAN_LONG_POW2(o, f) (long)(o)->f
#define SAN_LONG_MB(o, f) (long)((o)->f >> 20)
#define SAN_LONG_PATH(o, f) (-1)
#define SAN_LONG_FILE(o, f) (-1)
#define SAN_IS_NUMBER_PATH 0
#define SAN_IS_NUMBER_FILE 0
#define SAN_IS_NUMBER_FLAG 1
#define SAN_IS_NUMBER_UINT 1
#define SAN_IS_NUMBER_POW2 1
#define SAN_IS_NUMBER_MB 1

int crawl_sanitizer_get_option(const char *key, long *value)
{
    if (!key || !value)
        return -EINVAL;
    const san_options *o = san_opts();
#define SAN_OPTION(k, kind, field, def, lo, hi, help)                                          \
    if (SAN_IS_NUMBER_##kind && strcmp(key, #k) == 0) {                                        \
        *value = SAN_LONG_##kind(o, field);                                                    \
        return 0;                                                                              \
    }
#include "sanitizer/options.def"
#undef SAN_OPTION
    return -ENOENT;
}
