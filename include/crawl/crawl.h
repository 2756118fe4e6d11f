/* crawl — umbrella header.
 *   pkg-config: crawl          CMake: find_package(crawl) -> crawl::crawl
 * See include/crawl/frames.h (Frames, threads) and stackwalk.h (walks). */
#ifndef CRAWL_CRAWL_H
#define CRAWL_CRAWL_H

#include <crawl/common.h>
#include <crawl/frames.h>
#include <crawl/stackwalk.h>

#endif
