/* Run crawlvm source in-process and capture what it prints. */
#ifndef CRAWLVM_TEST_SUPPORT_H
#define CRAWLVM_TEST_SUPPORT_H

#include <crawl/boehm.h>

#include "vm/builtins.h"
#include "vm/vm.h"

typedef struct run_result {
    int rc;                             /* vm_eval's */
    char out[8192];                     /* print/display/backtrace output */
    size_t out_len;                     /* its bytes (it may hold NUL bytes) */
    char err[8192];                     /* tracebacks and error lines */
    value result;
} run_result;

/* One VM for the whole test program (GC_INIT, attach, crawl-boehm unless
 * install_adapter is 0). */
vm_state *test_vm(int install_adapter);
void run(vm_state *vm, const char *src, run_result *r);

#endif
