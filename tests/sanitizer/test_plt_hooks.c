/* Run-time GOT hooks (crawl_heap_hooks_install): a library loaded before
 * install and one loaded after are hooked, an ignored one is not, and
 * uninstall puts every GOT entry back exactly (malloc's address as each
 * library sees it through its GOT is the original again); a library
 * reloaded is hooked again, and one that took an unloaded library's place
 * is left alone. */
#define _GNU_SOURCE
#include "../heap_live.h"
#include "../support.h"

#include <crawl/heap_profile.h>
#include <crawl/sanitizer.h>

#include <dlfcn.h>
#include <link.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

typedef struct lib {
    void *h;
    void *(*alloc)(size_t);
    char *(*dup)(const char *);
    void (*free)(void *);
    void *(*malloc_address)(void);
} lib;

static void open_lib(lib *l, const char *path, const char *name)
{
    char sym[64];
    l->h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    assert_non_null(l->h);
    snprintf(sym, sizeof sym, "plt_%s_alloc", name);
    *(void **)&l->alloc = dlsym(l->h, sym);
    snprintf(sym, sizeof sym, "plt_%s_dup", name);
    *(void **)&l->dup = dlsym(l->h, sym);
    snprintf(sym, sizeof sym, "plt_%s_free", name);
    *(void **)&l->free = dlsym(l->h, sym);
    snprintf(sym, sizeof sym, "plt_%s_malloc_address", name);
    *(void **)&l->malloc_address = dlsym(l->h, sym);
    assert_true(l->alloc && l->dup && l->free && l->malloc_address);
}

static void test_hooks(void **state)
{
    (void)state;
    lib a, b, c;
    open_lib(&a, PLT_LIB_A, "a");
    open_lib(&b, PLT_LIB_B, "b");
    void *original = a.malloc_address();
    assert_ptr_equal(original, dlsym(RTLD_DEFAULT, "malloc"));
    assert_int_equal(crawl_heap_profile_start(), 0);

    assert_int_equal(crawl_heap_hooks_install("libplt_", "libplt_b"), 0);
    assert_int_equal(crawl_heap_hooks_install("libplt_", NULL), -EBUSY);
    assert_true(crawl_heap_hooks_count() >= 3);      /* a's malloc (call, address), strdup, free */
    assert_ptr_not_equal(a.malloc_address(), original);
    assert_ptr_equal(b.malloc_address(), original);  /* ignored */

    size_t before = live_objects();
    void *pa = a.alloc(100);
    char *da = a.dup("hooked");
    assert_int_equal(live_objects(), before + 2);
    void *pb = b.alloc(100);                           /* ignored: not recorded */
    assert_int_equal(live_objects(), before + 2);

    /* loaded after install by the test program, which is not hooked (its
     * path does not match): c is not hooked until the next install */
    open_lib(&c, PLT_LIB_C, "c");
    assert_ptr_equal(c.malloc_address(), original);

    a.free(pa);
    a.free(da);
    assert_int_equal(live_objects(), before);
    b.free(pb);

    crawl_heap_hooks_uninstall();
    assert_int_equal(crawl_heap_hooks_count(), 0);
    assert_ptr_equal(a.malloc_address(), original);   /* the GOT entry, exactly as it was */
    void *pa2 = a.alloc(10);
    assert_int_equal(live_objects(), before);                  /* not recorded any more */
    a.free(pa2);

    /* again, now c is loaded: both a and c are hooked */
    assert_int_equal(crawl_heap_hooks_install("libplt_(a|c)", ""), 0);
    void *pc = c.alloc(7);
    assert_int_equal(live_objects(), before + 1);
    c.free(pc);
    assert_int_equal(live_objects(), before);
    crawl_heap_hooks_uninstall();
    assert_ptr_equal(c.malloc_address(), original);
    dlclose(a.h), dlclose(b.h), dlclose(c.h);
}

/* realloc(p, 0) through a hooked GOT frees p: the hook must not look at
 * it again (a large chunk is unmapped by then: it faulted). */
static void test_realloc_to_zero(void **state)
{
    (void)state;
    lib a;
    open_lib(&a, PLT_LIB_A, "a");
    void *(*re)(void *, size_t) = (void *(*)(void *, size_t))dlsym(a.h, "plt_a_realloc");
    assert_non_null(re);
    assert_int_equal(crawl_heap_profile_start(), 0);
    assert_int_equal(crawl_heap_hooks_install("libplt_a", NULL), 0);
    size_t before = live_objects();
    void *p = a.alloc(1 << 20);          /* above malloc's mmap threshold: a mapping of its own */
    assert_non_null(p);
    assert_int_equal(live_objects(), before + 1);
    re(p, 0);
    assert_int_equal(live_objects(), before);
    /* a realloc that fails leaves the block's entry as it was: its own
     * size (it was recorded again at malloc_usable_size) */
    crawl_heap_totals t0, t1;
    void *q = a.alloc(32);
    crawl_heap_profile_totals(&t0);
    /* (AddressSanitizer's realloc aborts on the size instead of failing) */
    if (!dlsym(RTLD_DEFAULT, "__asan_init")) {
        errno = 0;
        assert_null(re(q, SIZE_MAX / 2));
        assert_int_equal(errno, ENOMEM);
    }
    crawl_heap_profile_totals(&t1);
    assert_int_equal(t1.live_objects, t0.live_objects);
    assert_int_equal(t1.live_bytes, t0.live_bytes);
    a.free(q);
    crawl_heap_hooks_uninstall();
    dlclose(a.h);
}

/* A library dlopen'ed by a hooked module after install is hooked. */
static void test_dlopen_from_hooked_module(void **state)
{
    (void)state;
    lib d;
    open_lib(&d, PLT_LIB_D, "d");
    assert_int_equal(crawl_heap_hooks_install("libplt_(d|e)", NULL), 0);
    void *(*open_e)(const char *, int) = (void *(*)(const char *, int))dlsym(d.h, "plt_d_dlopen");
    assert_non_null(open_e);
    void *e = open_e(PLT_LIB_E, RTLD_NOW | RTLD_LOCAL);    /* through d's hooked GOT */
    assert_non_null(e);
    void *(*e_alloc)(size_t) = (void *(*)(size_t))dlsym(e, "plt_e_alloc");
    void (*e_free)(void *) = (void (*)(void *))dlsym(e, "plt_e_free");
    size_t before = live_objects();
    void *p = e_alloc(33);
    assert_int_equal(live_objects(), before + 1);
    e_free(p);
    assert_int_equal(live_objects(), before);
    crawl_heap_hooks_uninstall();
    dlclose(e);
    dlclose(d.h);
}

/* A hooked library unloaded and loaded again (at the same address, as the
 * loader reuses the hole) is hooked again: it is another load. Once a
 * list of load addresses said "looked at already". */
static void test_reloaded_module_is_hooked_again(void **state)
{
    (void)state;
    lib d, e;
    open_lib(&d, PLT_LIB_D, "d");
    void *original = d.malloc_address();
    assert_int_equal(crawl_heap_hooks_install("libplt_(d|e)", NULL), 0);
    void *(*open_via_d)(const char *, int) =
        (void *(*)(const char *, int))dlsym(d.h, "plt_d_dlopen");
    for (int round = 0; round < 2; round++) {
        e.h = open_via_d(PLT_LIB_E, RTLD_NOW | RTLD_LOCAL);   /* through d's hooked GOT */
        assert_non_null(e.h);
        *(void **)&e.alloc = dlsym(e.h, "plt_e_alloc");
        *(void **)&e.free = dlsym(e.h, "plt_e_free");
        *(void **)&e.malloc_address = dlsym(e.h, "plt_e_malloc_address");
        assert_ptr_not_equal(e.malloc_address(), original);   /* hooked */
        size_t before = live_objects();
        void *p = e.alloc(41);
        assert_int_equal(live_objects(), before + 1);
        e.free(p);
        assert_int_equal(live_objects(), before);
        dlclose(e.h);
    }
    crawl_heap_hooks_uninstall();
    assert_ptr_equal(d.malloc_address(), original);
    dlclose(d.h);
}

typedef struct span {
    uintptr_t base, lo[8], hi[8];
    int n;
} span;

static int writable_of(struct dl_phdr_info *info, size_t size, void *arg)
{
    (void)size;
    span *sp = arg;
    if (info->dlpi_addr != sp->base)
        return 0;
    for (int i = 0; i < info->dlpi_phnum && sp->n < 8; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type == PT_LOAD && (ph->p_flags & PF_W)) {
            sp->lo[sp->n] = info->dlpi_addr + ph->p_vaddr;
            sp->hi[sp->n++] = info->dlpi_addr + ph->p_vaddr + ph->p_memsz;
        }
    }
    return 1;
}

/* Raw copies of a library's memory (its globals' redzones, under
 * AddressSanitizer, are part of what is compared) */
__attribute__((no_sanitize_address)) static void copy_raw(char *dst, const volatile char *src,
                                                          size_t n)
{
    for (size_t i = 0; i < n; i++)
        dst[i] = src[i];
}

__attribute__((no_sanitize_address)) static long first_difference(const char *a,
                                                                  const volatile char *b, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (a[i] != b[i])
            return (long)i;
    return -1;
}

/* Uninstall after a hooked library was unloaded and another took its
 * address: the other's memory stays as it is. Once the old entries' values
 * were written back there, into whatever lay at those addresses. */
static void test_uninstall_spares_whatever_took_the_place(void **state)
{
    (void)state;
    lib c;
    open_lib(&c, PLT_LIB_C, "c");
    Dl_info di;
    assert_true(dladdr((void *)c.alloc, &di) != 0);
    uintptr_t c_base = (uintptr_t)di.dli_fbase;
    assert_int_equal(crawl_heap_hooks_install("libplt_c", NULL), 0);
    assert_true(crawl_heap_hooks_count() >= 3);
    dlclose(c.h);
    assert_int_equal(crawl_heap_hooks_count(), 0);   /* its entries are gone with it */
    void *o = dlopen(PLT_LIB_OTHER, RTLD_NOW | RTLD_LOCAL);
    assert_non_null(o);
    assert_true(dladdr(dlsym(o, "plt_other_sum"), &di) != 0);
    if ((uintptr_t)di.dli_fbase != c_base) {
        crawl_heap_hooks_uninstall();
        dlclose(o);
        print_message("the other library did not load at the same address: nothing to test\n");
        skip();
    }
    struct link_map *lm = NULL;
    assert_int_equal(dlinfo(o, RTLD_DI_LINKMAP, &lm), 0);
    span sp = {.base = lm->l_addr};
    dl_iterate_phdr(writable_of, &sp);
    assert_true(sp.n > 0);
    char *copy[8];
    for (int i = 0; i < sp.n; i++) {
        copy[i] = malloc(sp.hi[i] - sp.lo[i]);
        assert_non_null(copy[i]);
        copy_raw(copy[i], (const char *)sp.lo[i], sp.hi[i] - sp.lo[i]);
    }
    crawl_heap_hooks_uninstall();
    for (int i = 0; i < sp.n; i++) {
        long at = first_difference(copy[i], (const char *)sp.lo[i], sp.hi[i] - sp.lo[i]);
        if (at >= 0)
            print_message("the other library's memory changed at %#lx\n", sp.lo[i] + (size_t)at);
        assert_int_equal(at, -1);
        free(copy[i]);
    }
    dlclose(o);
}

/* The mapping functions are a table apart: hooked only with
 * heap_profile_mmap=1, and put back exactly too. */
static void test_mapping_hooks(void **state)
{
    (void)state;
    lib a;
    open_lib(&a, PLT_LIB_A, "a");
    void *(*map)(size_t) = (void *(*)(size_t))dlsym(a.h, "plt_a_map");
    int (*unmap)(void *, size_t) = (int (*)(void *, size_t))dlsym(a.h, "plt_a_unmap");
    void *(*mmap_address)(void) = (void *(*)(void))dlsym(a.h, "plt_a_mmap_address");
    assert_true(map && unmap && mmap_address);
    void *original = mmap_address();
    size_t pg = (size_t)getpagesize(), bytes, regions, before;
    assert_int_equal(crawl_heap_profile_start(), 0);

    assert_int_equal(crawl_heap_hooks_install("libplt_a", NULL), 0);   /* option off */
    assert_ptr_equal(mmap_address(), original);
    size_t malloc_only = crawl_heap_hooks_count();
    crawl_heap_hooks_uninstall();

    assert_int_equal(crawl_sanitizer_set_options("heap_profile_mmap=1"), 0);
    assert_int_equal(crawl_heap_profile_start(), 0);
    assert_int_equal(crawl_heap_hooks_install("libplt_a", NULL), 0);
    assert_true(crawl_heap_hooks_count() > malloc_only);
    assert_ptr_not_equal(mmap_address(), original);
    crawl_heap_profile_mapped(&before, NULL);
    void *p = map(3 * pg);
    assert_true(p != MAP_FAILED);
    crawl_heap_profile_mapped(&bytes, &regions);
    assert_int_equal(bytes, before + 3 * pg);
    assert_int_equal(unmap((char *)p + pg, pg), 0);   /* splits it */
    crawl_heap_profile_mapped(&bytes, NULL);
    assert_int_equal(bytes, before + 2 * pg);
    assert_int_equal(unmap(p, 3 * pg), 0);
    crawl_heap_profile_mapped(&bytes, NULL);
    assert_int_equal(bytes, before);

    crawl_heap_hooks_uninstall();
    assert_ptr_equal(mmap_address(), original);       /* the GOT entry, exactly as it was */
    p = map(pg);
    crawl_heap_profile_mapped(&bytes, NULL);
    assert_int_equal(bytes, before);                  /* not recorded any more */
    munmap(p, pg);
    assert_int_equal(crawl_sanitizer_set_options("heap_profile_mmap=0"), 0);
    assert_int_equal(crawl_heap_profile_start(), 0);
    dlclose(a.h);
}

/* Install and uninstall while another thread loads and unloads a library:
 * install read its own library's name with dladdr (the loader's lock)
 * inside dl_iterate_phdr (its write lock), the two locks dlopen takes the
 * other way round: it hung at once. SIGALRM ends a hang. */
static atomic_int loading;

static void *load_unload(void *arg)
{
    (void)arg;
    while (atomic_load(&loading)) {
        void *h = dlopen(PLT_LIB_OTHER, RTLD_NOW | RTLD_LOCAL);
        if (h)
            dlclose(h);
    }
    return NULL;
}

static void test_install_beside_dlopen(void **state)
{
    (void)state;
    atomic_store(&loading, 1);
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, load_unload, NULL), 0);
    alarm(60);
    for (int i = 0; i < 200; i++) {      /* (it hung at the first, nearly every run) */
        assert_int_equal(crawl_heap_hooks_install("no-such-module", NULL), 0);
        crawl_heap_hooks_uninstall();
    }
    alarm(0);
    atomic_store(&loading, 0);
    assert_int_equal(pthread_join(t, NULL), 0);
}

/* A module whose GOT binds malloc and free to its own (RTLD_DEEPBIND, and
 * an allocator of its own) keeps them: the hooks forward to the process's,
 * so that module is left unhooked (free of its pointer crashed in glibc). */
static void test_own_binding_left_alone(void **state)
{
    (void)state;
    if (dlsym(RTLD_DEFAULT, "__asan_init")) {
        print_message("AddressSanitizer refuses RTLD_DEEPBIND: skipped\n");
        skip();
    }
    void *h = dlopen(PLT_LIB_OWN, RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
    assert_non_null(h);
    void *(*own_alloc)(size_t) = (void *(*)(size_t))dlsym(h, "plt_own_alloc");
    void (*own_free)(void *) = (void (*)(void *))dlsym(h, "plt_own_free");
    assert_non_null(own_alloc);
    assert_non_null(own_free);
    void *p = own_alloc(100);
    assert_non_null(p);
    assert_int_equal(crawl_heap_hooks_install("plt_own", NULL), 0);
    assert_int_equal(crawl_heap_hooks_count(), 0);     /* both its entries are its own */
    own_free(p);                                       /* its own free, not glibc's */
    void *q = own_alloc(100);
    assert_true((char *)q == (char *)p + 112);         /* its bump allocator's next block */
    own_free(q);
    crawl_heap_hooks_uninstall();
    dlclose(h);
}

/* A RELRO page found writable stays writable: a module dlopen is still
 * relocating is listed already, with its RELRO pages not yet made
 * read-only; install made a page it wrote read-only, and the loader's next
 * relocation on that page would fault. Here the module's RELRO is made
 * writable by hand (what that moment looks like), and must stay so. */
typedef struct relro_find {
    const char *name;
    uintptr_t lo, hi;
} relro_find;

static int find_relro(struct dl_phdr_info *info, size_t size, void *arg)
{
    (void)size;
    relro_find *r = arg;
    if (!info->dlpi_name || !strstr(info->dlpi_name, r->name))
        return 0;
    for (int i = 0; i < info->dlpi_phnum; i++)
        if (info->dlpi_phdr[i].p_type == PT_GNU_RELRO) {
            long pg = sysconf(_SC_PAGESIZE);
            r->lo = (info->dlpi_addr + info->dlpi_phdr[i].p_vaddr) & ~(uintptr_t)(pg - 1);
            r->hi = (info->dlpi_addr + info->dlpi_phdr[i].p_vaddr + info->dlpi_phdr[i].p_memsz) &
                    ~(uintptr_t)(pg - 1);    /* (the pages wholly RELRO) */
        }
    return 1;
}

/* 1 if every page of [lo, hi) is writable (/proc/self/maps) */
static int writable(uintptr_t lo, uintptr_t hi)
{
    FILE *f = fopen("/proc/self/maps", "r");
    assert_non_null(f);
    char line[512];
    int ok = 1;
    while (fgets(line, sizeof line, f)) {
        unsigned long a, b;
        char perms[5];
        if (sscanf(line, "%lx-%lx %4s", &a, &b, perms) == 3 && a < hi && b > lo && perms[1] != 'w')
            ok = 0;
    }
    fclose(f);
    return ok;
}

static void test_writable_relro_stays_writable(void **state)
{
    (void)state;
    lib n;
    open_lib(&n, PLT_LIB_NOW, "now");
    relro_find r = {"libplt_now", 0, 0};
    dl_iterate_phdr(find_relro, &r);
    assert_true(r.hi > r.lo);            /* a page wholly RELRO, its GOT on it */
    assert_false(writable(r.lo, r.hi));
    assert_int_equal(mprotect((void *)r.lo, r.hi - r.lo, PROT_READ | PROT_WRITE), 0);
    assert_int_equal(crawl_heap_hooks_install("libplt_now", NULL), 0);
    assert_true(crawl_heap_hooks_count() > 0);
    assert_true(writable(r.lo, r.hi));
    crawl_heap_hooks_uninstall();
    assert_true(writable(r.lo, r.hi));
    assert_int_equal(mprotect((void *)r.lo, r.hi - r.lo, PROT_READ), 0);
    /* and a read-only one is read-only again after each store */
    assert_int_equal(crawl_heap_hooks_install("libplt_now", NULL), 0);
    assert_false(writable(r.lo, r.hi));
    void *p = n.alloc(10);
    n.free(p);
    crawl_heap_hooks_uninstall();
    assert_false(writable(r.lo, r.hi));
    dlclose(n.h);
}

static void test_bad_arguments(void **state)
{
    (void)state;
    assert_int_equal(crawl_heap_hooks_install(NULL, NULL), -EINVAL);
    assert_int_equal(crawl_heap_hooks_install("(", NULL), -EINVAL);
    assert_int_equal(crawl_heap_hooks_install("x", "("), -EINVAL);
    assert_int_equal(crawl_heap_hooks_count(), 0);
    crawl_heap_hooks_uninstall();                      /* not installed: nothing */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hooks),
        cmocka_unit_test(test_dlopen_from_hooked_module),
        cmocka_unit_test(test_realloc_to_zero),
        cmocka_unit_test(test_reloaded_module_is_hooked_again),
        cmocka_unit_test(test_uninstall_spares_whatever_took_the_place),
        cmocka_unit_test(test_mapping_hooks),
        cmocka_unit_test(test_install_beside_dlopen),
        cmocka_unit_test(test_own_binding_left_alone),
        cmocka_unit_test(test_writable_relro_stays_writable),
        cmocka_unit_test(test_bad_arguments),
    };
    return cmocka_run_group_tests_name("plt_hooks", tests, NULL, NULL);
}
