#!/bin/sh
# The main job: build crawl and crawlvm, then run the demo script. libc's
# qsort sorts native memory with a crawlvm comparator, which prints the
# mixed stack (script frames among the C frames, through qsort and libffi)
# from inside qsort; then a million allocations make Boehm collect many
# times while live objects are held only on crawlvm's own value stack,
# reported to the collector through crawl's Frames.
set -eu
cd "$(dirname "$0")/.."
. scripts/deps.sh
crawl_ensure_deps
cmake --preset dev >/dev/null
cmake --build build/dev --target crawlvm -j"$(nproc)" >/dev/null
echo "$ crawlvm --native --gc-stats examples/qsort.crawl"
exec build/dev/crawlvm --native --gc-stats examples/qsort.crawl
