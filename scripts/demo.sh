#!/bin/sh
# The main job: build crawl and run the demo embedder, which prints a mixed
# trace (script Frames among C frames) from inside libc's qsort.
set -eu
cd "$(dirname "$0")/.."
. scripts/deps.sh
crawl_ensure_deps
cmake --preset dev -DCRAWL_BUILD_TESTS=OFF -DCRAWL_BUILD_BENCH=OFF >/dev/null
cmake --build build/dev --target qsort_trace -j"$(nproc)" >/dev/null
exec build/dev/examples/qsort_trace
