/* Run-time PLT/GOT hooks for the heap profile (Matrix's memory hook, xhook):
 * the GOT entries through which chosen modules call the malloc family point
 * at hooks that call the process's own functions and record. Relocations
 * are read from each module's file with elfutils' libelf (.rela.plt's
 * JUMP_SLOTs, .rela.dyn's GLOB_DATs: calls and address-takes); a read-only
 * RELRO page is made writable for the store and read-only again (one found
 * writable stays so: page_writable). dlopen is hooked in
 * the same modules, so libraries loaded later are hooked when they match.
 * Every entry written is remembered with its old value: uninstall puts each
 * back exactly. */
#include <dlfcn.h>
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <gelf.h>
#include <libelf.h>
#include <link.h>
#include <pthread.h>
#include <regex.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <unistd.h>

#include "sanitizer/heap_profile_internal.h"

#define CALLER ((uintptr_t)__builtin_return_address(0))

/* ---- the hooks ---------------------------------------------------------------------------- */

enum {
    F_MALLOC, F_CALLOC, F_REALLOC, F_FREE, F_MEMALIGN, F_POSIX_MEMALIGN, F_ALIGNED_ALLOC, F_VALLOC,
    F_PVALLOC, F_STRDUP, F_STRNDUP, F_NEW, F_NEW_ARRAY, F_NEW_NOTHROW, F_NEW_ARRAY_NOTHROW,
    F_DELETE, F_DELETE_ARRAY, F_DELETE_SIZED, F_DELETE_ARRAY_SIZED, F_DLOPEN,
    F_MMAP, F_MMAP64, F_MUNMAP, F_MREMAP,   /* a table apart: with heap_profile_mmap=1 only */
    F_COUNT
};
#define F_FIRST_MAPPING F_MMAP
static void *real[F_COUNT];

static void *h_malloc(size_t n)
{
    void *p = ((void *(*)(size_t))real[F_MALLOC])(n);
    crawl_heap_profile_on_alloc(p, n, CALLER);
    return p;
}
static void *h_calloc(size_t n, size_t size)
{
    void *p = ((void *(*)(size_t, size_t))real[F_CALLOC])(n, size);
    crawl_heap_profile_on_alloc(p, n * size, CALLER);
    return p;
}
static void *h_realloc(void *old, size_t n)
{
    crawl__hp_saved saved;
    crawl__hp_take(old, &saved);
    void *p = ((void *(*)(void *, size_t))real[F_REALLOC])(old, n);
    if (!p && n)                         /* failed: old stays, its entry as it was */
        crawl__hp_put_back(&saved);
    else
        crawl_heap_profile_on_alloc(p, n, CALLER);
    /* (realloc(old, 0) freed old: never looked at again) */
    return p;
}
static void h_free(void *p)
{
    crawl_heap_profile_on_free(p);
    ((void (*)(void *))real[F_FREE])(p);
}
static void *h_memalign(size_t a, size_t n)
{
    void *p = ((void *(*)(size_t, size_t))real[F_MEMALIGN])(a, n);
    crawl_heap_profile_on_alloc(p, n, CALLER);
    return p;
}
static int h_posix_memalign(void **out, size_t a, size_t n)
{
    int rc = ((int (*)(void **, size_t, size_t))real[F_POSIX_MEMALIGN])(out, a, n);
    if (rc == 0)
        crawl_heap_profile_on_alloc(*out, n, CALLER);
    return rc;
}
static void *h_aligned_alloc(size_t a, size_t n)
{
    void *p = ((void *(*)(size_t, size_t))real[F_ALIGNED_ALLOC])(a, n);
    crawl_heap_profile_on_alloc(p, n, CALLER);
    return p;
}
static void *h_valloc(size_t n)
{
    void *p = ((void *(*)(size_t))real[F_VALLOC])(n);
    crawl_heap_profile_on_alloc(p, n, CALLER);
    return p;
}
static void *h_pvalloc(size_t n)
{
    void *p = ((void *(*)(size_t))real[F_PVALLOC])(n);
    crawl_heap_profile_on_alloc(p, n, CALLER);
    return p;
}
static char *h_strdup(const char *s)
{
    char *p = ((char *(*)(const char *))real[F_STRDUP])(s);
    crawl_heap_profile_on_alloc(p, p ? strlen(p) + 1 : 0, CALLER);
    return p;
}
static char *h_strndup(const char *s, size_t max)
{
    char *p = ((char *(*)(const char *, size_t))real[F_STRNDUP])(s, max);
    crawl_heap_profile_on_alloc(p, p ? strlen(p) + 1 : 0, CALLER);
    return p;
}
#define H_NEW(name, index)                                                                     \
    static void *name(size_t n)                                                                \
    {                                                                                          \
        void *p = ((void *(*)(size_t))real[index])(n);                                         \
        crawl_heap_profile_on_alloc(p, n, CALLER);                                             \
        return p;                                                                              \
    }
H_NEW(h_new, F_NEW)
H_NEW(h_new_array, F_NEW_ARRAY)
static void *h_new_nothrow(size_t n, const void *t)
{
    void *p = ((void *(*)(size_t, const void *))real[F_NEW_NOTHROW])(n, t);
    crawl_heap_profile_on_alloc(p, n, CALLER);
    return p;
}
static void *h_new_array_nothrow(size_t n, const void *t)
{
    void *p = ((void *(*)(size_t, const void *))real[F_NEW_ARRAY_NOTHROW])(n, t);
    crawl_heap_profile_on_alloc(p, n, CALLER);
    return p;
}
static void h_delete(void *p)
{
    crawl_heap_profile_on_free(p);
    ((void (*)(void *))real[F_DELETE])(p);
}
static void h_delete_array(void *p)
{
    crawl_heap_profile_on_free(p);
    ((void (*)(void *))real[F_DELETE_ARRAY])(p);
}
static void h_delete_sized(void *p, size_t n)
{
    crawl_heap_profile_on_free(p);
    ((void (*)(void *, size_t))real[F_DELETE_SIZED])(p, n);
}
static void h_delete_array_sized(void *p, size_t n)
{
    crawl_heap_profile_on_free(p);
    ((void (*)(void *, size_t))real[F_DELETE_ARRAY_SIZED])(p, n);
}
#define H_MMAP(name, index)                                                                    \
    static void *name(void *addr, size_t len, int prot, int flags, int fd, off_t off)          \
    {                                                                                          \
        void *p = ((void *(*)(void *, size_t, int, int, int, off_t))real[index])(addr, len,   \
                                                                                prot, flags,   \
                                                                                fd, off);      \
        crawl_heap_profile_mmap(p, len, CALLER);                                               \
        return p;                                                                              \
    }
H_MMAP(h_mmap, F_MMAP)
H_MMAP(h_mmap64, F_MMAP64)
static int h_munmap(void *addr, size_t len)
{
    int rc = ((int (*)(void *, size_t))real[F_MUNMAP])(addr, len);
    if (rc == 0)
        crawl_heap_profile_munmap(addr, len);
    return rc;
}
static void *h_mremap(void *old, size_t old_len, size_t len, int flags, ...)
{
    void *want = NULL;
    if (flags & MREMAP_FIXED) {
        va_list ap;
        va_start(ap, flags);
        want = va_arg(ap, void *);
        va_end(ap);
    }
    void *p = ((void *(*)(void *, size_t, size_t, int, ...))real[F_MREMAP])(old, old_len, len,
                                                                            flags, want);
    crawl_heap_profile_mremap(old, old_len, p, len, flags);
    return p;
}
static void rescan(void);
static void *h_dlopen(const char *file, int flags)
{
    void *h = ((void *(*)(const char *, int))real[F_DLOPEN])(file, flags);
    if (h)
        rescan();                        /* a library that matches is hooked too */
    return h;
}

static const struct {
    const char *name;
    void *hook;
} table[F_COUNT] = {
    [F_MALLOC] = {"malloc", (void *)h_malloc},
    [F_CALLOC] = {"calloc", (void *)h_calloc},
    [F_REALLOC] = {"realloc", (void *)h_realloc},
    [F_FREE] = {"free", (void *)h_free},
    [F_MEMALIGN] = {"memalign", (void *)h_memalign},
    [F_POSIX_MEMALIGN] = {"posix_memalign", (void *)h_posix_memalign},
    [F_ALIGNED_ALLOC] = {"aligned_alloc", (void *)h_aligned_alloc},
    [F_VALLOC] = {"valloc", (void *)h_valloc},
    [F_PVALLOC] = {"pvalloc", (void *)h_pvalloc},
    [F_STRDUP] = {"strdup", (void *)h_strdup},
    [F_STRNDUP] = {"strndup", (void *)h_strndup},
    [F_NEW] = {"_Znwm", (void *)h_new},
    [F_NEW_ARRAY] = {"_Znam", (void *)h_new_array},
    [F_NEW_NOTHROW] = {"_ZnwmRKSt9nothrow_t", (void *)h_new_nothrow},
    [F_NEW_ARRAY_NOTHROW] = {"_ZnamRKSt9nothrow_t", (void *)h_new_array_nothrow},
    [F_DELETE] = {"_ZdlPv", (void *)h_delete},
    [F_DELETE_ARRAY] = {"_ZdaPv", (void *)h_delete_array},
    [F_DELETE_SIZED] = {"_ZdlPvm", (void *)h_delete_sized},
    [F_DELETE_ARRAY_SIZED] = {"_ZdaPvm", (void *)h_delete_array_sized},
    [F_DLOPEN] = {"dlopen", (void *)h_dlopen},
    [F_MMAP] = {"mmap", (void *)h_mmap},
    [F_MMAP64] = {"mmap64", (void *)h_mmap64},
    [F_MUNMAP] = {"munmap", (void *)h_munmap},
    [F_MREMAP] = {"mremap", (void *)h_mremap},
};

/* ---- installing ------------------------------------------------------------------------------- */

typedef struct slot {
    uintptr_t *at;
    uintptr_t old, hook;                /* the value found, the value stored */
} slot;

/* A module looked at, by load address; probe: one of its hooked entries
 * (NULL: none), which still holds hook while this load of it lives. A
 * module unloaded and another (or the same) loaded at its address has
 * other values there: it is looked at afresh. */
typedef struct seen_module {
    uintptr_t base;
    uintptr_t *probe;
    uintptr_t hook;
} seen_module;

static pthread_mutex_t hooks_lock = PTHREAD_MUTEX_INITIALIZER;
static int installed;
static regex_t include_re, ignore_re;
static int have_ignore;
static slot *slots;
static size_t nslots, slots_cap;
static seen_module *seen;
static size_t nseen, seen_cap;

static int grow(void **arr, size_t *cap, size_t n, size_t size)
{
    if (n < *cap)
        return 0;
    size_t c = *cap ? *cap * 2 : 64;
    void *more = realloc(*arr, c * size);
    if (!more)
        return -ENOMEM;
    *arr = more, *cap = c;
    return 0;
}

/* The module's segment of type `type` that holds p, or NULL */
static const ElfW(Phdr) *segment_of(const struct dl_phdr_info *info, const void *p, unsigned type)
{
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        uintptr_t a = info->dlpi_addr + ph->p_vaddr;
        if (ph->p_type == type && (uintptr_t)p >= a && (uintptr_t)p - a < ph->p_memsz)
            return ph;
    }
    return NULL;
}

/* 1 if p lies in one of the module's loaded segments (it can be read) */
static int covers(const struct dl_phdr_info *info, const void *p)
{
    return segment_of(info, p, PT_LOAD) != NULL;
}

/* 1 if the page of p is writable now: process_vm_writev of its own value
 * (the kernel refuses a read-only mapping with EFAULT), else, where that
 * call is not allowed (seccomp, ENOSYS), the mapping's permissions in
 * /proc/self/maps. A module dlopen is still relocating is listed already,
 * its RELRO pages not yet read-only: made read-only after our store, the
 * loader's next relocation there would fault. */
static int page_writable(uintptr_t *p)
{
    uintptr_t v = __atomic_load_n(p, __ATOMIC_RELAXED);
    struct iovec local = {&v, sizeof v}, remote = {p, sizeof v};
    if (process_vm_writev(getpid(), &local, 1, &remote, 1, 0) == (ssize_t)sizeof v)
        return 1;
    if (errno == EFAULT)
        return 0;
    FILE *f = fopen("/proc/self/maps", "re");
    if (!f)
        return 0;                        /* (not knowing: read-only again after, as before) */
    char line[512];
    int w = 0;
    while (fgets(line, sizeof line, f)) {
        unsigned long lo, hi;
        char perms[5];
        if (sscanf(line, "%lx-%lx %4s", &lo, &hi, perms) == 3 && lo <= (uintptr_t)p &&
            (uintptr_t)p < hi) {
            w = perms[1] == 'w';
            break;
        }
    }
    fclose(f);
    return w;
}

/* Write value at p (a GOT entry), making a read-only page writable for it,
 * and read-only again after (a page found writable stays so). */
static int store(uintptr_t *p, uintptr_t value, const struct dl_phdr_info *info)
{
    long page = sysconf(_SC_PAGESIZE);
    uintptr_t lo = (uintptr_t)p & ~(uintptr_t)(page - 1);
    const ElfW(Phdr) *ph = segment_of(info, p, PT_GNU_RELRO);
    int relro = ph != NULL && !page_writable(p);
    int whole = ph && lo + (uintptr_t)page <= info->dlpi_addr + ph->p_vaddr + ph->p_memsz;
    if (relro && mprotect((void *)lo, (size_t)page, PROT_READ | PROT_WRITE) != 0)
        return -errno;
    __atomic_store_n(p, value, __ATOMIC_RELEASE);
    if (relro && whole)                  /* (a page RELRO ends inside stays writable: the
                                            data after it must stay so) */
        mprotect((void *)lo, (size_t)page, PROT_READ);
    return 0;
}

/* Never hooked: crawl's own module and the preload (the hooks must reach
 * the real functions), and the dynamic loader. crawl's own is the one that
 * holds h_malloc (dladdr takes the loader's lock: inside dl_iterate_phdr,
 * which holds its write lock, that deadlocked against a dlopen, which
 * takes the two the other way round). */
static int excluded(const struct dl_phdr_info *info, const char *path)
{
    if (covers(info, (const void *)(uintptr_t)h_malloc))
        return 1;
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    return strncmp(base, "libcrawl-preload.so", 19) == 0 || strncmp(base, "ld-linux", 8) == 0;
}

static void hook_module(struct dl_phdr_info *info)
{
    char exe[4096];
    const char *path = info->dlpi_name;
    if (!path || !path[0]) {             /* the program itself */
        ssize_t k = readlink("/proc/self/exe", exe, sizeof exe - 1);
        if (k <= 0)
            return;
        exe[k] = '\0';
        path = exe;
    }
    if (excluded(info, path) || regexec(&include_re, path, 0, NULL, 0) != 0 ||
        (have_ignore && regexec(&ignore_re, path, 0, NULL, 0) == 0))
        return;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return;
    Elf *elf = elf_begin(fd, ELF_C_READ, NULL);
    /* its PLT: where a lazily bound entry points until its first call */
    uintptr_t plt[2][2] = {{0, 0}, {0, 0}};
    size_t shstr;
    Elf_Scn *scn = NULL;
    while (elf && elf_getshdrstrndx(elf, &shstr) == 0 && (scn = elf_nextscn(elf, scn)) != NULL) {
        GElf_Shdr sh;
        const char *name = gelf_getshdr(scn, &sh) ? elf_strptr(elf, shstr, sh.sh_name) : NULL;
        int k = !name ? -1 : strcmp(name, ".plt") == 0 ? 0 : strcmp(name, ".plt.sec") == 0 ? 1 : -1;
        if (k >= 0)
            plt[k][0] = info->dlpi_addr + sh.sh_addr, plt[k][1] = plt[k][0] + sh.sh_size;
    }
    scn = NULL;
    while (elf && (scn = elf_nextscn(elf, scn)) != NULL) {
        GElf_Shdr sh;
        if (!gelf_getshdr(scn, &sh) || sh.sh_type != SHT_RELA)
            continue;
        Elf_Scn *symscn = elf_getscn(elf, sh.sh_link);
        GElf_Shdr symsh;
        Elf_Data *rel = elf_getdata(scn, NULL), *syms = symscn ? elf_getdata(symscn, NULL) : NULL;
        if (!rel || !syms || !gelf_getshdr(symscn, &symsh) || symsh.sh_type != SHT_DYNSYM)
            continue;
        size_t n = sh.sh_entsize ? sh.sh_size / sh.sh_entsize : 0;
        for (size_t i = 0; i < n; i++) {
            GElf_Rela r;
            GElf_Sym sym;
            if (!gelf_getrela(rel, (int)i, &r))
                break;
            unsigned type = GELF_R_TYPE(r.r_info);
            if ((type != R_X86_64_JUMP_SLOT && type != R_X86_64_GLOB_DAT) ||
                !gelf_getsym(syms, (int)GELF_R_SYM(r.r_info), &sym))
                continue;
            const char *name = elf_strptr(elf, symsh.sh_link, sym.st_name);
            for (int f = 0; name && f < F_COUNT; f++) {
                if (strcmp(name, table[f].name) != 0 || !real[f])
                    continue;
                uintptr_t *at = (uintptr_t *)(info->dlpi_addr + r.r_offset);
                if (grow((void **)&slots, &slots_cap, nslots, sizeof *slots) != 0)
                    break;
                uintptr_t old = __atomic_load_n(at, __ATOMIC_RELAXED);
                if (old == (uintptr_t)table[f].hook)
                    break;               /* (listed twice) */
                /* the hook forwards to the process's function: an entry
                 * bound to another (RTLD_DEEPBIND, an allocator of the
                 * module's own) is left as it is; a lazy one not yet
                 * bound (its PLT) would bind to the process's */
                if (old != (uintptr_t)real[f] && !(old - plt[0][0] < plt[0][1] - plt[0][0]) &&
                    !(old - plt[1][0] < plt[1][1] - plt[1][0]))
                    break;
                if (store(at, (uintptr_t)table[f].hook, info) == 0)
                    slots[nslots++] = (slot){at, old, (uintptr_t)table[f].hook};
                break;
            }
        }
    }
    if (elf)
        elf_end(elf);
    close(fd);
}

static int scan_one(struct dl_phdr_info *info, size_t size, void *arg)
{
    (void)size, (void)arg;
    seen_module *m = NULL;
    for (size_t i = 0; i < nseen && !m; i++)
        if (seen[i].base == info->dlpi_addr)
            m = &seen[i];
    if (m && m->probe && covers(info, m->probe) &&
        __atomic_load_n(m->probe, __ATOMIC_RELAXED) == m->hook)
        return 0;                        /* hooked, and the same load of it */
    if (!m) {
        if (grow((void **)&seen, &seen_cap, nseen, sizeof *seen) != 0)
            return 1;
        m = &seen[nseen++];
        m->base = info->dlpi_addr;
    }
    size_t first = nslots;
    hook_module(info);                   /* (a module without hooks is read again next time) */
    m->probe = nslots > first ? slots[first].at : NULL;
    m->hook = nslots > first ? slots[first].hook : 0;
    return 0;
}

/* Whether a slot's entry is still there, in a loaded module, holding the
 * hook we stored (else its module was unloaded, whatever sits at its
 * address now is not ours to write). */
typedef struct slot_check {
    const slot *s;
    int live;
} slot_check;

static int check_one(struct dl_phdr_info *info, size_t size, void *arg)
{
    (void)size;
    slot_check *c = arg;
    if (!covers(info, c->s->at))
        return 0;
    c->live = __atomic_load_n(c->s->at, __ATOMIC_RELAXED) == c->s->hook;
    return 1;
}

static int slot_live(const slot *s)
{
    slot_check c = {s, 0};
    dl_iterate_phdr(check_one, &c);
    return c.live;
}

/* Forget the entries of modules unloaded since (under hooks_lock) */
static void prune_slots(void)
{
    size_t k = 0;
    for (size_t i = 0; i < nslots; i++)
        if (slot_live(&slots[i]))
            slots[k++] = slots[i];
    nslots = k;
}

/* Hook the modules not looked at yet, or loaded again since (under
 * hooks_lock). */
static void scan_all(void)
{
    int was = hp_inside_enter();         /* libelf's allocations are crawl's */
    prune_slots();
    dl_iterate_phdr(scan_one, NULL);
    hp_inside_leave(was);
}

static void rescan(void)
{
    pthread_mutex_lock(&hooks_lock);
    if (installed)
        scan_all();
    pthread_mutex_unlock(&hooks_lock);
}

int crawl_heap_hooks_install(const char *include, const char *ignore)
{
    if (!include)
        return -EINVAL;
    pthread_mutex_lock(&hooks_lock);
    int rc = 0;
    if (installed) {
        rc = -EBUSY;
        goto out;
    }
    if (regcomp(&include_re, include, REG_EXTENDED | REG_NOSUB) != 0) {
        rc = -EINVAL;
        goto out;
    }
    have_ignore = ignore && *ignore;
    if (have_ignore && regcomp(&ignore_re, ignore, REG_EXTENDED | REG_NOSUB) != 0) {
        regfree(&include_re);
        rc = -EINVAL;
        goto out;
    }
    elf_version(EV_CURRENT);
    int mappings = san_opts()->heap_profile_mmap != 0;
    for (int f = 0; f < F_COUNT; f++)    /* what the process would have called */
        real[f] = f < F_FIRST_MAPPING || mappings ? dlsym(RTLD_DEFAULT, table[f].name) : NULL;
    installed = 1;
    nseen = 0;
    scan_all();
out:
    pthread_mutex_unlock(&hooks_lock);
    return rc;
}

static int restore_one(struct dl_phdr_info *info, size_t size, void *arg)
{
    (void)size;
    const slot *s = arg;
    if (!covers(info, s->at))
        return 0;
    if (__atomic_load_n(s->at, __ATOMIC_RELAXED) == s->hook)
        store(s->at, s->old, info);      /* (else not ours: another module's, loaded since) */
    return 1;
}

void crawl_heap_hooks_uninstall(void)
{
    pthread_mutex_lock(&hooks_lock);
    for (size_t i = nslots; i-- > 0;)    /* a module unloaded meanwhile is not found: skipped */
        dl_iterate_phdr(restore_one, &slots[i]);
    nslots = 0;
    nseen = 0;
    if (installed) {
        regfree(&include_re);
        if (have_ignore)
            regfree(&ignore_re);
    }
    installed = 0;
    pthread_mutex_unlock(&hooks_lock);
}

size_t crawl_heap_hooks_count(void)
{
    pthread_mutex_lock(&hooks_lock);
    prune_slots();                       /* (entries of modules unloaded since do not count) */
    size_t n = nslots;
    pthread_mutex_unlock(&hooks_lock);
    return n;
}
