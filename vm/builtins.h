/* crawlvm's builtins, registered from tables the host opens (as Lua's
 * luaL_Reg and luaL_openlibs), and the argument helpers builtins share. */
#ifndef CRAWLVM_BUILTINS_H
#define CRAWLVM_BUILTINS_H

#include "vm/vm.h"

/* One builtin of a table; a NULL name ends the table. */
typedef struct vm_reg {
    const char *name;
    int min_args, max_args;             /* max_args -1: variadic */
    builtin_fn fn;
} vm_reg;

/* Define a global builtin; max_args -1 for variadic. name must live forever. */
void vm_def_builtin(vm_state *vm, const char *name, int min_args, int max_args, builtin_fn fn);
/* Define every builtin of regs as a global. */
void vm_register(vm_state *vm, const vm_reg *regs);
/* printing, integers, strings, vectors, errors and traces, the collector,
 * native buffers */
void vm_open_base(vm_state *vm);
/* every library: vm_open_base and vm_open_ffi (ffi_bind.h) */
void vm_open_libs(vm_state *vm);

/* A builtin's C function, reached only through a vm_reg table; builtins
 * that ignore some of vm, argc and argv say so with VM_UNUSED_ARGS. */
#define VM_BUILTIN(cname) static value cname(vm_state *vm, int argc, value *argv)
#define VM_UNUSED_ARGS (void)vm, (void)argc, (void)argv

/* Arguments: v as an integer, or as an object of type t (else a type
 * error naming who wanted what); a C integer as a value (else a range
 * error). */
intptr_t vm_arg_int(vm_state *vm, value v, const char *who);
void *vm_arg_obj(vm_state *vm, value v, otype t, const char *who, const char *what);
value vm_int_result(vm_state *vm, long long n, const char *who);

#endif
