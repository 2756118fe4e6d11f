/* crawlvm's interpreter loop and the Frame type of its segments. */
#ifndef CRAWLVM_INTERP_H
#define CRAWLVM_INTERP_H

#include "vm/vm.h"

/* Run the closure at stack slot fn_slot with the argc arguments above it,
 * in a new interpreter segment; its result. */
value vm_interp_run(vm_state *vm, uint32_t fn_slot, int argc);
/* Call a builtin or FFI function (argument checks, the one path for OP_CALL
 * and vm_call); args are on the value stack, inside a segment. */
value vm_call_native(vm_state *vm, value f, int argc, value *args);
/* Push / pop an interpreter segment whose value-stack slots start at v_base
 * (vm_interp_run uses them; so does vm_call around builtins called from C). */
void vm_segment_enter(vm_state *vm, segment *seg, uint32_t v_base);
void vm_segment_leave(vm_state *vm, segment *seg);
/* The segment Frame type: reports the activations a segment runs and, as
 * GC roots, their closures and value-stack slots. */
extern const crawl_frame_type vm_segment_type;

#endif
