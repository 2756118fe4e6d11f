/* Separate debug info, as the README promises: symbolization finds a
 * module's line info in the file its .gnu_debuglink names (in its .debug
 * directory, here; beside it and under /usr/lib/debug are searched too),
 * and by build id under /usr/lib/debug/.build-id, where Debian's -dbgsym
 * packages and libc6-dbg install it. The same stripped library copied to a
 * directory without its debug file has its function's name (the symbol
 * table stays) and no line: the line came from the separate file. */
#define _GNU_SOURCE
#include "../../support.h"

#include <dlfcn.h>
#include <elf.h>
#include <link.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int copy_file(const char *from, const char *to)
{
    int in = open(from, O_RDONLY | O_CLOEXEC);
    if (in < 0)
        return -1;
    int out = open(to, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0700);
    if (out < 0) {
        close(in);
        return -1;
    }
    char buf[65536];
    ssize_t n;
    int rc = 0;
    while ((n = read(in, buf, sizeof buf)) > 0)
        if (write(out, buf, (size_t)n) != n)
            rc = -1;
    if (n < 0)
        rc = -1;
    close(in);
    close(out);
    return rc;
}

static uintptr_t fn_of(const char *path, void **handle)
{
    *handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!*handle)
        fail_msg("dlopen %s: %s", path, dlerror());
    void *fn = dlsym(*handle, "crawl_sepdebug_fn");
    assert_non_null(fn);
    int (*call)(int) = (int (*)(int))fn;
    assert_int_equal(call(2), 17);
    return (uintptr_t)fn;
}

static void test_debuglink(void **state)
{
    (void)state;
    /* the build made it: a stripped library and its debug file */
    struct stat st;
    assert_int_equal(stat(SEPDEBUG_DEBUG_FILE, &st), 0);
    void *h;
    uintptr_t fn = fn_of(SEPDEBUG_LIB, &h);
    char buf[1024];
    crawl_symbol s;
    /* the function's return statement: an address inside its body */
    assert_int_equal(crawl_symbolize(fn + 1, &s, buf, sizeof buf), 0);
    assert_string_equal(s.function, "crawl_sepdebug_fn");
    assert_non_null(s.module);
    assert_non_null(strstr(s.module, "libcrawl_sepdebug.so"));
    if (!s.file)
        fail_msg("no line info for %s: its debug file %s was not found", s.module,
                 SEPDEBUG_DEBUG_FILE);
    assert_non_null(strstr(s.file, "sepdebug/lib.c"));
    assert_in_range(s.line, 4, 7);      /* the function's lines */

    /* the same library alone in a temporary directory: no line */
    const char *tmp = getenv("TMPDIR");
    char tdir[4096];
    snprintf(tdir, sizeof tdir, "%s/crawl-sepdebug-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    char *made = mkdtemp(tdir);
    assert_non_null(made);
    char copy[4200];
    snprintf(copy, sizeof copy, "%s/libcrawl_sepdebug_copy.so", made);
    assert_int_equal(copy_file(SEPDEBUG_LIB, copy), 0);
    void *h2;
    uintptr_t fn2 = fn_of(copy, &h2);
    assert_true(fn2 != fn);             /* a module of its own */
    assert_int_equal(crawl_symbolize(fn2 + 1, &s, buf, sizeof buf), 0);
    assert_string_equal(s.function, "crawl_sepdebug_fn");
    assert_non_null(strstr(s.module, "libcrawl_sepdebug_copy.so"));
    assert_null(s.file);
    unlink(copy);
    rmdir(made);
    dlclose(h2);
    dlclose(h);
}

/* libc's separate debug file by its build id, as libc6-dbg installs it:
 * /usr/lib/debug/.build-id/xx/rest.debug (path empty if libc has none) */
static int libc_note(struct dl_phdr_info *info, size_t size, void *data)
{
    (void)size;
    if (!strstr(info->dlpi_name, "/libc.so"))
        return 0;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type != PT_NOTE)
            continue;
        const char *p = (const char *)(info->dlpi_addr + ph->p_vaddr), *end = p + ph->p_memsz;
        while (p + sizeof(ElfW(Nhdr)) <= end) {
            const ElfW(Nhdr) *nh = (const ElfW(Nhdr) *)p;
            const unsigned char *desc =
                (const unsigned char *)p + sizeof *nh + ((nh->n_namesz + 3) & ~3u);
            if (nh->n_type == NT_GNU_BUILD_ID && nh->n_namesz == 4 && nh->n_descsz > 1 &&
                memcmp(p + sizeof *nh, "GNU", 4) == 0) {
                char *out = data;
                int n = sprintf(out, "/usr/lib/debug/.build-id/%02x/", desc[0]);
                for (unsigned k = 1; k < nh->n_descsz; k++)
                    n += sprintf(out + n, "%02x", desc[k]);
                strcpy(out + n, ".debug");
                return 1;
            }
            p = (const char *)desc + ((nh->n_descsz + 3) & ~3u);
        }
    }
    return 0;
}

/* libc6-dbg's files are found by build id: a libc function gets its line
 * (div: one no sanitizer runtime intercepts, as it does qsort)
 * (where libc6-dbg is installed: the test command installs it) */
static void test_build_id(void **state)
{
    (void)state;
    char path[256] = "";
    dl_iterate_phdr(libc_note, path);
    assert_true(path[0] != '\0');       /* Debian's libc has a build id */
    char buf[1024];
    crawl_symbol s;
    assert_int_equal(crawl_symbolize((uintptr_t)div + 1, &s, buf, sizeof buf), 0);
    assert_non_null(s.module);
    assert_non_null(strstr(s.module, "libc.so"));
    assert_non_null(s.function);
    if (access(path, R_OK) != 0) {
        print_message("sepdebug: note: no %s (apt-get install libc6-dbg): the build-id lookup "
                      "was not tried\n", path);
        return;
    }
    if (!s.file)
        fail_msg("%s is here, and div has no line", path);
    assert_true(s.line > 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_debuglink),
        cmocka_unit_test(test_build_id),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
