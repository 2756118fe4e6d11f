/* crawlvm's FFI: calls to C and callbacks from C through crawl-ffi. */
#ifndef CRAWLVM_FFI_BIND_H
#define CRAWLVM_FFI_BIND_H

#include "vm/vm.h"

/* Call f with argc script values converted by its signature; the result
 * converted back. Type and arity errors are script errors. */
value vm_call_ffi(vm_state *vm, ffi_obj *f, int argc, value *argv);
/* ffi-fn and ffi-callback */
void vm_open_ffi(vm_state *vm);

#endif
