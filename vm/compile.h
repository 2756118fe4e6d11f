/* crawlvm's compiler: reader nodes to bytecode protos. */
#ifndef CRAWLVM_COMPILE_H
#define CRAWLVM_COMPILE_H

#include "vm/read.h"
#include "vm/vm.h"

/* One proto per top-level form, in a NULL-terminated array (GC memory);
 * NULL with a message in err. */
proto **vm_compile(vm_state *vm, node *forms, const char *file, char *err, size_t errlen);

#endif
