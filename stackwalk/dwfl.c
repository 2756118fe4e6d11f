/* The process's one libdwfl session, shared by symbolization (symbolize.c)
 * and the CFI compiler (cfi_cache.c).
 *
 * Built on first use from /proc/self/maps; ended when the module snapshot
 * sees a load or unload (modules.c), and rebuilt once when a pc lies in no
 * module it knows (code loaded since). libdwfl sessions are not thread-safe,
 * and what a caller gets from one (a module, its CFI) lives only as long as
 * the session: callers hold sw_dwfl_lock across their whole use.
 *
 * Lock order: modules.c's build_lock, then this one. fork() takes both in
 * that order (modules.c's fork handlers call sw_dwfl_fork). */
#include <elfutils/libdwfl.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "stackwalk/internal.h"

static pthread_mutex_t dwfl_lock = PTHREAD_MUTEX_INITIALIZER;
static Dwfl *session;
static char *debuginfo_path;
/* 1 if a separate debug file for mod is on this machine where libdwfl's
 * standard search looks first: by build id under /usr/lib/debug/.build-id,
 * or by its .gnu_debuglink name beside the file, in its .debug
 * directory, or under /usr/lib/debug. */
static int local_debuginfo(Dwfl_Module *mod, const char *file_name, const char *debuglink_file)
{
    char path[4096];
    const unsigned char *id;
    GElf_Addr vaddr;
    int len = dwfl_module_build_id(mod, &id, &vaddr);
    if (len > 1) {
        int n = snprintf(path, sizeof path, "/usr/lib/debug/.build-id/%02x/", id[0]);
        for (int i = 1; i < len && n > 0 && (size_t)n + 3 < sizeof path; i++)
            n += snprintf(path + n, sizeof path - (size_t)n, "%02x", id[i]);
        if (n > 0 && (size_t)n + 7 < sizeof path) {
            memcpy(path + n, ".debug", 7);
            if (access(path, R_OK) == 0)
                return 1;
        }
    }
    if (!debuglink_file || !file_name)
        return 0;
    const char *slash = strrchr(file_name, '/');
    int dir = slash ? (int)(slash - file_name) : 0;
    static const char *const where[] = {"%.*s/%s", "%.*s/.debug/%s", "/usr/lib/debug%.*s/%s"};
    for (size_t i = 0; i < sizeof where / sizeof where[0]; i++) {
        int n = snprintf(path, sizeof path, where[i], dir, file_name, debuglink_file);
        if (n > 0 && (size_t)n < sizeof path && access(path, R_OK) == 0)
            return 1;
    }
    return 0;
}

/* Separate debug info only from this machine, never from debuginfod.
 * libdwfl's standard search ends by asking debuginfod: it loads
 * libdebuginfod (and with it libcurl and OpenSSL, whatever
 * DEBUGINFOD_URLS says) and, where DEBUGINFOD_URLS names a server, fetches
 * over the network, at report time. A thread dump's helper thread that
 * started OpenSSL while the program exited died in OpenSSL's exit handler
 * (crawlvm, SIGQUIT just before the script ended). So the standard search
 * runs only when it will stop at a local file. And dlopen waits for ever
 * for the loader's lock in a fork child that inherited it held
 * (crawl__loader_lock_suspect): there a module's symbols come from its own
 * file only. */
/* fd, made close-on-exec (a negative one as it is) */
static int cloexec(int fd)
{
    if (fd >= 0)
        fcntl(fd, F_SETFD, fcntl(fd, F_GETFD) | FD_CLOEXEC);
    return fd;
}

static int find_debuginfo(Dwfl_Module *mod, void **userdata, const char *modname,
                          Dwarf_Addr base, const char *file_name, const char *debuglink_file,
                          GElf_Word debuglink_crc, char **debuginfo_file_name)
{
    if (__atomic_load_n(&crawl__loader_lock_suspect, __ATOMIC_RELAXED) ||
        !local_debuginfo(mod, file_name, debuglink_file))
        return -1;
    return cloexec(dwfl_standard_find_debuginfo(mod, userdata, modname, base, file_name,
                                                debuglink_file, debuglink_crc,
                                                debuginfo_file_name));
}

/* The module's file, as libdwfl finds it, close-on-exec: libdwfl keeps
 * the descriptor open for the session, and a program that exec'ed passed
 * it on (ls under the preload saw libc and the program open) */
static int find_elf(Dwfl_Module *mod, void **userdata, const char *module_name,
                    Dwarf_Addr base, char **file_name, Elf **elfp)
{
    return cloexec(dwfl_linux_proc_find_elf(mod, userdata, module_name, base, file_name, elfp));
}

static const Dwfl_Callbacks callbacks = {
    .find_elf = find_elf,
    .find_debuginfo = find_debuginfo,
    .debuginfo_path = &debuginfo_path,
};

void sw_dwfl_lock(void) { crawl__lock(&dwfl_lock); }
void sw_dwfl_unlock(void) { crawl__unlock(&dwfl_lock); }

void sw_dwfl_fork(int phase)
{
    if (phase == 0)
        crawl__lock(&dwfl_lock);
    else
        crawl__unlock(&dwfl_lock);
}

static void session_end(void)
{
    if (session)
        dwfl_end(session);
    session = NULL;
}

void sw_dwfl_forget(void)
{
    crawl__lock(&dwfl_lock);
    session_end();
    crawl__unlock(&dwfl_lock);
}

static Dwfl *session_open(void)
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
 * must lie inside the module's mapped range. */
static Dwfl_Module *module_holding(uintptr_t pc)
{
    Dwfl_Module *m = session ? dwfl_addrmodule(session, pc) : NULL;
    Dwarf_Addr low = 0, high = 0;
    if (m && dwfl_module_info(m, NULL, &low, &high, NULL, NULL, NULL, NULL) && pc >= low &&
        pc < high)
        return m;
    return NULL;
}

/* No loader lock is taken here (dl_iterate_phdr would deadlock a fork child
 * whose parent had another thread inside it). */
Dwfl_Module *sw_dwfl_module(uintptr_t pc)
{
    if (!session)
        session = session_open();
    Dwfl_Module *m = module_holding(pc);
    if (!m) {                            /* loaded since the session was built? */
        session_end();
        session = session_open();
        m = module_holding(pc);
    }
    return m;
}
