#!/bin/sh
# The main job: build crawl and crawlvm, then run the demo script. libc's
# qsort sorts native memory with a crawlvm comparator, which prints the
# mixed stack (script frames among the C frames, through qsort and libffi)
# from inside qsort; then a million allocations make Boehm collect many
# times while live objects are held only on crawlvm's own value stack,
# reported to the collector through crawl's Frames. Last, the heap profile of
# examples/heap.crawl as a flame graph (build/dev/heap-profile.svg): the
# script functions that hold native memory, among the C frames.
set -eu
cd "$(dirname "$0")/.."
. scripts/deps.sh
crawl_ensure_deps
cmake --preset dev >/dev/null
cmake --build build/dev --target crawlvm crawl_preload -j"$(nproc)" >/dev/null
echo "$ crawlvm --native --gc-stats examples/qsort.crawl"
build/dev/crawlvm --native --gc-stats examples/qsort.crawl
echo
echo "$ crawlvm --heap-profile build/dev/heap-profile.svg examples/heap.crawl"
build/dev/crawlvm --heap-profile build/dev/heap-profile.svg examples/heap.crawl
echo "heap profile (live native memory when the script ended): build/dev/heap-profile.svg"
