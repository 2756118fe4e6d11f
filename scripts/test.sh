#!/bin/sh
# Build and run every test: the optimized build, then the whole suite again
# under AddressSanitizer + UndefinedBehaviorSanitizer, the thread stress
# test under ThreadSanitizer, and with clang when it is installed (it is not
# installed for you).
set -eu
cd "$(dirname "$0")/.."
. scripts/deps.sh
# real programs the preload test runs under the guarded allocator
crawl_ensure_deps lua5.4 python3
jobs=$(nproc)
presets="dev asan tsan"
if command -v clang >/dev/null 2>&1; then
    presets="$presets clang"
else
    echo "note: clang not found, skipping the clang preset (apt-get install clang to add it)"
fi
for preset in $presets; do
    echo "== $preset build"
    cmake --preset "$preset" -DCRAWL_BUILD_TESTS=ON >/dev/null
    cmake --build --preset "$preset" -j"$jobs"
    echo "== $preset tests"
    ctest --preset "$preset" -j"$jobs" --no-tests=error
done
