/* crawl-ffi — calls into C and callbacks from C, on libffi, with Frames.
 *   pkg-config: crawl-ffi      CMake: crawl::ffi
 *
 * A call made here runs inside a transition Frame (VM -> native), so a walk
 * from inside the callee resumes at the caller even through code it cannot
 * unwind; a closure's C entry point pushes an entry Frame (native -> VM)
 * before running its handler.
 *
 * Signatures are strings "R(A...)": one letter for the return type, then
 * the argument types in parentheses:
 *   v void (return only)  i int   u unsigned   l long   L unsigned long
 *   z size_t   d double   p void *   s const char *
 * e.g. qsort is "v(pzzp)", strlen "z(s)", a qsort comparator "i(pp)".
 *
 * Thread safety: prepared calls and closures may be used from any thread;
 * creating and freeing them is not signal-safe (they allocate).
 */
#ifndef CRAWL_FFI_H
#define CRAWL_FFI_H

#include <crawl/frames.h>

#ifdef __cplusplus
extern "C" {
#endif

#define CRAWL_FFI_MAX_ARGS 16

typedef union crawl_ffi_value {
    int i;
    unsigned u;
    long l;
    unsigned long L;
    size_t z;
    double d;
    void *p;
    const char *s;
} crawl_ffi_value;

typedef struct crawl_ffi_fn crawl_ffi_fn;
typedef struct crawl_ffi_closure crawl_ffi_closure;

/* Prepare a call to `symbol` in `library` (a path or soname for dlopen; NULL
 * for the symbols already in the process). NULL on error, with one line in
 * err: a malformed signature (naming the position), a library that does not
 * open, a missing symbol. */
CRAWL_API crawl_ffi_fn *crawl_ffi_open(const char *library, const char *symbol,
                                       const char *signature, char *err, size_t errlen);
/* The same for a function pointer you already have; name is for messages.
 * A NULL fn is an error ("missing function pointer"). */
CRAWL_API crawl_ffi_fn *crawl_ffi_wrap(void *fn, const char *name, const char *signature,
                                       char *err, size_t errlen);
CRAWL_API void crawl_ffi_free(crawl_ffi_fn *fn);

/* What fn was prepared with (fn must not be NULL). Each reads one field:
 * async-signal-safe, allocates nothing. */
CRAWL_API const char *crawl_ffi_name(const crawl_ffi_fn *fn);
CRAWL_API unsigned crawl_ffi_nargs(const crawl_ffi_fn *fn);
CRAWL_API char crawl_ffi_arg_type(const crawl_ffi_fn *fn, unsigned i);   /* 0 past the end */
CRAWL_API char crawl_ffi_ret_type(const crawl_ffi_fn *fn);

/* Call fn with args[0..nargs) inside a transition Frame; the result goes
 * to *ret (may be NULL for void). fn must not be NULL. On an attached
 * thread crawl's part (the Frame's push and pop) and libffi's call are
 * async-signal-safe and allocate nothing, unless a transition hook is set
 * (crawl_set_transition_hook: crawl-boehm's gc_stress_transitions
 * collects); on a thread not yet attached the push attaches it (allocates;
 * not signal-safe). What the callee does is its own. */
CRAWL_API void crawl_ffi_call(const crawl_ffi_fn *fn, crawl_ffi_value *ret,
                              const crawl_ffi_value *args);

/* Runs when C calls a closure's code pointer, inside an entry Frame whose
 * target is the closure's target. */
typedef void (*crawl_ffi_handler)(const crawl_ffi_closure *c, crawl_ffi_value *ret,
                                  const crawl_ffi_value *args, void *user);

/* A C function pointer with the given signature that calls handler.
 * target is what the entry Frame reports as its method (e.g. the VM
 * closure). NULL on error, with a message in err. */
CRAWL_API crawl_ffi_closure *crawl_ffi_closure_new(const char *signature,
                                                   crawl_ffi_handler handler, void *user,
                                                   const void *target, char *err, size_t errlen);
/* crawl_ffi_closure_code, _nargs, _arg_type, _ret_type: what c was made
 * with (c must not be NULL). Each reads one field: async-signal-safe,
 * allocates nothing. */
CRAWL_API void *crawl_ffi_closure_code(const crawl_ffi_closure *c);
CRAWL_API unsigned crawl_ffi_closure_nargs(const crawl_ffi_closure *c);
CRAWL_API char crawl_ffi_closure_arg_type(const crawl_ffi_closure *c, unsigned i);
CRAWL_API char crawl_ffi_closure_ret_type(const crawl_ffi_closure *c);
CRAWL_API void crawl_ffi_closure_free(crawl_ffi_closure *c);
/* Change what c's entry Frame reports as its method (a closure reused for
 * another VM function). Not safe against a call of c running meanwhile in
 * another thread; no allocation. One store: async-signal-safe. c must not
 * be NULL. */
CRAWL_API void crawl_ffi_closure_set_target(crawl_ffi_closure *c, const void *target);

/* The Frame types crawl-ffi pushes (to recognise them in walks). */
CRAWL_API extern const crawl_frame_type crawl_ffi_call_type;      /* a transition */
CRAWL_API extern const crawl_frame_type crawl_ffi_callback_type;  /* an entry */

#ifdef __cplusplus
}
#endif
#endif
