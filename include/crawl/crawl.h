/* crawl — umbrella header.
 *   pkg-config: crawl          CMake: find_package(crawl) -> crawl::crawl
 * See include/crawl/frames.h (Frames, threads), stackwalk.h (walks),
 * gcroots.h (GC roots), sanitizer.h (depot, checked heap, options),
 * guarded.h (the guarded pool), heap_profile.h and profiler.h. The glue
 * libraries have their own headers: crawl/boehm.h (crawl-boehm) and
 * crawl/ffi.h (crawl-ffi). */
#ifndef CRAWL_CRAWL_H
#define CRAWL_CRAWL_H

#include <crawl/common.h>
#include <crawl/frames.h>
#include <crawl/stackwalk.h>
#include <crawl/gcroots.h>
#include <crawl/sanitizer.h>
#include <crawl/guarded.h>
#include <crawl/heap_profile.h>
#include <crawl/profiler.h>

#endif
