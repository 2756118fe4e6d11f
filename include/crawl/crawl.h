/* crawl — umbrella header.
 *   pkg-config: crawl          CMake: find_package(crawl) -> crawl::crawl
 * See include/crawl/frames.h (Frames, threads), stackwalk.h (walks) and
 * gcroots.h (GC roots; crawl_boehm_* live in the crawl-boehm library). */
#ifndef CRAWL_CRAWL_H
#define CRAWL_CRAWL_H

#include <crawl/common.h>
#include <crawl/frames.h>
#include <crawl/stackwalk.h>
#include <crawl/gcroots.h>
#include <crawl/sanitizer.h>

#endif
