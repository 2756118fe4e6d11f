/* crawlvm's tracebacks and fatal-signal handlers. */
#ifndef CRAWLVM_TRACE_H
#define CRAWLVM_TRACE_H

#include "vm/vm.h"

/* The mixed stack, script frames (and with --native C frames) newest first. */
void vm_print_traceback(vm_state *vm, int fd, const char *title);
/* SIGSEGV and friends in native code print the mixed stack, then die. */
void vm_install_fatal_handlers(vm_state *vm);

#endif
