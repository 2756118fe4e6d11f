/* Symbolization through elfutils libdwfl: function, file:line, module,
 * from the process's one session (dwfl.c), under its lock. */
#include <dlfcn.h>
#include <link.h>
#include <elfutils/libdw.h>
#include <elfutils/libdwfl.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "stackwalk/internal.h"

/* The line-table row for pc. libdw finds the compile unit through
 * .debug_aranges, which clang does not emit by default: without it, scan
 * the module's units for the one whose ranges hold pc. */
static int find_line(Dwfl_Module *m, uintptr_t pc, int *lineno, int *col, const char **file)
{
    Dwfl_Line *line = dwfl_module_getsrc(m, pc);
    if (line) {
        *file = dwfl_lineinfo(line, NULL, lineno, col, NULL, NULL);
        return 1;
    }
    Dwarf_Addr bias = 0;
    Dwarf_Die *cu = NULL;
    while ((cu = dwfl_module_nextcu(m, cu, &bias)) != NULL) {
        if (dwarf_haspc(cu, pc - bias) <= 0)
            continue;
        Dwarf_Line *dl = dwarf_getsrc_die(cu, pc - bias);
        if (!dl)
            return 0;
        *file = dwarf_linesrc(dl, NULL, NULL);
        dwarf_lineno(dl, lineno);
        dwarf_linecol(dl, col);
        return 1;
    }
    return 0;
}

/* Copy s into buf at *used; NULL if it does not fit. */
static char *stash(const char *s, char *buf, size_t len, size_t *used, int *full)
{
    if (!s)
        return NULL;
    size_t n = strlen(s) + 1;
    if (*used + n > len) {
        *full = 1;
        return NULL;
    }
    char *d = memcpy(buf + *used, s, n);
    *used += n;
    return d;
}

/* A C++ symbol's name as people read it ("operator new[](unsigned long)"),
 * through the C++ runtime's demangler when the process has one loaded
 * (every C++ program does; libcrawl itself is C and links none). malloc'd,
 * or NULL: not a C++ name, or no demangler. Looked up as libcrawl loads,
 * then again only when a C++ runtime has been loaded since (a C program may
 * dlopen C++ code later): each dlsym counts as the program's own dl call to
 * glibc, which then drops the program's last dlerror() message, so it is
 * not repeated for every name a report holds. */
typedef char *demangle_fn(const char *mangled, char *out, size_t *len, int *status);
static _Atomic(demangle_fn *) demangler;
static _Atomic(unsigned long long) demangler_tried_at;   /* the loader's adds then, + 1 */

typedef struct cxx_runtime {
    unsigned long long adds;
    int found;
} cxx_runtime;

static int find_cxx_runtime(struct dl_phdr_info *info, size_t size, void *arg)
{
    (void)size;
    cxx_runtime *r = arg;
    r->adds = info->dlpi_adds;
    const char *name = info->dlpi_name ? info->dlpi_name : "";
    if (strstr(name, "libstdc++") || strstr(name, "libc++"))
        r->found = 1;
    return 0;
}

static demangle_fn *find_demangler(int first)
{
    demangle_fn *d = atomic_load_explicit(&demangler, memory_order_acquire);
    if (d)
        return d;
    cxx_runtime r = {0, 0};
    if (crawl__loader_lock_suspect)
        r.found = 1, r.adds = ~0ull - 1; /* dlsym alone, once (its lock, glibc's fork resets) */
    else
        dl_iterate_phdr(find_cxx_runtime, &r);
    if ((!first && !r.found) || atomic_exchange(&demangler_tried_at, r.adds + 1) == r.adds + 1)
        return NULL;                     /* none to find, or nothing loaded since the last try */
    d = (demangle_fn *)dlsym(RTLD_DEFAULT, "__cxa_demangle");
    if (d)
        atomic_store_explicit(&demangler, d, memory_order_release);
    else
        (void)dlerror();                 /* crawl's "undefined symbol" is not the program's */
    return d;
}

/* (first: also a C++ runtime linked into the program itself) */
__attribute__((constructor)) static void find_demangler_early(void) { find_demangler(1); }

static char *demangled(const char *name)
{
    if (!name || name[0] != '_' || name[1] != 'Z')
        return NULL;
    demangle_fn *d = find_demangler(0);
    if (!d)
        return NULL;
    int status = -1;
    char *s = d(name, NULL, NULL, &status);
    if (status != 0) {
        free(s);
        return NULL;
    }
    return s;
}

int crawl_symbolize(uintptr_t pc, crawl_symbol *out, char *buf, size_t len)
{
    memset(out, 0, sizeof *out);
    sw_dwfl_lock();
    Dwfl_Module *m = sw_dwfl_module(pc);
    if (!m) {
        sw_dwfl_unlock();
        return -ENOENT;
    }
    size_t used = 0;
    int full = 0;
    Dwarf_Addr start = 0;
    const char *mainfile = NULL;
    const char *modname = dwfl_module_info(m, NULL, &start, NULL, NULL, NULL, &mainfile, NULL);
    Dwarf_Addr bias = 0;
    dwfl_module_getelf(m, &bias);
    out->module = stash(mainfile ? mainfile : modname, buf, len, &used, &full);
    out->module_offset = pc - (uintptr_t)bias;
    size_t fn_at = used;
    char *fn = stash(dwfl_module_addrname(m, pc), buf, len, &used, &full);
    /* "__libc_start_main@@GLIBC_2.34": the version is not part of the name */
    char *at = fn ? strchr(fn, '@') : NULL;
    if (at && at != fn)
        *at = '\0';
    int lineno = 0, col = 0;
    const char *file = NULL;
    if (!find_line(m, pc, &lineno, &col, &file) || lineno <= 0)
        file = NULL;
    /* the demangled name only where it leaves room for the file (else the
     * mangled one stays: a longer name must not cost file:line) */
    char *readable = demangled(fn);
    size_t file_len = file ? strlen(file) + 1 : 0;
    if (readable && fn_at + strlen(readable) + 1 + file_len <= len) {
        used = fn_at;
        fn = stash(readable, buf, len, &used, &full);
    }
    free(readable);
    out->function = fn;
    if (file) {
        out->file = stash(file, buf, len, &used, &full);
        out->line = lineno;
        out->column = col;
    }
    sw_dwfl_unlock();
    return full ? -ENOSPC : 0;
}
