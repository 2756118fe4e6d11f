/* LD_PRELOAD'ed for test_plt_hooks_no_vm_writev: process_vm_writev refused,
 * as a seccomp filter refuses it (the hooks then read /proc/self/maps). */
#define _GNU_SOURCE
#include <errno.h>
#include <sys/uio.h>

ssize_t process_vm_writev(pid_t pid, const struct iovec *local, unsigned long nlocal,
                          const struct iovec *remote, unsigned long nremote, unsigned long flags)
{
    (void)pid, (void)local, (void)nlocal, (void)remote, (void)nremote, (void)flags;
    errno = EPERM;
    return -1;
}
