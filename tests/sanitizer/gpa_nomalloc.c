/* An embedder's own allocator built on the GWP-ASan stubs
 * (crawl_gpa_should_sample / crawl_gpa_allocate / crawl_gpa_owns): this
 * program's malloc family goes to the pool when told to, else to glibc
 * (__libc_malloc and friends), counting the glibc calls made while it is
 * "armed". It arms itself, touches a freed pool allocation, and crawl's
 * fault handler writes the report, then hands the signal on to this
 * program's own SIGSEGV handler, which checks: no glibc allocation was made
 * from the handler (the report's own allocations, symbolization's, came
 * from the pool's report arena), and some were made there. Exit 0 then;
 * 1 when the handler reached glibc's allocator; 2 when the report made no
 * allocation at all (the check proved nothing); 3 when no fault came.
 * The report itself goes to stderr (the test checks its frames). */
#define _GNU_SOURCE
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <crawl/guarded.h>
#include <crawl/sanitizer.h>

extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void *__libc_memalign(size_t, size_t);
extern void __libc_free(void *);

static atomic_int armed, libc_calls, pool_calls;

static void *from_pool(size_t n, size_t align)
{
    if (!crawl_gpa_should_sample_inline())
        return NULL;
    void *p = crawl_gpa_allocate(n, align);
    if (p && atomic_load(&armed))
        atomic_fetch_add(&pool_calls, 1);
    return p;
}

static void libc_call(void)
{
    if (atomic_load(&armed))
        atomic_fetch_add(&libc_calls, 1);
}

void *malloc(size_t n)
{
    void *p = from_pool(n, 0);
    if (p)
        return p;
    libc_call();
    return __libc_malloc(n);
}

void *calloc(size_t n, size_t size)
{
    size_t total;
    if (__builtin_mul_overflow(n, size, &total))
        return NULL;
    void *p = from_pool(total, 0);
    if (p)
        return memset(p, 0, total);
    libc_call();
    return __libc_calloc(n, size);
}

void free(void *p)
{
    if (crawl_gpa_owns_inline(p))
        crawl_gpa_deallocate(p);
    else
        __libc_free(p);
}

void *realloc(void *p, size_t n)
{
    if (p && crawl_gpa_owns_inline(p)) {
        size_t old = crawl_gpa_size(p);
        void *q = malloc(n);
        if (q)
            memcpy(q, p, old < n ? old : n);
        free(p);
        return q;
    }
    if (!p)
        return malloc(n);
    libc_call();
    return __libc_realloc(p, n);
}

void *memalign(size_t align, size_t n)
{
    void *p = from_pool(n, align);
    if (p)
        return p;
    libc_call();
    return __libc_memalign(align, n);
}

int posix_memalign(void **out, size_t align, size_t n)
{
    void *p = memalign(align, n);
    if (!p)
        return 12;                       /* ENOMEM */
    *out = p;
    return 0;
}

void *aligned_alloc(size_t align, size_t n) { return memalign(align, n); }

static void on_segv(int sig)
{
    (void)sig;
    int libc = atomic_load(&libc_calls), pool = atomic_load(&pool_calls);
    atomic_store(&armed, 0);
    char line[160];
    int k = snprintf(line, sizeof line,
                     "gpa_nomalloc: %d glibc allocation(s) and %d report-arena allocation(s) "
                     "from the fault handler\n",
                     libc, pool);
    ssize_t w = write(STDOUT_FILENO, line, (size_t)k);
    (void)w;
    _exit(libc ? 1 : pool ? 0 : 2);
}

__attribute__((noinline)) static char touch(volatile char *p) { return *p; }

int main(void)
{
    /* rate 0: nothing is sampled unless asked; the report's allocations
     * are served regardless */
    if (crawl_sanitizer_set_options("gpa_sample_rate=0") != 0)
        return 4;
    signal(SIGSEGV, on_segv);            /* before the pool: crawl forwards to it */
    char *p = crawl_gpa_allocate(16, 0);
    if (!p)
        return 5;
    char *volatile stale = p;            /* kept past free on purpose */
    free(p);
    atomic_store(&armed, 1);
    touch(stale);
    return 3;
}
