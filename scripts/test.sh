#!/bin/sh
# Build and run every test: the optimized build, then the whole suite again
# under AddressSanitizer + UndefinedBehaviorSanitizer.
set -eu
cd "$(dirname "$0")/.."
. scripts/deps.sh
crawl_ensure_deps
jobs=$(nproc)
for preset in dev asan; do
    echo "== $preset build"
    cmake --preset "$preset" -DCRAWL_BUILD_TESTS=ON >/dev/null
    cmake --build --preset "$preset" -j"$jobs"
    echo "== $preset tests"
    ctest --preset "$preset" -j"$jobs" --no-tests=error
done
