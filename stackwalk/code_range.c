/* JIT code ranges: a sorted table replaced copy-on-write, read lock-free.
 *
 * Writers (add/remove) take a mutex, build a new table and publish it with
 * one atomic store. Readers announce themselves in a counter; a writer frees
 * replaced tables only when it sees no reader, which with sequentially
 * consistent operations means no reader can still hold one. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "stackwalk/internal.h"

typedef struct retired {
    struct retired *next;
    sw_range_table *table;
} retired;

static _Atomic(sw_range_table *) current;
static atomic_uint readers;
/* Published after the table: a walk that sees 0 uses no table and need not
 * register as a reader (no shared cache line written by plain walks). */
static atomic_size_t range_count;
static pthread_mutex_t writer_lock = PTHREAD_MUTEX_INITIALIZER;
static retired *retired_list;

/* fork(): the child has only the forking thread. A writer that held the
 * lock, or walkers counted in readers, existed only in the parent. */
static void fork_prepare(void) { pthread_mutex_lock(&writer_lock); }
static void fork_parent(void) { pthread_mutex_unlock(&writer_lock); }
static void fork_child(void)
{
    pthread_mutex_unlock(&writer_lock);
    atomic_store(&readers, 0);
}

__attribute__((constructor)) static void register_fork_handlers(void)
{
    pthread_atfork(fork_prepare, fork_parent, fork_child);
}

const sw_range_table *sw_ranges_enter(void)
{
    if (atomic_load(&range_count) == 0)
        return NULL;
    atomic_fetch_add(&readers, 1);
    return atomic_load(&current);
}

void sw_ranges_exit(const sw_range_table *t)
{
    if (t)
        atomic_fetch_sub(&readers, 1);
}

const crawl_code_range *sw_range_lookup(const sw_range_table *t, uintptr_t ip)
{
    if (!t || t->n == 0 || ip < t->r[0].start)
        return NULL;
    size_t lo = 0, hi = t->n;            /* last entry with start <= ip */
    while (hi - lo > 1) {
        size_t mid = lo + (hi - lo) / 2;
        if (t->r[mid].start <= ip)
            lo = mid;
        else
            hi = mid;
    }
    return ip < t->r[lo].end ? &t->r[lo] : NULL;
}

/* Publish t (under writer_lock) and free what no reader can hold. */
static void publish(sw_range_table *t)
{
    sw_range_table *old = atomic_exchange(&current, t);
    atomic_store(&range_count, t->n);
    if (old) {
        retired *r = malloc(sizeof *r);
        if (r) {
            r->table = old;
            r->next = retired_list;
            retired_list = r;
        }
        /* else: leak the old table rather than free it under a reader */
    }
    if (atomic_load(&readers) == 0) {
        while (retired_list) {
            retired *r = retired_list;
            retired_list = r->next;
            free(r->table);
            free(r);
        }
    }
}

/* ---- perf's map of JIT code: /tmp/perf-PID.map ("START SIZE name" lines,
 * hex without 0x; perf takes the last line covering an address, so a
 * removal is not written: the next range added there replaces it). ---- */

static int perf_map_on;                 /* under writer_lock */
static int perf_map_fd = -1;
static pid_t perf_map_pid;

/* The map file of this process, open (under writer_lock; a fork child
 * opens its own). 0 or a negative errno value. */
static int perf_map_open(void)
{
    pid_t pid = getpid();
    if (perf_map_fd >= 0 && perf_map_pid == pid)
        return 0;
    if (perf_map_fd >= 0)
        close(perf_map_fd);
    char path[64];
    snprintf(path, sizeof path, "/tmp/perf-%d.map", (int)pid);
    perf_map_fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    perf_map_pid = pid;
    return perf_map_fd < 0 ? -errno : 0;
}

/* One line for r (under writer_lock). */
static void perf_map_line(const crawl_code_range *r)
{
    if (!perf_map_on || perf_map_open() != 0)
        return;
    char line[512];
    int k = snprintf(line, sizeof line, "%lx %lx %s\n", (unsigned long)r->start,
                     (unsigned long)(r->end - r->start), r->name ? r->name : "[JIT]");
    if (k <= 0)
        return;
    if ((size_t)k >= sizeof line) {
        k = sizeof line - 1;
        line[k - 1] = '\n';
    }
    crawl__write_all(perf_map_fd, line, (size_t)k);   /* O_APPEND: one line, one write */
}

int crawl_perf_map(int on)
{
    pthread_mutex_lock(&writer_lock);
    int rc = 0;
    if (on && !perf_map_on) {
        rc = perf_map_open();
        perf_map_on = rc == 0;
        const sw_range_table *t = atomic_load(&current);   /* the ranges so far */
        for (size_t i = 0; perf_map_on && t && i < t->n; i++)
            perf_map_line(&t->r[i]);
    } else if (!on) {
        perf_map_on = 0;
    }
    pthread_mutex_unlock(&writer_lock);
    return rc;
}

static int rule_valid(const crawl_unwind_rule *rule)
{
    if (!rule)
        return 0;
    if (rule->kind == CRAWL_UNWIND_FRAME_POINTER)
        return 1;
    return rule->kind == CRAWL_UNWIND_FIXED_FRAME && rule->frame_size >= sizeof(void *) &&
           rule->frame_size % sizeof(void *) == 0 && rule->saved_fp_offset % 8 == 0;
}

int crawl_code_range_add(uintptr_t start, uintptr_t end, const void *method,
                         const crawl_unwind_rule *rule, const char *name)
{
    if (start >= end || !rule_valid(rule))
        return -EINVAL;
    pthread_mutex_lock(&writer_lock);
    const sw_range_table *old = atomic_load(&current);
    size_t n = old ? old->n : 0;
    size_t pos = 0;
    while (pos < n && old->r[pos].start < start)
        pos++;
    if ((pos < n && old->r[pos].start < end) || (pos > 0 && old->r[pos - 1].end > start)) {
        pthread_mutex_unlock(&writer_lock);
        return -EEXIST;
    }
    sw_range_table *t = malloc(sizeof *t + (n + 1) * sizeof t->r[0]);
    if (!t) {
        pthread_mutex_unlock(&writer_lock);
        return -ENOMEM;
    }
    t->n = n + 1;
    if (pos)
        memcpy(t->r, old->r, pos * sizeof t->r[0]);
    t->r[pos] = (crawl_code_range){start, end, method, *rule, name};
    if (n > pos)
        memcpy(t->r + pos + 1, old->r + pos, (n - pos) * sizeof t->r[0]);
    publish(t);
    perf_map_line(&t->r[pos]);
    pthread_mutex_unlock(&writer_lock);
    sw_gdb_jit_add(start, end, name);   /* a debugger learns its name */
    return 0;
}

int crawl_code_range_remove(uintptr_t start)
{
    pthread_mutex_lock(&writer_lock);
    const sw_range_table *old = atomic_load(&current);
    size_t n = old ? old->n : 0, pos = 0;
    while (pos < n && old->r[pos].start != start)
        pos++;
    if (pos == n) {
        pthread_mutex_unlock(&writer_lock);
        return -ENOENT;
    }
    sw_range_table *t = malloc(sizeof *t + (n - 1) * sizeof t->r[0]);
    if (!t) {
        pthread_mutex_unlock(&writer_lock);
        return -ENOMEM;
    }
    t->n = n - 1;
    memcpy(t->r, old->r, pos * sizeof t->r[0]);
    memcpy(t->r + pos, old->r + pos + 1, (n - pos - 1) * sizeof t->r[0]);
    publish(t);
    pthread_mutex_unlock(&writer_lock);
    sw_gdb_jit_remove(start);
    return 0;
}

int crawl_code_range_find(uintptr_t ip, crawl_code_range *out)
{
    const sw_range_table *t = sw_ranges_enter();
    const crawl_code_range *r = sw_range_lookup(t, ip);
    if (r && out)
        *out = *r;
    sw_ranges_exit(t);
    return r != NULL;
}

int crawl_is_code(uintptr_t pc)
{
    crawl__thread *th = crawl__self();
    if (!th->attached)
        return -ENOENT;
    const sw_snapshot *snap = sw_snap_enter(th);
    int code = snap && sw_seg_find(snap, pc) != NULL;
    sw_snap_exit(th);
    return code || crawl_code_range_find(pc, NULL);
}
