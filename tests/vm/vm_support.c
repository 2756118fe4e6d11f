#define _GNU_SOURCE
#include "vm_support.h"

#include <fcntl.h>
#include <gc/gc.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

vm_state *test_vm(int install_adapter)
{
    static vm_state *vm;
    if (!vm) {
        GC_INIT();
        crawl_thread_attach();
        if (install_adapter)
            crawl_boehm_install();
        vm = vm_new();
        if (vm)
            vm_open_libs(vm);
    }
    return vm;
}

static size_t drain(int fd, char *buf, size_t len)
{
    size_t used = 0;
    ssize_t n;
    while (used + 1 < len && (n = read(fd, buf + used, len - 1 - used)) > 0)
        used += (size_t)n;
    buf[used] = '\0';
    return used;
}

/* Output goes to temporary files: a pipe could fill up and block. */
void run(vm_state *vm, const char *src, run_result *r)
{
    FILE *out = tmpfile(), *err = tmpfile();
    int saved_err = dup(STDERR_FILENO);
    dup2(fileno(err), STDERR_FILENO);
    vm->out_fd = fileno(out);
    r->rc = vm_eval(vm, src, "test.crawl", &r->result);
    fflush(stderr);
    dup2(saved_err, STDERR_FILENO);
    close(saved_err);
    vm->out_fd = STDOUT_FILENO;
    lseek(fileno(out), 0, SEEK_SET);
    lseek(fileno(err), 0, SEEK_SET);
    r->out_len = drain(fileno(out), r->out, sizeof r->out);
    drain(fileno(err), r->err, sizeof r->err);
    fclose(out);
    fclose(err);
}
