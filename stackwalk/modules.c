/* Loaded modules: which addresses hold code, which code can never be
 * unloaded, and the snapshot of both that walks read lock-free.
 *
 * A snapshot is an immutable, sorted array of the executable segments of
 * every loaded module, each pointing at its module record (which carries the
 * module's compiled CFI, see cfi_cache.c) plus the rule cache for that set of
 * modules. It is rebuilt in normal context when glibc's load/unload counters
 * (dl_iterate_phdr's dlpi_adds/dlpi_subs) change, and published with one
 * atomic store. Walks, including signal handlers, announce themselves in a
 * reader count; replaced snapshots, their rule caches and the modules that
 * left are freed only when a writer sees no reader (sequentially consistent
 * counter and pointer, as for code ranges): a handler never reads freed
 * memory.
 *
 * A signal handler cannot ask the loader whether a module was unloaded since
 * the snapshot was built (that takes the loader's lock), so signal-safe walks
 * trust only modules that can never be unloaded: the program, the libraries
 * it was linked against (the DT_NEEDED closure) and the vDSO. */
#include <dlfcn.h>
#include <errno.h>
#include <link.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <linux/membarrier.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "stackwalk/internal.h"

static _Atomic(sw_snapshot *) current;
/* Readers: each thread counts its own walks (crawl__thread.walks), so a walk
 * writes no shared cache line. A writer replaces the snapshot, then makes
 * every thread pass a full memory barrier with membarrier(2) (Linux 4.14;
 * readers then need only a compiler barrier), then frees replaced snapshots
 * if it sees every count at 0. Without membarrier, readers fence. */
static int use_membarrier;
static pthread_mutex_t build_lock = PTHREAD_MUTEX_INITIALIZER;
static sw_module *modules;               /* every module record alive, under build_lock */

typedef struct retired {
    struct retired *next;
    sw_snapshot *snap;
    sw_cfi_slot *cache;                  /* its rule cache, unless the next snapshot took it over */
    sw_module *mods;                     /* modules that left, linked by next */
} retired;
static retired *retired_list;            /* under build_lock */

/* ---- permanence ---------------------------------------------------------- */

/* The modules that can never be unloaded are the program, the libraries it
 * was linked against (the DT_NEEDED closure from the program; the dynamic
 * linker is in it through libc) and the vDSO. Libraries loaded with dlopen,
 * LD_PRELOAD'ed ones (kept out to stay on the safe side) and libcrawl itself
 * when it was dlopen'ed are not. Computed once, when libcrawl loads. */
#define MAX_PERMANENT 64
static struct {
    uintptr_t lo, hi;
} permanent[MAX_PERMANENT];
static int npermanent;

#define MAX_MODULES 256
typedef struct dynmod {
    const char *file;                    /* the file name, without its directory */
    const char *soname;                  /* DT_SONAME, or "" */
    const ElfW(Dyn) *dyn;
    const char *strtab;                  /* of dyn; NULL without one */
    uintptr_t base;
    const ElfW(Phdr) *phdr;
    int phnum, keep;
} dynmod;

typedef struct dynmod_list {
    dynmod m[MAX_MODULES];
    int n;
} dynmod_list;

/* ld.so relocates DT_STRTAB in place for the objects it loads, not in the
 * vDSO's read-only dynamic section. */
static int collect_dynmod(struct dl_phdr_info *info, size_t size, void *arg)
{
    (void)size;
    dynmod_list *ms = arg;
    if (ms->n == MAX_MODULES)
        return 1;
    dynmod *m = &ms->m[ms->n++];
    const char *path = info->dlpi_name ? info->dlpi_name : "", *slash = strrchr(path, '/');
    *m = (dynmod){.base = info->dlpi_addr, .phdr = info->dlpi_phdr, .phnum = info->dlpi_phnum,
                  .file = slash ? slash + 1 : path, .soname = ""};
    for (int i = 0; i < m->phnum; i++)
        if (m->phdr[i].p_type == PT_DYNAMIC)
            m->dyn = (const ElfW(Dyn) *)(m->base + m->phdr[i].p_vaddr);
    for (const ElfW(Dyn) *d = m->dyn; d && d->d_tag != DT_NULL; d++)
        if (d->d_tag == DT_STRTAB)
            m->strtab = (const char *)(d->d_un.d_ptr < m->base ? m->base + d->d_un.d_ptr
                                                               : d->d_un.d_ptr);
    for (const ElfW(Dyn) *d = m->dyn; m->strtab && d->d_tag != DT_NULL; d++)
        if (d->d_tag == DT_SONAME)
            m->soname = m->strtab + d->d_un.d_val;
    return 0;
}

/* Marks what m needs, queueing each newly marked module. The first module
 * of a name wins: dl_iterate_phdr lists the program's own namespace first. */
static void keep_needed(dynmod_list *ms, const dynmod *m, int *queue, int *nq)
{
    for (const ElfW(Dyn) *d = m->dyn; m->strtab && d->d_tag != DT_NULL; d++) {
        if (d->d_tag != DT_NEEDED)
            continue;
        const char *needed = m->strtab + d->d_un.d_val;
        for (int i = 0; i < ms->n; i++)
            if (strcmp(ms->m[i].soname, needed) == 0 || strcmp(ms->m[i].file, needed) == 0) {
                if (!ms->m[i].keep) {
                    ms->m[i].keep = 1;
                    queue[(*nq)++] = i;
                }
                break;
            }
    }
}

static void find_permanent_modules(void)
{
    dynmod_list *ms = calloc(1, sizeof *ms); /* 14 KiB: neither bss nor the loader's stack */
    if (!ms)
        return;                          /* nothing is permanent: signal-safe walks stop early */
    dl_iterate_phdr(collect_dynmod, ms);
    int queue[MAX_MODULES], nq = 0;
    for (int i = 0; i < ms->n; i++)      /* the program (listed first) and the vDSO */
        if (i == 0 || strncmp(ms->m[i].file, "linux-vdso", 10) == 0) {
            ms->m[i].keep = 1;
            queue[nq++] = i;
        }
    for (int q = 0; q < nq; q++)
        keep_needed(ms, &ms->m[queue[q]], queue, &nq);
    for (int i = 0; i < ms->n; i++) {
        const dynmod *m = &ms->m[i];
        for (int k = 0; m->keep && k < m->phnum && npermanent < MAX_PERMANENT; k++) {
            const ElfW(Phdr) *ph = &m->phdr[k];
            if (ph->p_type == PT_LOAD && (ph->p_flags & PF_X)) {
                permanent[npermanent].lo = m->base + ph->p_vaddr;
                permanent[npermanent].hi = m->base + ph->p_vaddr + ph->p_memsz;
                npermanent++;
            }
        }
    }
    free(ms);
}

/* Modules made undeletable by crawl_module_pin, by load address (under build_lock). */
#define MAX_PINNED 64
static uintptr_t pinned[MAX_PINNED];
static int npinned;
static int force_rebuild;                /* a pin changed what is trusted */

static int is_pinned(uintptr_t base)
{
    for (int i = 0; i < npinned; i++)
        if (pinned[i] == base)
            return 1;
    return 0;
}

static int is_permanent(uintptr_t pc)
{
    for (int i = 0; i < npermanent; i++)
        if (pc >= permanent[i].lo && pc < permanent[i].hi)
            return 1;
    return 0;
}

/* ---- building a snapshot ------------------------------------------------- */

typedef struct building {
    sw_seg *seg;
    size_t n, cap;
    unsigned long adds, subs;
    int failed;
} building;

static sw_module *find_or_add_module(struct dl_phdr_info *info, uintptr_t eh_hdr)
{
    const char *name = info->dlpi_name ? info->dlpi_name : "";
    for (sw_module *m = modules; m; m = m->next)
        if (m->bias == info->dlpi_addr && m->eh_frame_hdr == eh_hdr && strcmp(m->name, name) == 0)
            return m;
    size_t len = strlen(name);
    sw_module *m = calloc(1, sizeof *m + len + 1);
    if (!m)
        return NULL;
    m->bias = info->dlpi_addr;
    m->eh_frame_hdr = eh_hdr;
    memcpy(m->name, name, len + 1);
    m->next = modules;
    modules = m;
    /* libc's signal trampoline, which every handler glibc installs returns
     * to, is known before any walk needs it (others are found as their
     * module's CFI is read) */
    const char *base = strrchr(name, '/');
    if (strncmp(base ? base + 1 : name, "libc.so", 7) == 0)
        sw_sigtramp_scan(m);
    return m;
}

/* Linked with -z nodelete (DF_1_NODELETE): dlclose never unmaps it. */
static int nodelete(const struct dl_phdr_info *info)
{
    for (int i = 0; i < info->dlpi_phnum; i++) {
        if (info->dlpi_phdr[i].p_type != PT_DYNAMIC)
            continue;
        const ElfW(Dyn) *d = (const ElfW(Dyn) *)(info->dlpi_addr + info->dlpi_phdr[i].p_vaddr);
        for (; d->d_tag != DT_NULL; d++)
            if (d->d_tag == DT_FLAGS_1 && (d->d_un.d_val & DF_1_NODELETE))
                return 1;
    }
    return 0;
}

static int collect_segments(struct dl_phdr_info *info, size_t size, void *arg)
{
    building *b = arg;
    if (size >= offsetof(struct dl_phdr_info, dlpi_subs) + sizeof info->dlpi_subs) {
        b->adds = info->dlpi_adds;
        b->subs = info->dlpi_subs;
    }
    uintptr_t eh_hdr = 0;
    for (int i = 0; i < info->dlpi_phnum; i++)
        if (info->dlpi_phdr[i].p_type == PT_GNU_EH_FRAME)
            eh_hdr = info->dlpi_addr + info->dlpi_phdr[i].p_vaddr;
    sw_module *m = NULL;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type != PT_LOAD || !(ph->p_flags & PF_X) || ph->p_memsz == 0)
            continue;
        if (!m && !(m = find_or_add_module(info, eh_hdr))) {
            b->failed = 1;
            return 1;
        }
        if (b->n == b->cap) {
            size_t cap = b->cap ? 2 * b->cap : 64;
            sw_seg *s = realloc(b->seg, cap * sizeof *s);
            if (!s) {
                b->failed = 1;
                return 1;
            }
            b->seg = s, b->cap = cap;
        }
        uintptr_t lo = info->dlpi_addr + ph->p_vaddr;
        b->seg[b->n++] = (sw_seg){lo, lo + ph->p_memsz, m};
        if (is_permanent(lo) || nodelete(info) || is_pinned(info->dlpi_addr))
            atomic_store_explicit(&m->permanent, 1, memory_order_relaxed);
        m->seen = 1;
    }
    return 0;
}

static int seg_cmp(const void *a, const void *b)
{
    const sw_seg *x = a, *y = b;
    return x->lo < y->lo ? -1 : x->lo > y->lo;
}

static sw_cfi_slot *cache_new(void)
{
    void *p = crawl__mmap(SW_CFI_SLOTS * sizeof(sw_cfi_slot), PROT_READ | PROT_WRITE, 0);
    return p == MAP_FAILED ? NULL : p;
}

static void free_retired(retired *r)
{
    if (r->cache)
        crawl__munmap(r->cache, SW_CFI_SLOTS * sizeof(sw_cfi_slot));
    free(r->snap);
    while (r->mods) {
        sw_module *m = r->mods;
        r->mods = m->next;
        sw_rules_free((sw_rules *)atomic_load(&m->rules));
        free(m);
    }
    free(r);
}

static void count_walks(crawl__thread *th, void *busy)
{
    if (atomic_load(&th->walks))
        *(int *)busy = 1;
}

/* No walk can hold a snapshot published before this call. */
static int readers_idle(void)
{
    /* the snapshot pointer was stored seq_cst; without membarrier the
     * counts are read seq_cst too, against the readers' seq_cst increment */
    if (use_membarrier)
        syscall(SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0);
    int busy = 0;
    crawl__threads_foreach_locked(count_walks, &busy);
    return !busy;
}

/* Free what no walk can hold any more (under build_lock). */
static void reclaim(void)
{
    if (retired_list && readers_idle()) {
        while (retired_list) {
            retired *r = retired_list;
            retired_list = r->next;
            free_retired(r);
        }
    }
}

/* The current counters, without building anything. */
static int read_counters(struct dl_phdr_info *info, size_t size, void *arg)
{
    unsigned long *c = arg;
    if (size >= offsetof(struct dl_phdr_info, dlpi_subs) + sizeof info->dlpi_subs) {
        c[0] = info->dlpi_adds;
        c[1] = info->dlpi_subs;
    }
    return 1;                            /* the same in every callback: stop at the first */
}

/* Build and publish a snapshot if the loaded modules changed (under
 * build_lock). 1 if one was published, 0 if none was needed, -ENOMEM. */
static int rebuild(void)
{
    sw_snapshot *old = atomic_load(&current);
    if (old && !force_rebuild) {
        unsigned long c[2] = {0, 0};
        dl_iterate_phdr(read_counters, c);
        if (c[0] == old->adds && c[1] == old->subs)
            return 0;
    }
    for (sw_module *m = modules; m; m = m->next)
        m->seen = 0;
    sw_dwfl_forget();                    /* libdwfl's view of the old module list */
    building b = {0};
    dl_iterate_phdr(collect_segments, &b);
    sw_snapshot *s = b.failed ? NULL : malloc(sizeof *s + b.n * sizeof s->seg[0]);
    /* Rules of modules that stayed stay valid; a module that left may have
     * been replaced at its addresses, so its cached rules must go: a new
     * rule cache whenever anything was unloaded. */
    int unloaded = old && (b.subs != old->subs || force_rebuild);
    sw_cfi_slot *cache = s ? (unloaded || !old ? cache_new() : old->cache) : NULL;
    if (!s || !cache) {
        free(s);
        free(b.seg);
        return -ENOMEM;
    }
    s->adds = b.adds, s->subs = b.subs, s->cache = cache, s->n = b.n;
    memcpy(s->seg, b.seg, b.n * sizeof s->seg[0]);
    free(b.seg);
    qsort(s->seg, s->n, sizeof s->seg[0], seg_cmp);

    retired *r = old ? calloc(1, sizeof *r) : NULL;
    sw_module **link = &modules;
    while (*link) {                      /* modules that left */
        sw_module *m = *link;
        if (m->seen) {
            link = &m->next;
            continue;
        }
        *link = m->next;
        if (r) {
            m->next = r->mods;
            r->mods = m;
        }                                /* else: leak rather than free under a reader */
    }
    atomic_store(&current, s);
    force_rebuild = 0;
    if (r) {
        r->snap = old;
        r->cache = cache != old->cache ? old->cache : NULL;
        r->next = retired_list;
        retired_list = r;
    }
    reclaim();
    return 1;
}

/* fork(): the child has only the forking thread; a builder that held the
 * lock, or walks counted in readers, existed only in the parent. */
static void fork_prepare(void)
{
    crawl__lock(&build_lock);
    sw_dwfl_fork(0);                     /* the lock order: build_lock, then libdwfl's */
}
static void fork_parent(void)
{
    sw_dwfl_fork(1);
    crawl__unlock(&build_lock);
}
static void fork_child(void)
{
    sw_dwfl_fork(1);
    crawl__unlock(&build_lock);
}

/* membarrier(2)'s private expedited command, registered once. */
/* ThreadSanitizer does not model membarrier: its builds use the counts'
 * seq_cst path, which it sees. GCC says so with __SANITIZE_THREAD__, clang
 * (14) only through __has_feature (CRAWL_TSAN, frames/internal.h): the
 * tsan preset (clang) ran with membarrier until this stop. */

static void init_membarrier(void)
{
#if defined(CRAWL_TSAN)
    return;
#endif
    long cmds = syscall(SYS_membarrier, MEMBARRIER_CMD_QUERY, 0, 0);
    use_membarrier = cmds > 0 && (cmds & MEMBARRIER_CMD_PRIVATE_EXPEDITED) &&
                     syscall(SYS_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED, 0, 0) == 0;
}

__attribute__((constructor)) static void modules_init(void)
{
    find_permanent_modules();
    init_membarrier();
    pthread_atfork(fork_prepare, fork_parent, fork_child);
    crawl__lock(&build_lock);
    rebuild();                           /* signal-safe walks need a snapshot from the start */
    crawl__unlock(&build_lock);
}

/* Compile m once (under build_lock). */
static void compile(sw_module *m)
{
    if (atomic_load(&m->compiled))
        return;
    atomic_store_explicit(&m->rules, sw_rules_compile(m), memory_order_release);
    atomic_store_explicit(&m->compiled, 1, memory_order_release);
}

/* ---- the readers' side --------------------------------------------------- */

const sw_snapshot *sw_snap_enter(crawl__thread *th)
{
    if (use_membarrier) {
        /* the writer's membarrier orders this store before its reads */
        unsigned n = atomic_load_explicit(&th->walks, memory_order_relaxed);
        atomic_store_explicit(&th->walks, n + 1, memory_order_relaxed);
        atomic_signal_fence(memory_order_seq_cst);
        return atomic_load_explicit(&current, memory_order_acquire);
    }
    atomic_fetch_add(&th->walks, 1);     /* a full barrier (only this thread writes it) */
    return atomic_load(&current);
}

void sw_snap_exit(crawl__thread *th)
{
    unsigned n = atomic_load_explicit(&th->walks, memory_order_relaxed);
    atomic_store_explicit(&th->walks, n - 1, memory_order_release);
}

const sw_snapshot *sw_snap_refresh(void)
{
    unsigned long c[2] = {0, 0};
    dl_iterate_phdr(read_counters, c);
    sw_snapshot *s = atomic_load(&current);
    if (s && c[0] == s->adds && c[1] == s->subs)
        return s;
    crawl__lock(&build_lock);
    rebuild();
    crawl__unlock(&build_lock);
    return atomic_load(&current);
}

const sw_rules *sw_module_rules(sw_module *m)
{
    const sw_rules *r = atomic_load_explicit(&m->rules, memory_order_acquire);
    if (r || atomic_load_explicit(&m->compiled, memory_order_acquire))
        return r;
    crawl__lock(&build_lock);
    compile(m);
    r = atomic_load(&m->rules);
    crawl__unlock(&build_lock);
    return r;
}

void sw_modules_compile_at(const uintptr_t *pcs, unsigned n)
{
    crawl__thread *th = crawl__self();
    const sw_snapshot *s = sw_snap_enter(th);
    for (unsigned i = 0; s && i < n; i++) {
        const sw_seg *g = sw_seg_find(s, pcs[i]);
        if (g && !atomic_load_explicit(&g->mod->compiled, memory_order_acquire))
            sw_module_rules(g->mod);
    }
    sw_snap_exit(th);
}

int sw_modules_warm(void)
{
    crawl__lock(&build_lock);
    int rc = rebuild();
    int with_cfi = 0;
    const sw_snapshot *s = atomic_load(&current);
    for (size_t i = 0; s && i < s->n; i++) {
        compile(s->seg[i].mod);
    }
    for (sw_module *m = modules; m; m = m->next)
        with_cfi += atomic_load(&m->rules) != NULL;
    crawl__unlock(&build_lock);
    return rc < 0 ? rc : with_cfi;
}


int crawl_module_pin(const void *addr)
{
    Dl_info info;
    if (!addr || !dladdr(addr, &info) || !info.dli_fname || !info.dli_fbase)
        return -ENOENT;
    /* RTLD_NOLOAD: only a module already loaded; RTLD_NODELETE sticks after
     * this reference is dropped again. */
    void *h = dlopen(info.dli_fname, RTLD_LAZY | RTLD_NOLOAD | RTLD_NODELETE);
    if (h)
        dlclose(h);
    else if (!is_permanent((uintptr_t)addr))
        return -ENOENT;                  /* (the program is permanent, and not dlopen'able by path) */
    crawl__lock(&build_lock);
    /* dli_fbase is the lowest mapped address; dlpi_addr the load bias. */
    struct link_map *lm = NULL;
    uintptr_t base = (uintptr_t)info.dli_fbase;
    if (dladdr1(addr, &info, (void **)&lm, RTLD_DL_LINKMAP) && lm)
        base = lm->l_addr;
    if (!is_pinned(base) && npinned < MAX_PINNED)
        pinned[npinned++] = base;
    force_rebuild = 1;
    rebuild();
    crawl__unlock(&build_lock);
    return 0;
}
