/* Leak checks, LeakSanitizer's way, over the heap profile's live table:
 * roots (stacks, registers, static data, static TLS) are scanned
 * conservatively for words pointing into recorded chunks (interior pointers
 * count), then every chunk reached is scanned in turn. Chunks never reached
 * leaked: indirectly when another leaked chunk points to them, directly
 * otherwise. */
#include <dlfcn.h>
#include <dirent.h>
#include <errno.h>
#include <link.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include <crawl/guarded.h>

#include "sanitizer/heap_output.h"

enum { UNREACHED, REACHABLE, INDIRECT, GONE };   /* GONE: freed while the check ran */

/* What the check asks glibc, looked up once as libcrawl loads: a dlsym
 * while the check runs would be a program's dl call like any other, and
 * glibc then frees the program's last dlerror() message and its record
 * (allocated before the snapshot: they were reported as leaks). */
static struct {
    void (*tls_static_info)(size_t *size, size_t *align);   /* _dl_get_tls_static_info */
    /* what glibc tells debuggers (libthread_db's field descriptors: bits,
     * count, offset): where a thread descriptor keeps the kernel's tid and
     * its link in glibc's lists of live threads, and where those lists are
     * in the dynamic loader's _rtld_global (glibc's stacks, and the main
     * thread's and those the program gave) */
    const uint32_t *tid_desc, *list_desc, *used_desc, *user_desc;
    const char *rtld_global;
    uintptr_t libc_bias;                /* libc's load bias (dlpi_addr), 0: not found */
} glibc;

__attribute__((constructor)) static void look_up_glibc(void)
{
    *(void **)&glibc.tls_static_info = dlsym(RTLD_DEFAULT, "_dl_get_tls_static_info");
    glibc.tid_desc = dlsym(RTLD_DEFAULT, "_thread_db_pthread_tid");
    glibc.list_desc = dlsym(RTLD_DEFAULT, "_thread_db_pthread_list");
    glibc.used_desc = dlsym(RTLD_DEFAULT, "_thread_db_rtld_global__dl_stack_used");
    glibc.user_desc = dlsym(RTLD_DEFAULT, "_thread_db_rtld_global__dl_stack_user");
    glibc.rtld_global = dlsym(RTLD_DEFAULT, "_rtld_global");
    void *libc_free = dlsym(RTLD_DEFAULT, "__libc_free");   /* which module is libc */
    Dl_info info;
    struct link_map *libc = NULL;
    if (libc_free && dladdr1(libc_free, &info, (void **)&libc, RTLD_DL_LINKMAP) && libc)
        glibc.libc_bias = libc->l_addr;
    if (!glibc.tls_static_info || !glibc.tid_desc || !glibc.list_desc || !glibc.used_desc ||
        !glibc.user_desc || !glibc.rtld_global || !libc_free)
        (void)dlerror();                 /* (another libc): its message is not the program's */
}

enum { SKIP_TABLES = HP_SHARDS + 1 };   /* hp_table_ranges' most */

typedef struct scan {
    const hp_entry *e;                  /* sorted by ptr */
    size_t n;
    unsigned char *mark;
    size_t *work, nwork;
    uintptr_t lo, hi;                   /* the chunks' span: a quick first test */
    /* crawl's own tables of chunk addresses (SKIP_TABLES), then the
     * snapshot, this struct (lo and hi are chunk addresses), the pool's
     * slots, and the dead part of an alternate signal stack the check at
     * exit runs on */
    uintptr_t skip[SKIP_TABLES + 4][2];
    size_t nskip;
    int vanishing;                      /* 1: ranges that may be unmapped under the scan */
    int in_libc;                        /* 1: scanning libc's own data (malloc's state) */
    /* the check at exit: the calling thread's stack from here up and these
     * nregs register sets, instead of from scan_own_stack's frame (0: that) */
    uintptr_t stack_from;
    const crawl_regs *regs;
    size_t nregs;
} scan;

/* Sort the snapshot by address. Not with qsort: glibc's copies the array
 * into a malloc'ed buffer of the same size (every chunk's address) and
 * frees it. Where that buffer lies in memory the check scans as roots
 * (under AddressSanitizer: a size class of its own, with no recorded
 * chunk in it), those copies made every chunk reachable. A bottom-up
 * merge sort through a scratch mapping instead, unmapped before the scan
 * (without one, out of memory, qsort after all). Not inlined: the entries
 * it moves through its own frame are then below the caller's, where
 * clear_stack_below() reaches them. */
static int by_ptr(const void *a, const void *b)
{
    const hp_entry *x = a, *y = b;
    return x->ptr < y->ptr ? -1 : x->ptr > y->ptr;
}

__attribute__((noinline)) static void sort_by_ptr(hp_entry *e, size_t n)
{
    if (n < 2)
        return;
    size_t bytes = n * sizeof *e;
    hp_entry *tmp = crawl__mmap(bytes, PROT_READ | PROT_WRITE, 0);
    if (tmp == MAP_FAILED) {
        qsort(e, n, sizeof *e, by_ptr);
        return;
    }
    hp_wipe_on_fork(tmp, bytes);
    hp_entry *from = e, *to = tmp;
    for (size_t width = 1; width < n; width *= 2) {
        for (size_t lo = 0; lo < n; lo += 2 * width) {
            size_t mid = lo + width < n ? lo + width : n;
            size_t hi = lo + 2 * width < n ? lo + 2 * width : n;
            size_t a = lo, b = mid, k = lo;
            while (a < mid && b < hi)
                to[k++] = from[b].ptr < from[a].ptr ? from[b++] : from[a++];
            while (a < mid)
                to[k++] = from[a++];
            while (b < hi)
                to[k++] = from[b++];
        }
        hp_entry *t = from;
        from = to, to = t;
    }
    if (from != e)
        memcpy(e, from, bytes);
    crawl__munmap(tmp, bytes);
}

/* The chunk holding address w, or -1. */
static long chunk_of(const scan *s, uintptr_t w)
{
    if (w < s->lo || w >= s->hi)
        return -1;
    size_t a = 0, b = s->n;             /* the last chunk starting at or below w */
    while (b - a > 1) {
        size_t m = (a + b) / 2;
        if (s->e[m].ptr <= w)
            a = m;
        else
            b = m;
    }
    const hp_entry *e = &s->e[a];
    return w >= e->ptr && (w < e->ptr + e->size || w == e->ptr) ? (long)a : -1;
}

/* Mark what [lo, hi) points to: unreached chunks become `to` and go on the
 * work list (what they point to is `to` as well, transitively). */
typedef void scan_fn(scan *s, uintptr_t lo, uintptr_t hi, int to);

/* fn on each part of [lo, hi) that lies outside the ranges cut[0..n) (the
 * ranges before the first that overlaps overlap none of its parts) */
static void scan_outside(scan *s, const uintptr_t (*cut)[2], size_t n, uintptr_t lo,
                         uintptr_t hi, int to, scan_fn *fn)
{
    for (size_t i = 0; i < n; i++) {
        uintptr_t a = cut[i][0], b = cut[i][1];
        if (a < hi && b > lo) {
            if (lo < a)
                scan_outside(s, cut + i + 1, n - i - 1, lo, a, to, fn);
            if (b < hi)
                scan_outside(s, cut + i + 1, n - i - 1, b, hi, to, fn);
            return;
        }
    }
    fn(s, lo, hi, to);
}

static scan_fn scan_words;
/* [lo, hi) without crawl's own tables */
static void scan_range(scan *s, uintptr_t lo, uintptr_t hi, int to)
{
    scan_outside(s, s->skip, s->nskip, lo, hi, to, scan_words);
}

/* Ranges this long or longer, and every range of other threads' stacks and
 * of the anonymous mappings, are read through the kernel (read_safe): a
 * large chunk is a mapping of its own that another thread's free unmaps,
 * and another thread's stack goes when it exits, while the check runs.
 * Short chunks (inside malloc's heaps) are read in place. */
#define SAFE_READ_MIN (64u << 10)
static int safe_reads = 1;              /* 0: process_vm_readv refused (seccomp) */

/* Copy [a, a + n) into buf through process_vm_readv on this process: the
 * bytes up to the first page that is gone, instead of a fault. -1 when the
 * kernel refuses the call itself. */
static ssize_t read_safe(void *buf, uintptr_t a, size_t n)
{
    struct iovec l = {buf, n}, r = {(void *)a, n};
    ssize_t got = process_vm_readv(getpid(), &l, 1, &r, 1, 0);
    if (got < 0 && errno != EFAULT)
        return -1;
    return got < 0 ? 0 : got;
}

static void scan_buf(scan *s, const uintptr_t *ws, size_t n, uintptr_t from, uintptr_t self,
                     uintptr_t hi, int to);

static void scan_words(scan *s, uintptr_t lo, uintptr_t hi, int to)
{
    uintptr_t self = lo;
    lo = (lo + sizeof(uintptr_t) - 1) & ~(uintptr_t)(sizeof(uintptr_t) - 1);
    if (hi <= lo)
        return;
    size_t words = (hi - lo) / sizeof(uintptr_t);
    if ((hi - lo >= SAFE_READ_MIN || s->vanishing) && safe_reads) {
        uintptr_t buf[2048], end = lo + words * sizeof(uintptr_t);
        for (uintptr_t a = lo; a < end;) {
            size_t want = end - a;
            want = want < sizeof buf ? want : sizeof buf;
            ssize_t got = read_safe(buf, a, want);
            if (got < 0) {
                safe_reads = 0;          /* refused: read in place from here on */
                scan_words(s, a, hi, to);
                return;
            }
            scan_buf(s, buf, (size_t)got / sizeof(uintptr_t), a, self, hi, to);
            if ((size_t)got < want)      /* a page gone: go on at the next one */
                a = ((a + (size_t)got) | 4095) + 1;
            else
                a += want;
        }
        return;
    }
    scan_buf(s, (const uintptr_t *)lo, words, lo, self, hi, to);
}

/* Values held outside memory (another thread's registers): roots. */
static void scan_words_of(scan *s, const uintptr_t *v, size_t n)
{
    scan_buf(s, v, n, 0, 0, 0, REACHABLE);
}

/* In a process that runs AddressSanitizer (whether crawl itself is built
 * with it or not: this file never is, see CMakeLists.txt), memory it has
 * poisoned holds no live value: freed chunks in its quarantine keep what
 * they held, in size classes the check scans as anonymous memory, and a
 * stale chunk address there is no root. Weak: NULL elsewhere. */
extern void *__asan_region_is_poisoned(void *beg, size_t size) __attribute__((weak));
extern void __asan_get_shadow_mapping(size_t *scale, size_t *offset) __attribute__((weak));

/* 1 if [lo, hi) overlaps AddressSanitizer's shadow memory or the gap
 * between its two parts (from its offset to the shadow of the highest
 * user address): never the program's memory, and the low shadow is a
 * read-write anonymous mapping small enough to pass for one. */
static int asan_shadow(uintptr_t lo, uintptr_t hi)
{
    if (!__asan_get_shadow_mapping)
        return 0;
    size_t scale = 0, offset = 0;
    __asan_get_shadow_mapping(&scale, &offset);
    uintptr_t end = offset + ((((uintptr_t)1 << 47) - 1) >> scale) + 1;
    return lo < end && hi > offset;
}

/* 1 if w is where glibc's chunk after e begins (its header: e's chunk is
 * 16k + 8 bytes or a little less, and its last word is that header's
 * first). glibc's bins, top and last remainder in its main arena point at
 * chunk headers: such a word in libc's data is malloc's own, not a
 * reference to e (it kept e's leak from being reported). */
static int next_header(const hp_entry *e, uintptr_t w)
{
    size_t chunk = (e->size + 8 + 15) & ~(size_t)15;
    if (chunk < 32)
        chunk = 32;
    return w == e->ptr + chunk - 16;
}

/* ws[0..n): words read from address `from` on (0: registers) */
static void scan_buf(scan *s, const uintptr_t *ws, size_t n, uintptr_t from, uintptr_t self,
                     uintptr_t hi, int to)
{
    /* (both, or neither: asking about a shadow address faults, and only
     * asan_shadow() keeps those out) */
    int asan = from && __asan_region_is_poisoned && __asan_get_shadow_mapping;
    for (size_t i = 0; i < n; i++) {
        uintptr_t w;
        memcpy(&w, &ws[i], sizeof w);
        if (to == INDIRECT && w - self < hi - self)
            continue;                    /* a leaked chunk's pointer to itself does not make
                                            it an indirect leak (LSan's rule) */
        long k = chunk_of(s, w);
        if (k < 0 || s->mark[k] == REACHABLE || s->mark[k] == GONE ||
            (to == INDIRECT && s->mark[k] == INDIRECT))
            continue;
        if (asan && __asan_region_is_poisoned((void *)(from + i * sizeof w), sizeof w))
            continue;
        if (s->in_libc && next_header(&s->e[k], w))
            continue;
        s->mark[k] = (unsigned char)to;
        s->work[s->nwork++] = (size_t)k;
    }
}

/* Other threads run on while the check scans (they are not stopped): a
 * chunk of the snapshot that one of them freed meanwhile, or freed and
 * had recorded again, is no leak, though the scan may have missed its
 * last references (gone with it): 1 check in 2 reported some of a thread's
 * chunks that it allocated and freed in a loop. The chunks not reached are
 * looked up again in the live table; those it no longer holds as they
 * were go out of the report (GONE). */
static void drop_gone(scan *s)
{
    for (size_t i = 0; i < s->n; i++)
        if ((s->mark[i] == UNREACHED || s->mark[i] == INDIRECT) && !hp_still_recorded(&s->e[i]))
            s->mark[i] = GONE;
}

static void propagate(scan *s, int to)
{
    while (s->nwork) {
        const hp_entry *e = &s->e[s->work[--s->nwork]];
        scan_range(s, e->ptr, e->ptr + e->size, to);
    }
}

/* Writable PT_LOAD segments of every module: static data, .bss, GOTs.
 * Except where crawl__loader_lock_suspect (a child of a fork made while
 * other threads ran, whose loader lock may be held for ever: the check at
 * exit hung such a child): there the writable file mappings of the
 * modules' files (read_maps) stand in for these segments (the .bss beyond
 * the file is an anonymous mapping, scanned as such), read without
 * faulting (another thread of the child may unmap them meanwhile). */
static int scan_module(struct dl_phdr_info *info, size_t size, void *arg)
{
    (void)size;
    scan *s = arg;
    s->in_libc = glibc.libc_bias && info->dlpi_addr == glibc.libc_bias;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type != PT_LOAD || !(ph->p_flags & PF_W))
            continue;
        uintptr_t lo = info->dlpi_addr + ph->p_vaddr;
        scan_range(s, lo, lo + ph->p_memsz, REACHABLE);
    }
    s->in_libc = 0;
    return 0;
}

/* Readable mappings (/proc/self/maps): to clip ranges that may not be all
 * mapped (the main thread's stack bounds come from its rlimit), and the
 * anonymous read-write ones, roots as valgrind's memcheck takes them:
 * memory a program's own allocator got from mmap (Python's object arenas,
 * Lua's) holds pointers to malloc'ed chunks. */
typedef struct maps {
    uintptr_t (*r)[3];                  /* lo, hi, 1 anonymous and writable, 2 [heap],
                                           3 a module's writable file pages, 4 libc's
                                           (3 and 4 only where crawl__loader_lock_suspect) */
    size_t n;
    uintptr_t *guard_hi;                /* ends of anonymous mappings with no access ---p */
    size_t nguard;
} maps;

/* Each loaded module's dynamic section (an absolute address, whatever the
 * module's base: PIE or not, linked at 0 or elsewhere), and whether it is
 * libc, from the loader's list, read without its lock (only where that
 * lock may be held for ever: a fork child). Up to cap of them. */
typedef struct module_at {
    uintptr_t dyn;
    int libc;
} module_at;

static size_t module_dynamics(module_at *out, size_t cap)
{
    size_t n = 0;
    for (const struct link_map *l = _r_debug.r_map; l && n < cap; l = l->l_next)
        if (l->l_ld) {
            out[n].dyn = (uintptr_t)l->l_ld;
            out[n++].libc = glibc.libc_bias && l->l_addr == glibc.libc_bias;
        }
    return n;
}

/* A module's file mappings, as /proc/self/maps lists them: the one that
 * holds its dynamic section and those right after it of the same file
 * (RELRO, then data); the writable ones are its static data. (Not any
 * other mapping of the file: libdwfl maps whole ELF files writable.) */
typedef struct module_file {
    char dev[16];
    unsigned long inode;
    uintptr_t end;                      /* where its last mapping so far ends */
    int libc;
} module_file;

enum { MODULES_MAX = 1024 };

static void read_maps(maps *m)
{
    m->r = NULL, m->n = 0;
    m->guard_hi = NULL, m->nguard = 0;
    FILE *f = fopen("/proc/self/maps", "re");
    if (!f)
        return;
    size_t cap = 0, gcap = 0, nmods = 0, nfiles = 0;
    /* the modules' files (only for the fallback) */
    module_at *mods = NULL;
    module_file *files = NULL;
    if (crawl__loader_lock_suspect) {
        mods = malloc(MODULES_MAX * sizeof *mods);
        files = malloc(MODULES_MAX * sizeof *files);
        if (mods && files)
            nmods = module_dynamics(mods, MODULES_MAX);
    }
    char line[512];
    while (fgets(line, sizeof line, f)) {
        unsigned long lo, hi, off, inode;
        char perms[8], dev[16];
        int pathat = 0;
        if (sscanf(line, "%lx-%lx %7s %lx %15s %lu %n", &lo, &hi, perms, &off, dev, &inode,
                   &pathat) < 6)
            continue;
        if (strcmp(perms, "---p") == 0 && inode == 0) {
            if (m->nguard == gcap) {
                gcap = gcap ? gcap * 2 : 64;
                uintptr_t *more = realloc(m->guard_hi, gcap * sizeof *more);
                if (!more)
                    continue;
                m->guard_hi = more;
            }
            m->guard_hi[m->nguard++] = hi;
            continue;
        }
        if (perms[0] != 'r')
            continue;
        const char *path = pathat ? line + pathat : "";
        int module = 0;                  /* 3 a module's writable pages, 4 libc's */
        for (size_t i = 0; inode != 0 && i < nfiles && !module; i++)
            if (files[i].end == lo && files[i].inode == inode && strcmp(files[i].dev, dev) == 0) {
                files[i].end = hi;
                module = files[i].libc ? 4 : 3;
            }
        for (size_t i = 0; inode != 0 && !module && i < nmods && nfiles < MODULES_MAX; i++)
            if (mods[i].dyn >= lo && mods[i].dyn < hi) {
                module_file *mf = &files[nfiles++];
                memcpy(mf->dev, dev, sizeof mf->dev);
                mf->inode = inode;
                mf->end = hi;
                mf->libc = mods[i].libc;
                module = mf->libc ? 4 : 3;
            }
        if (perms[1] != 'w')
            module = 0;
        int anon = module                              ? module
                   : inode != 0 || perms[1] != 'w'     ? 0
                   : strncmp(path, "[heap]", 6) == 0 ? 2
                   : path[0] == '\n' || path[0] == '\0' || strncmp(path, "[stack", 6) == 0 ||
                           strncmp(path, "[anon", 5) == 0
                       ? 1
                       : 0;
        if (m->n == cap) {
            cap = cap ? cap * 2 : 256;
            uintptr_t(*more)[3] = realloc(m->r, cap * sizeof *more);
            if (!more)
                break;
            m->r = more;
        }
        m->r[m->n][0] = lo, m->r[m->n][1] = hi, m->r[m->n][2] = (uintptr_t)anon;
        m->n++;
    }
    fclose(f);
    free(mods);
    free(files);
}

/* Anonymous writable mappings, except malloc's heaps: the brk heap, and
 * any mapping that holds a recorded chunk smaller than malloc's mmap
 * threshold (128 KiB: glibc's other arenas, a sanitizer's allocator) --
 * freed memory there holds stale pointers. The recorded chunks themselves
 * are left out (scanned when reached: a large chunk is a mapping of its
 * own, which the kernel may merge with its neighbours, a Python arena say),
 * and so are the calling thread's stack and the other attached threads'
 * (scanned from their stack pointers). */
#define SMALL_CHUNK (128u << 10)
/* The other attached threads: tid[i]'s stack is [stack[i][0], stack[i][1]);
 * memo[0..nmemo): every attached thread's walk memos */
typedef struct thread_list {
    pid_t *tid;
    uintptr_t (*stack)[2];
    size_t n, cap;
    uintptr_t (*memo)[2];
    size_t nmemo;
} thread_list;

/* Where glibc keeps a thread's kernel tid in its descriptor, as it tells
 * debuggers (libthread_db's field descriptor _thread_db_pthread_tid: bits,
 * count, offset), checked against this thread's own; -1 if unknown. The
 * kernel clears that tid when the thread exits (0), and pthread_join sets
 * it to -1. */
static long tid_offset(void)
{
    const uint32_t *d = glibc.tid_desc;
    if (!d || d[0] != 32 || d[1] != 1 || d[2] % 4 != 0 || d[2] > 4096 - sizeof(pid_t))
        return -1;
    pid_t tid;
    memcpy(&tid, (const char *)pthread_self() + d[2], sizeof tid);
    return tid == gettid() ? (long)d[2] : -1;
}

/* 1 if the thread descriptor pd is a dead thread's: it still points to
 * itself (the TCB's self pointers) and holds no tid (0 or -1: glibc's own
 * test of a free stack). A thread glibc has started since on that stack
 * has its descriptor at the same place, with its tid. */
static int dead_descriptor(uintptr_t pd, long tid_off)
{
    uintptr_t head[3];
    pid_t tid;
    return read_safe(head, pd, sizeof head) == (ssize_t)sizeof head && head[0] == pd &&
           head[2] == pd &&
           read_safe(&tid, pd + (uintptr_t)tid_off, sizeof tid) == (ssize_t)sizeof tid &&
           tid <= 0;
}

/* 1 if [lo, hi) is still laid out as glibc maps a thread's stack: a
 * mapping starting at lo, right above a guard mapping (no access) that
 * ends there. glibc may have unmapped a stack it kept, and the program
 * mapped something else there since. */
static int still_a_stack(const maps *m, uintptr_t lo)
{
    int guard = 0, starts = 0;
    for (size_t i = 0; i < m->nguard && !guard; i++)
        guard = m->guard_hi[i] == lo;
    for (size_t i = 0; i < m->n && !starts; i++)
        starts = m->r[i][0] == lo;
    return guard && starts;
}

/* The descriptors of every live thread, from glibc's two lists of them
 * (read through the kernel: another thread may change them meanwhile),
 * into out; how many, or -1 if glibc does not tell where they are, a list
 * reads torn, or there are more than max. */
#define LIVE_MAX 65536
static long live_descriptors(uintptr_t *out, size_t max)
{
    const uint32_t *descs[2] = {glibc.used_desc, glibc.user_desc};
    const uint32_t *l = glibc.list_desc;
    if (!glibc.rtld_global || !l || l[0] != 128 || l[1] != 1 || l[2] > 65536)
        return -1;                       /* (a list_t: two pointers) */
    size_t n = 0;
    for (int w = 0; w < 2; w++) {
        const uint32_t *d = descs[w];
        if (!d || d[0] != 128 || d[1] != 1 || d[2] > 65536)
            return -1;
        uintptr_t head = (uintptr_t)glibc.rtld_global + d[2], prev = head, link[2];
        if (read_safe(link, head, sizeof link) != (ssize_t)sizeof link)
            return -1;
        /* each node's prev must be the one before it: a node another
         * thread moves to another list meanwhile ends the walk at once */
        for (uintptr_t node = link[0]; node != head; prev = node, node = link[0]) {
            if (n == max || node < l[2] ||
                read_safe(link, node, sizeof link) != (ssize_t)sizeof link || link[1] != prev)
                return -1;
            out[n++] = node - l[2];
        }
    }
    return (long)n;
}

/* 1 if a thread on glibc's lists other than the one whose descriptor is
 * pd (exited: glibc keeps it listed until it is joined) has its
 * descriptor in [lo, hi) */
static int holds_live(const uintptr_t *live, long nlive, uintptr_t lo, uintptr_t hi,
                      uintptr_t pd)
{
    for (long i = 0; i < nlive; i++)
        if (live[i] >= lo && live[i] < hi && live[i] != pd)
            return 1;
    return 0;
}

/* 1 if the stack st (one glibc made, an attached thread's: see
 * crawl__stacks_seen) is dead now: its descriptor is a dead thread's and
 * no other thread on glibc's lists (live[0..nlive), -1: unknown) has its
 * descriptor in it. Asked before the scan and again after it. */
static int stack_dead(const crawl__stack_seen *st, long tid_off, const uintptr_t *live,
                      long nlive)
{
    return nlive >= 0 && dead_descriptor(st->pd, tid_off) &&
           !holds_live(live, nlive, st->lo, st->hi, st->pd);
}

/* The stacks glibc made for attached threads that have exited, which it
 * keeps for its next threads: out gets those still laid out as glibc's,
 * dead, and overlapped by no attached thread's stack. The part of each
 * below its descriptor is left out of the scan; the descriptor stays
 * scanned: it keeps the value pthread_join will return. Returns how many
 * (0 when glibc does not tell where the tid is). */
static size_t dead_stacks(crawl__stack_seen out[CRAWL__STACKS_SEEN], const thread_list *threads,
                          const maps *m, long tid_off, const uintptr_t *live, long nlive)
{
    if (tid_off < 0)
        return 0;
    size_t n = crawl__stacks_seen(out, CRAWL__STACKS_SEEN), k = 0;
    for (size_t i = 0; i < n; i++) {
        if (!still_a_stack(m, out[i].lo) || !stack_dead(&out[i], tid_off, live, nlive))
            continue;                    /* gone, reused, or a thread alive on it */
        int taken = 0;
        for (size_t t = 0; t < threads->n && !taken; t++)
            taken = threads->stack[t][0] < out[i].hi && threads->stack[t][1] > out[i].lo;
        if (!taken)
            out[k++] = out[i];
    }
    return k;
}

/* The anonymous mappings but the ranges cut (other attached threads'
 * stacks: scan_other_thread scans them from their stack pointers; dead
 * stacks: not at all) */
static void scan_anonymous(scan *s, const maps *m, uintptr_t own_sp, const uintptr_t (*cut)[2],
                           size_t ncut)
{
    for (size_t i = 0; i < m->n; i++) {
        uintptr_t lo = m->r[i][0], hi = m->r[i][1];
        if (m->r[i][2] != 1 || (own_sp >= lo && own_sp < hi) || hi - lo > (4ul << 30) ||
            asan_shadow(lo, hi))
            continue;                    /* (4 GiB and more: reserved space, a sanitizer's shadow) */
        if (crawl_gpa_owns((const void *)lo))
            continue;                    /* the guarded pool: its chunks are scanned when reached,
                                            and a slot freed since the maps were read faults */
        size_t first = 0, b = s->n;      /* the first chunk at or above lo */
        while (first < b) {
            size_t mid = (first + b) / 2;
            if (s->e[mid].ptr < lo)
                first = mid + 1;
            else
                b = mid;
        }
        size_t a = first;
        for (; a < s->n && s->e[a].ptr < hi; a++)
            if (s->e[a].size < SMALL_CHUNK)
                break;
        if (a < s->n && s->e[a].ptr < hi)
            continue;                    /* a heap of malloc's */
        /* between the chunks, less the ranges cut (a stack carved out of a
         * larger mapping, a stack pool, leaves the rest of it scanned) */
        a = first;
        for (uintptr_t at = lo; at < hi;) {
            uintptr_t end = a < s->n && s->e[a].ptr < hi ? s->e[a].ptr : hi;
            if (at < end)
                scan_outside(s, cut, ncut, at, end, REACHABLE, scan_range);
            if (end == hi)
                break;
            uintptr_t past = s->e[a].ptr + s->e[a].size;
            at = past > at ? past : at;
            a++;
        }
    }
}

static void list_memo(thread_list *l, const crawl__thread *th)
{
    if (l->memo && l->nmemo < l->cap + 1) {
        sw_memo_range(th, &l->memo[l->nmemo][0], &l->memo[l->nmemo][1]);
        if (l->memo[l->nmemo][0])
            l->nmemo++;
    }
}

static void list_thread(crawl__thread *th, void *arg)
{
    thread_list *l = arg;
    list_memo(l, th);
    if (th == crawl__self() || l->n == l->cap)
        return;
    l->tid[l->n] = th->tid;
    l->stack[l->n][0] = th->stack_lo, l->stack[l->n][1] = th->stack_hi;
    l->n++;
}

/* Where another thread was when its walk signal came: its stack pointer and
 * every general-purpose register (a thread stopped in the middle of a
 * computation may hold a pointer in any of them, as LeakSanitizer reads
 * them all through ptrace). */
typedef struct thread_at {
    int got;
    uintptr_t sp;
    uintptr_t regs[SW_GPRS];
} thread_at;

static crawl_action first_frame(const crawl_cf *cf, void *arg)
{
    thread_at *at = arg;
    const crawl_regs *r = crawl_cf_regs(cf);
    at->got = 1;
    at->sp = crawl_cf_sp(cf);
    if (sw_walk_thread_gprs(at->regs) != 0 && r) {   /* (a walk of this thread: none) */
        uintptr_t v[8] = {r->ip, r->sp, r->fp, r->bx, r->r12, r->r13, r->r14, r->r15};
        memcpy(at->regs, v, sizeof v);
    }
    return CRAWL_ABORT;
}

/* Another attached thread: its registers, and its stack from its stack
 * pointer up (its static TLS is at the top), as LeakSanitizer scans: what
 * lies below the stack pointer is dead, and stale copies of a chunk's
 * address there (a deep call that returned) would hide its leak. When the
 * thread does not answer (the walk signal blocked for 50 ms: not even
 * asked; gone; 200 ms), its whole mapped stack. */
#define LEAK_WALK_TIMEOUT_MS 200
#define RED_ZONE 128                    /* the x86-64 ABI's: below sp, still live */

/* 1 if thread tid blocks signal sig (its SigBlk in /proc): it would not
 * answer, and asking would cost the whole time-out */
static int blocks_signal_now(pid_t tid, int sig)
{
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/self/task/%d/status", (int)tid);
    FILE *f = fopen(path, "re");
    if (!f)
        return 0;
    int blocked = 0;
    while (fgets(line, sizeof line, f))
        if (strncmp(line, "SigBlk:", 7) == 0) {
            blocked = (int)((strtoull(line + 7, NULL, 16) >> (sig - 1)) & 1);
            break;
        }
    fclose(f);
    return blocked;
}

/* Blocking is often brief: glibc blocks every signal across clone in
 * pthread_create (and in fork and posix_spawn), so a check started by a
 * new thread finds its creator blocking; scanned whole then, the creator's
 * dead frames hid leaks (about 1 check in 100 in
 * test_check_while_a_report_describes). So threads that block the walk
 * signal are asked last, each once it unblocks, all within one deadline
 * LEAK_BLOCKED_WAIT_MS after the others were walked (a program whose
 * threads all inherit a blocked mask, a sigwait design, pays it once per
 * check, not once per thread). */
#define LEAK_BLOCKED_WAIT_MS 50

static long ms_since(const struct timespec *t0)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (now.tv_sec - t0->tv_sec) * 1000 + (now.tv_nsec - t0->tv_nsec) / 1000000;
}

/* 0 once thread tid does not block sig, 1 if it still does when *t0 is
 * LEAK_BLOCKED_WAIT_MS old */
static int blocks_signal_until(pid_t tid, int sig, const struct timespec *t0)
{
    static const struct timespec ms = {0, 1000000};
    for (int i = 0; blocks_signal_now(tid, sig); i++) {
        if (ms_since(t0) >= LEAK_BLOCKED_WAIT_MS)
            return 1;
        if (i < 8)
            sched_yield();
        else
            nanosleep(&ms, NULL);
    }
    return 0;
}

/* The readable, mapped parts of [lo, hi) */
static void scan_mapped(scan *s, const maps *m, uintptr_t lo, uintptr_t hi)
{
    for (size_t i = 0; i < m->n; i++) {
        uintptr_t a = m->r[i][0] > lo ? m->r[i][0] : lo;
        uintptr_t b = m->r[i][1] < hi ? m->r[i][1] : hi;
        if (a < b)
            scan_range(s, a, b, REACHABLE);
    }
}

/* blocked: the thread blocks the walk signal (not asked) */
static void scan_other_thread(scan *s, pid_t tid, const uintptr_t stack[2], const maps *m,
                              int blocked)
{
    thread_at at = {0};
    uintptr_t lo = stack[0], hi = stack[1];
    int rc = blocked ? -EAGAIN
                     : crawl_walk_thread_timeout(tid, first_frame, &at, CRAWL_WALK_FAST,
                                                 LEAK_WALK_TIMEOUT_MS);
    if (rc >= 0 && at.got) {
        scan_words_of(s, at.regs, sizeof at.regs / sizeof at.regs[0]);
        if (at.sp - RED_ZONE >= lo && at.sp < hi)
            lo = at.sp - RED_ZONE;       /* (else on a signal stack: all of it) */
    }
    scan_mapped(s, m, lo, hi);
}

/* The calling thread's static TLS block and TCB, and the DTV's dynamic
 * TLS pointers (x86-64: the thread pointer is the TCB; TLS lies below). */
static void scan_own_tls(scan *s, const maps *m)
{
    uintptr_t tp = (uintptr_t)pthread_self();
    size_t tls_size = 4096, align = 64;
    if (glibc.tls_static_info)
        glibc.tls_static_info(&tls_size, &align);
    if (tls_size > (64u << 20))
        tls_size = 64u << 20;
    /* (the size counts the TCB above tp too: the range may start below the
     * TLS block's mapping) */
    scan_mapped(s, m, tp - tls_size, tp + 2 * sizeof(uintptr_t));
    const uintptr_t *dtv = ((const uintptr_t **)tp)[1];
    if (dtv) {
        size_t slots = dtv[-2];          /* dtv[-1].counter: the entries */
        if (slots < 65536)
            scan_range(s, (uintptr_t)dtv, (uintptr_t)(dtv + 2 * (slots + 1)), REACHABLE);
    }
}

/* 1 if the calling thread runs on its alternate signal stack
 * (sigaltstack) and address a lies in it; *alt: that stack */
static int on_alt_stack(uintptr_t a, stack_t *alt)
{
    return sigaltstack(NULL, alt) == 0 && (alt->ss_flags & SS_ONSTACK) &&
           a >= (uintptr_t)alt->ss_sp && a - (uintptr_t)alt->ss_sp < alt->ss_size;
}

/* The calling thread's stack from this frame (below every caller's, so
 * what scan_roots spilled is in) to its top; at exit from above crawl's
 * own exit handler, with the registers it found (its frame's alignment
 * slot held a stale copy of a leaked chunk's address from the program's
 * earlier calls, and hid that leak). */
static __attribute__((noinline)) void scan_own_stack(scan *s)
{
    crawl__thread *th = crawl__self();
    uintptr_t lo = th->attached ? th->stack_lo : 0, hi = th->attached ? th->stack_hi : 0;
    if (!hi && crawl__own_stack(&lo, &hi, NULL) != 0)
        lo = hi = 0;
    uintptr_t here = s->stack_from ? s->stack_from : (uintptr_t)__builtin_frame_address(0);
    stack_t alt;
    if (here >= lo && here < hi) {
        scan_range(s, here, hi, REACHABLE);
    } else if (hi) {
        /* On another stack: a signal handler's on sigaltstack (exit called
         * there), or a fiber's. From here to the top of the alternate
         * stack, and the thread's own stack whole, where it was left being
         * unknown here (from here to its top spanned the address space
         * between them: the check never ended). A fiber's stack is a
         * chunk or an anonymous mapping, scanned as those. */
        if (on_alt_stack(here, &alt))
            scan_range(s, here, (uintptr_t)alt.ss_sp + alt.ss_size, REACHABLE);
        scan_range(s, lo, hi, REACHABLE);
    }
    if (s->regs)
        scan_words_of(s, (const uintptr_t *)s->regs,
                      s->nregs * sizeof *s->regs / sizeof(uintptr_t));
}

static __attribute__((noinline)) void scan_roots(scan *s)
{
    __builtin_unwind_init();             /* callee-saved registers into this frame */
    scan_own_stack(s);
    maps m = {0};
    read_maps(&m);
    scan_own_tls(s, &m);
    thread_list l = {.cap = 4096};
    l.tid = malloc(l.cap * sizeof *l.tid);
    /* the other attached threads' stacks, then the dead ones */
    /* (and the walk memos after them: cut from the anonymous scan too) */
    l.stack = malloc((l.cap + CRAWL__STACKS_SEEN + l.cap + 1) * sizeof *l.stack);
    l.memo = malloc((l.cap + 1) * sizeof *l.memo);
    if (l.tid && l.stack)
        crawl__threads_foreach_locked(list_thread, &l);
    if (!crawl__self()->attached)
        list_memo(&l, crawl__self());    /* (an attached one is listed above) */
    s->vanishing = 1;                    /* other threads' stacks, mappings read a moment ago */
    /* (walks take the registry's lock: outside it) those that take the
     * walk signal now, then those that blocked it, as they unblock */
    int sig = sw_walk_signal_now();
    unsigned char *later = calloc(l.n + 1, 1);
    for (size_t i = 0; i < l.n; i++) {
        if (later && blocks_signal_now(l.tid[i], sig))
            later[i] = 1;
        else
            scan_other_thread(s, l.tid[i], l.stack[i], &m, 0);
    }
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (size_t i = 0; later && i < l.n; i++)
        if (later[i])
            scan_other_thread(s, l.tid[i], l.stack[i], &m, blocks_signal_until(l.tid[i], sig, &t0));
    free(later);
    long tid_off = tid_offset();
    uintptr_t *live = malloc(LIVE_MAX * sizeof *live);
    long nlive = live ? live_descriptors(live, LIVE_MAX) : -1;
    crawl__stack_seen dead[CRAWL__STACKS_SEEN];
    size_t ndead = l.stack ? dead_stacks(dead, &l, &m, tid_off, live, nlive) : 0;
    for (size_t i = 0; i < ndead; i++)
        l.stack[l.n + i][0] = dead[i].lo, l.stack[l.n + i][1] = dead[i].pd;
    size_t ncut = l.n + ndead;
    for (size_t i = 0; l.stack && i < l.nmemo; i++, ncut++)
        l.stack[ncut][0] = l.memo[i][0], l.stack[ncut][1] = l.memo[i][1];
    scan_anonymous(s, &m, (uintptr_t)__builtin_frame_address(0), l.stack, ncut);
    /* a thread started on a dead stack while the scan ran: its stack is
     * scanned now, whole */
    nlive = ndead ? live_descriptors(live, LIVE_MAX) : 0;
    for (size_t i = 0; i < ndead; i++)
        if (!stack_dead(&dead[i], tid_off, live, nlive))
            scan_range(s, dead[i].lo, dead[i].pd, REACHABLE);
    free(live);
    if (crawl__loader_lock_suspect) {
        for (size_t i = 0; i < m.n; i++)
            if (m.r[i][2] >= 3) {
                s->in_libc = m.r[i][2] == 4;
                scan_range(s, m.r[i][0], m.r[i][1], REACHABLE);
            }
        s->in_libc = 0;
    }
    s->vanishing = 0;
    free(l.tid);
    free(l.stack);
    free(l.memo);
    if (!crawl__loader_lock_suspect)
        dl_iterate_phdr(scan_module, s);
    free(m.r);
    free(m.guard_hi);
}

/* ---- the report --------------------------------------------------------------------------- */

typedef struct leak_group {
    uint32_t stack;
    uintptr_t caller;
    int kind;
    size_t bytes, objects;
} leak_group;

static int group_order(const void *a, const void *b)
{
    const leak_group *x = a, *y = b;
    if (x->kind != y->kind)
        return x->kind < y->kind ? -1 : 1;   /* direct, then indirect, then reachable */
    return x->bytes > y->bytes ? -1 : x->bytes < y->bytes;
}

static int entry_key_order(const void *a, const void *b, void *arg)
{
    const unsigned char *mark = ((const scan *)arg)->mark;
    const hp_entry *base = ((const scan *)arg)->e;
    const size_t *x = a, *y = b;
    const hp_entry *ex = &base[*x], *ey = &base[*y];
    if (mark[*x] != mark[*y])
        return mark[*x] < mark[*y] ? -1 : 1;
    if (ex->stack != ey->stack)
        return ex->stack < ey->stack ? -1 : 1;
    if (ex->stack)
        return 0;
    return ex->caller < ey->caller ? -1 : ex->caller > ey->caller;
}

static void print_group(ho_out *o, const leak_group *g, const char *what)
{
    ho_printf(o, "%s of %zu byte(s) in %zu object(s) allocated from:\n", what, g->bytes, g->objects);
    const uintptr_t *w;
    unsigned n = g->stack ? crawl_depot_get(g->stack, &w) : 0;
    if (n) {
        char *buf = malloc(65536);
        int cut;
        if (buf) {
            size_t len = san_format_trace(w, n, buf, 65536, &cut);
            ho_write(o, buf, len);
            free(buf);
        }
    } else {
        char text[700];
        sw_describe_pc(g->caller, 0, text, sizeof text);
        ho_printf(o, "    #0 0x%lx in %s (the caller; no stack recorded)\n",
                  (unsigned long)g->caller, text);
    }
    ho_write(o, "\n", 1);
}

static long check(int fd, uintptr_t stack_from, const crawl_regs *regs, size_t nregs);

/* One scan at a time: each check's snapshot holds every chunk's address,
 * in memory another would scan as anonymous. Held from the snapshot to
 * the grouping (the report, which runs the embedder's describe_method
 * hooks, comes after). Not across fork(): the registry's fork handler
 * may take its lock before this one, which a check takes inside it.
 * Instead what a check in progress keeps chunk addresses in (the
 * snapshot, the sort's scratch, the scan's state) is mapped
 * MADV_WIPEONFORK: a child of a fork made meanwhile sees zeros there. */
static pthread_mutex_t check_lock = PTHREAD_MUTEX_INITIALIZER;

/* (the check that held it ran in another of the parent's threads) */
void san_leak_fork_child(void) { pthread_mutex_init(&check_lock, NULL); }

static long check_from(int fd, uintptr_t stack_from, const crawl_regs *regs, size_t nregs)
{
    /* (not cancelled half way: the lock and the tables' freeze would stay) */
    int cancel;
    pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &cancel);
    crawl__clear_stack_below();
    long rc = check(fd, stack_from, regs, nregs);
    crawl__clear_stack_below();   /* the check's frames: chunk addresses */
    pthread_setcancelstate(cancel, NULL);
    CRAWL__NO_TAIL(rc);
    return rc;
}

long crawl_leak_check(int fd)
{
    /* sampled, the table lacks most chunks: those reachable only through
     * them would be reported (every run of ls under heap_sample_bytes=64) */
    if (__atomic_load_n(&crawl__hp.sampled, __ATOMIC_RELAXED))
        return -EINVAL;
    return check_from(fd, 0, NULL, 0);
}

/* The check at exit runs inside exit's own frames (__run_exit_handlers,
 * _dl_fini, __cxa_finalize...), made after the program returned from its
 * calls where those calls' frames were: the slots they leave unwritten
 * hold what the program's calls left there, stale copies of chunk
 * addresses among them, which hid leaks (test_preload_exit_stack_smear).
 * Those frames are no one's roots but for the registers they saved, the
 * values the caller of exit had. So the stack is scanned from the frame
 * that called exit up, with that frame's registers as libunwind recovers
 * them (and the ones the hook saw, as before). Without libunwind, where
 * the loader's lock may be held for ever (crawl__loader_lock_suspect), or
 * when exit is not on the stack (a dlclose that runs the hook), from the
 * hook's own frame up as before. */
typedef struct {
    uintptr_t lo, hi;                   /* exit's code */
    uintptr_t bases[3];                 /* of libc, the loader and libcrawl */
    int past_exit;
    int found;
    crawl_regs caller;                  /* of the frame that called exit */
} exit_caller;

/* Frames below exit's are skipped only while they are libc's, the
 * loader's or libcrawl's (exit's machinery and crawl's hook): a program's
 * own atexit handler there (one that dlclose'd libcrawl, which runs the
 * hook) holds roots, and then the old start is kept. */
static crawl_action find_exit_caller(const crawl_cf *cf, void *ctx)
{
    exit_caller *x = ctx;
    uintptr_t ip = crawl_cf_ip(cf);
    uintptr_t pc = (crawl_cf_flags(cf) & CRAWL_CF_EXACT_IP) ? ip : ip - 1;
    if (!x->past_exit) {
        x->past_exit = pc - x->lo < x->hi - x->lo;
        Dl_info d;
        if (!dladdr((void *)pc, &d) || ((uintptr_t)d.dli_fbase != x->bases[0] &&
                                         (uintptr_t)d.dli_fbase != x->bases[1] &&
                                         (uintptr_t)d.dli_fbase != x->bases[2]))
            return CRAWL_ABORT;
        return CRAWL_CONTINUE;
    }
    const crawl_regs *r = crawl_cf_regs(cf);
    if (r) {
        x->caller = *r;
        x->found = 1;
    }
    return CRAWL_ABORT;
}

/* The check (its stack walks, libdw's symbolization) needs this much
 * stack: exit called from a signal handler on a smaller sigaltstack
 * faulted in libdw (a 64 KiB one made with malloc), so the check is not
 * run there, and says so. */
#define EXIT_CHECK_STACK_MIN (512u << 10)

long san_leak_check_at_exit(int fd, uintptr_t stack_from, const crawl_regs *regs)
{
    stack_t alt;
    uintptr_t sp = (uintptr_t)__builtin_frame_address(0);
    if (on_alt_stack(sp, &alt) && sp - (uintptr_t)alt.ss_sp < EXIT_CHECK_STACK_MIN) {
        char line[240];
        int n = snprintf(line, sizeof line,
                         "crawl: the leak check at exit did not run: exit was called on a "
                         "signal stack with %lu KiB left (sigaltstack), and it needs %u KiB\n",
                         (unsigned long)((sp - (uintptr_t)alt.ss_sp) >> 10),
                         EXIT_CHECK_STACK_MIN >> 10);
        if (fd >= 0)
            crawl__write_all(fd, line, (size_t)n);
        else
            san_log_write(line, (size_t)n);
        return -ENOSPC;
    }
    crawl_regs sets[2] = {*regs};
    size_t nsets = 1;
    exit_caller x = {0};
    Dl_info info;
    const ElfW(Sym) *sym = NULL;
    /* (dladdr1 and libunwind take the loader's lock) */
    if (!crawl__loader_lock_suspect &&
        dladdr1((void *)(uintptr_t)exit, &info, (void **)&sym, RTLD_DL_SYMENT) && sym &&
        sym->st_size && info.dli_saddr) {
        x.lo = (uintptr_t)info.dli_saddr;
        x.hi = x.lo + sym->st_size;
        x.bases[0] = (uintptr_t)info.dli_fbase;
        x.bases[1] = (uintptr_t)getauxval(AT_BASE);
        Dl_info self;
        if (dladdr((void *)(uintptr_t)san_leak_check_at_exit, &self))
            x.bases[2] = (uintptr_t)self.dli_fbase;
        /* (libunwind for every step: only it recovers the saved registers) */
        crawl_walk(find_exit_caller, &x,
                   CRAWL_WALK_NO_CFI_CACHE | CRAWL_WALK_SKIP_FRAMES | CRAWL_WALK_NO_VM);
    }
    if (x.found && x.caller.sp > stack_from) {
        stack_from = x.caller.sp;
        sets[nsets++] = x.caller;
    }
    return check_from(fd, stack_from, sets, nsets);
}

/* 1 if the process has a thread other than the caller (/proc/self/task). */
static int others_running(void)
{
    DIR *d = opendir("/proc/self/task");
    if (!d)
        return 1;                        /* (not knowing: read as if) */
    int n = 0;
    for (struct dirent *e; n < 2 && (e = readdir(d));)
        n += e->d_name[0] != '.';
    closedir(d);
    return n > 1;
}

/* What the report needs of a check: its groups, none holding a chunk's
 * address */
typedef struct leak_found {
    leak_group *groups;                 /* ng, malloc'ed */
    size_t ng, leaked_bytes, leaked_objects, reach_bytes, reach_objects;
    unsigned long dropped;
} leak_found;

/* The scan and the grouping (check_lock held): 0 or a negative errno
 * value. Everything that held a chunk's address is gone when it returns
 * but for this function's dead frames (the caller clears them) and the
 * caller-saved registers (which no later frame saves): its callee-saved
 * registers are the caller's again. */
static __attribute__((noinline)) long scan_and_group(uintptr_t stack_from, const crawl_regs *regs,
                                                     size_t nregs, leak_found *out)
{
    hp_snap snap;
    long rc = hp_snapshot(&snap, 1);
    if (rc)
        return rc;
    /* the scan's state lives in a mapping of its own, skipped: on this
     * stack its bounds (the lowest chunk's address) would be a root */
    scan *sp = crawl__mmap(sizeof *sp, PROT_READ | PROT_WRITE, 0);
    if (sp == MAP_FAILED) {
        hp_snapshot_free(&snap);
        return -ENOMEM;
    }
    hp_wipe_on_fork(sp, sizeof *sp);
    sp->e = snap.e, sp->n = snap.n;
    sp->stack_from = stack_from, sp->regs = regs, sp->nregs = nregs;
    sort_by_ptr(snap.e, snap.n);
    sp->mark = calloc(snap.n + 1, 1);
    sp->work = malloc((snap.n + 1) * sizeof *sp->work);
    size_t *order = malloc((snap.n + 1) * sizeof *order);
    leak_group *groups = malloc((snap.n + 1) * sizeof *groups);
    if (!sp->mark || !sp->work || !order || !groups) {
        free(groups);
        rc = -ENOMEM;
        goto out;
    }
    if (snap.n) {
        sp->lo = snap.e[0].ptr;
        for (size_t i = 0; i < snap.n; i++)
            if (snap.e[i].ptr + snap.e[i].size + 1 > sp->hi)
                sp->hi = snap.e[i].ptr + snap.e[i].size + 1;
    }
    /* the tables stay where they are listed now until the scan is over
     * (one grown meanwhile would be scanned as the program's memory) */
    hp_tables_freeze(1);
    sp->nskip = hp_table_ranges(sp->skip, SKIP_TABLES);
    sp->skip[sp->nskip][0] = (uintptr_t)snap.e;
    sp->skip[sp->nskip][1] = (uintptr_t)(snap.e + snap.cap);
    sp->nskip++;
    /* (an anonymous mapping, which the check scans) */
    sp->skip[sp->nskip][0] = (uintptr_t)sp;
    sp->skip[sp->nskip][1] = (uintptr_t)(sp + 1);
    sp->nskip++;
    san_gpa_meta(&sp->skip[sp->nskip][0], &sp->skip[sp->nskip][1]);
    if (sp->skip[sp->nskip][0])
        sp->nskip++;                     /* the guarded pool's slot table: every live slot's address */
    /* exit called on an alternate signal stack: below the frame that
     * called it, that stack is dead (the handler's returned calls, exit's
     * frames, this check's), but it is a chunk or a mapping the check
     * scans, and a stale copy of a leaked chunk's address there hid the
     * leak (test_preload_exit_altstack, one run in three) */
    stack_t alt;
    if (stack_from && on_alt_stack(stack_from - 1, &alt)) {   /* (its frame may be the top) */
        sp->skip[sp->nskip][0] = (uintptr_t)alt.ss_sp;
        sp->skip[sp->nskip][1] = stack_from;
        sp->nskip++;
    }
    crawl__clear_stack_below();   /* the sort and the snapshot left chunk addresses there */
    scan_roots(sp);
    /* Other threads still running (at exit: detached ones) free chunks
     * while their contents are read (a guarded-pool slot is made
     * inaccessible, glibc unmaps the tail of a heap it shrinks): chunks
     * are then read through the kernel too, never in place (SIGSEGV in 3
     * of 10 runs of three allocating threads). */
    sp->vanishing = others_running();
    propagate(sp, REACHABLE);
    drop_gone(sp);
    /* what leaked chunks point to, transitively, leaked indirectly (in any
     * address order: a list's nodes may lie either way round) */
    for (size_t i = 0; i < snap.n; i++)
        if (sp->mark[i] == UNREACHED) {
            scan_range(sp, snap.e[i].ptr, snap.e[i].ptr + snap.e[i].size, INDIRECT);
            propagate(sp, INDIRECT);
        }
    drop_gone(sp);
    hp_tables_freeze(0);

    /* group by kind and stack */
    for (size_t i = 0; i < snap.n; i++)
        order[i] = i;
    static const int kind_of_mark[] = {[UNREACHED] = 0, [INDIRECT] = 1, [REACHABLE] = 2,
                                       [GONE] = 3};
    if (snap.n)
        qsort_r(order, snap.n, sizeof *order, entry_key_order, sp);
    size_t ng = 0;
    for (size_t i = 0; i < snap.n; i++) {
        const hp_entry *e = &snap.e[order[i]];
        int kind = kind_of_mark[sp->mark[order[i]]];
        if (kind == 3)
            continue;
        if (kind == 2)
            out->reach_bytes += e->size, out->reach_objects++;
        else
            out->leaked_bytes += e->size, out->leaked_objects++;
        if (ng && groups[ng - 1].kind == kind && groups[ng - 1].stack == e->stack &&
            (e->stack || groups[ng - 1].caller == e->caller)) {
            groups[ng - 1].bytes += e->size;
            groups[ng - 1].objects++;
            continue;
        }
        groups[ng++] = (leak_group){e->stack, e->caller, kind, e->size, 1};
    }
    if (ng)
        qsort(groups, ng, sizeof *groups, group_order);
    out->groups = groups, out->ng = ng;
    out->dropped = snap.dropped;
out:
    free(sp->mark), free(sp->work), free(order);
    sp->lo = sp->hi = 0;
    crawl__munmap(sp, sizeof *sp);
    hp_snapshot_free(&snap);
    return rc;
}

/* The report of what scan_and_group found: the number of leaked objects,
 * or -ENOMEM. */
static long report(int fd, const leak_found *f)
{
    const san_options *opt = san_opts();
    int opened = 0;
    if (!f->leaked_objects && !(opt->leak_check_reachable && f->reach_objects))
        return 0;                        /* (log_path=X: no empty X.PID, as LSan) */
    if (fd < 0)
        fd = san_log_open(&opened);
    ho_out *o = malloc(sizeof *o);
    if (!o) {
        if (opened)
            close(fd);
        return -ENOMEM;
    }
    /* written to log_path and failed there (a full disk, /dev/full): then
     * to stderr (the report was lost in silence; found by an outside test) */
    for (int pass = 0; pass < 2; pass++) {
        ho_init(o, fd);
        if (f->leaked_objects) {
            ho_printf(o, "\n=================================================================\n"
                         "==%d==ERROR: LeakSanitizer: detected memory leaks\n\n",
                      (int)getpid());
            for (size_t i = 0; i < f->ng; i++)
                if (f->groups[i].kind < 2)
                    print_group(o, &f->groups[i],
                                f->groups[i].kind == 0 ? "Direct leak" : "Indirect leak");
        }
        if (opt->leak_check_reachable && f->reach_objects) {
            ho_printf(o, "Still reachable (not leaks): %zu byte(s) in %zu object(s):\n\n",
                      f->reach_bytes, f->reach_objects);
            for (size_t i = 0; i < f->ng; i++)
                if (f->groups[i].kind == 2)
                    print_group(o, &f->groups[i], "Reachable");
        }
        if (f->leaked_objects) {
            ho_printf(o, "SUMMARY: LeakSanitizer: %zu byte(s) leaked in %zu allocation(s).\n",
                      f->leaked_bytes, f->leaked_objects);
            if (f->dropped)
                ho_printf(o, "(crawl: %lu allocation(s) made while crawl was busy were not "
                             "recorded)\n", f->dropped);
        }
        ho_flush(o);
        if (opened)
            close(fd);
        if (!o->err || !opened)
            break;
        opened = 0;
        fd = san_stderr_fd();
    }
    free(o);
    return (long)f->leaked_objects;
}

/* The report, which calls the embedder's describe_method hooks (they may
 * block, or run a check of their own), comes after the scan has returned:
 * the scan's frames are dead and cleared, and the registers its callees
 * save are this frame's, not the scan's (a report blocked in a hook kept a
 * planted chunk's address in a live frame's slot, where a check in another
 * thread, scanning this thread's stack from its stack pointer up, found
 * it: test_check_while_a_report_describes failed 4 runs in 4 when an
 * unrelated change moved libcrawl's code). */
static __attribute__((noinline)) long check(int fd, uintptr_t stack_from, const crawl_regs *regs,
                                            size_t nregs)
{
    int was = hp_inside_enter();
    leak_found found = {0};
    pthread_mutex_lock(&check_lock);
    long rc = scan_and_group(stack_from, regs, nregs, &found);
    /* the scan's frames, before another check may scan this thread */
    crawl__clear_stack_below();
    pthread_mutex_unlock(&check_lock);
    if (rc == 0)
        rc = report(fd, &found);
    free(found.groups);
    hp_inside_leave(was);
    return rc;
}
