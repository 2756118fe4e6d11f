/* The heap profile's live chunks now (crawl_heap_profile_totals): what
 * the heap profile tests count before and after what they allocate.
 * Header-only, so that the preload's tests, which link libcrawl and
 * libcrawl-preload.so but not the test-support library, share it. */
#ifndef CRAWL_TESTS_HEAP_LIVE_H
#define CRAWL_TESTS_HEAP_LIVE_H
#include <stddef.h>

#include <crawl/heap_profile.h>

static inline size_t live_objects(void)
{
    crawl_heap_totals t;
    crawl_heap_profile_totals(&t);
    return t.live_objects;
}

#endif
