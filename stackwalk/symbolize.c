/* Symbolization through elfutils libdwfl: function, file:line, module.
 *
 * One Dwfl session for the process, built on first use from
 * /proc/self/maps and rebuilt when a pc falls outside every known module
 * (code loaded with dlopen since). Serialized by a mutex: libdwfl sessions
 * are not thread-safe. */
#include <elfutils/libdw.h>
#include <elfutils/libdwfl.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "stackwalk/internal.h"

static pthread_mutex_t sym_lock = PTHREAD_MUTEX_INITIALIZER;
static Dwfl *session;

/* fork(): no other thread of the parent may leave sym_lock held in the child. */
static void fork_prepare(void) { pthread_mutex_lock(&sym_lock); }
static void fork_release(void) { pthread_mutex_unlock(&sym_lock); }

__attribute__((constructor)) static void register_fork_handlers(void)
{
    pthread_atfork(fork_prepare, fork_release, fork_release);
}

static char *debuginfo_path;
static const Dwfl_Callbacks callbacks = {
    .find_elf = dwfl_linux_proc_find_elf,
    .find_debuginfo = dwfl_standard_find_debuginfo,
    .debuginfo_path = &debuginfo_path,
};

static Dwfl *open_session(void)
{
    Dwfl *d = dwfl_begin(&callbacks);
    if (!d)
        return NULL;
    dwfl_report_begin(d);
    if (dwfl_linux_proc_report(d, getpid()) != 0 || dwfl_report_end(d, NULL, NULL) != 0) {
        dwfl_end(d);
        return NULL;
    }
    return d;
}

/* libdwfl's dwfl_addrmodule answers with a nearby module for an address in
 * none (the stack, an anonymous mapping, far past a library): the address
 * must lie inside the module's mapped range. No loader lock is taken here
 * (dl_iterate_phdr would deadlock a fork child whose parent had another
 * thread inside it). */
static Dwfl_Module *module_holding(uintptr_t pc)
{
    Dwfl_Module *m = session ? dwfl_addrmodule(session, pc) : NULL;
    Dwarf_Addr low = 0, high = 0;
    if (m && dwfl_module_info(m, NULL, &low, &high, NULL, NULL, NULL, NULL) &&
        pc >= low && pc < high)
        return m;
    return NULL;
}

static Dwfl_Module *find_module(uintptr_t pc)
{
    if (!session)
        session = open_session();
    Dwfl_Module *m = module_holding(pc);
    if (!m) {                            /* loaded since the session was built? */
        if (session)
            dwfl_end(session);
        session = open_session();
        m = module_holding(pc);
    }
    return m;
}

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

int crawl_symbolize(uintptr_t pc, crawl_symbol *out, char *buf, size_t len)
{
    memset(out, 0, sizeof *out);
    pthread_mutex_lock(&sym_lock);
    Dwfl_Module *m = find_module(pc);
    if (!m) {
        pthread_mutex_unlock(&sym_lock);
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
    char *fn = stash(dwfl_module_addrname(m, pc), buf, len, &used, &full);
    /* "__libc_start_main@@GLIBC_2.34": the version is not part of the name */
    char *at = fn ? strchr(fn, '@') : NULL;
    if (at && at != fn)
        *at = '\0';
    out->function = fn;
    int lineno = 0, col = 0;
    const char *file = NULL;
    if (find_line(m, pc, &lineno, &col, &file)) {
        if (file && lineno > 0) {
            out->file = stash(file, buf, len, &used, &full);
            out->line = lineno;
            out->column = col;
        }
    }
    pthread_mutex_unlock(&sym_lock);
    return full ? -ENOSPC : 0;
}
