/* crawl-boehm — Boehm's collector marks the roots crawl's Frames report.
 *   library crawl-boehm;  pkg-config: crawl-boehm;  CMake: crawl::boehm
 *   (crawl::boehm_static for the static library)
 * Include after <gc/gc.h> or alone; it needs only crawl's headers. */
#ifndef CRAWL_BOEHM_H
#define CRAWL_BOEHM_H

#include <crawl/gcroots.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Make Boehm's collector mark every root that attached threads' Frames
 * report: installs a GC_set_push_other_roots callback that calls the
 * previous one, then crawl_enum_roots_all_threads. Call after GC_INIT, from
 * one thread; idempotent. Memory that only crawl's roots reach (a VM value
 * stack in mmap'ed memory) then stays alive. Threads must be registered
 * with Boehm (GC_pthread_create or GC_register_my_thread) to be stopped.
 * If a Frame chain is corrupt (its older Frames' roots cannot be reported),
 * the collection stops the process with one line rather than free live
 * objects. */
CRAWL_API void crawl_boehm_install(void);

/* Roots pushed by the last collection (for diagnostics and tests). */
CRAWL_API unsigned long crawl_boehm_last_root_count(void);

#ifdef __cplusplus
}
#endif
#endif
