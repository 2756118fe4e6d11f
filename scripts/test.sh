#!/bin/sh
# Build and run every test: the optimized build, then the whole suite again
# under AddressSanitizer + UndefinedBehaviorSanitizer, the thread tests
# (label tsan) under clang's ThreadSanitizer, the whole suite built with
# clang, and the whole suite in a plain -O0 Debug build (as a new user may
# build it: tests that assumed the optimizer's inlining failed there).
# GCC 12's ThreadSanitizer runtime (the old v2 one) reports a race in the
# stress test about once in 50 runs that clang 14's (v3) never reports in
# hundreds, while v3 catches the race at once when the snapshot reclaim is
# broken on purpose: it is the runtime, so the tsan preset uses clang.
set -eu
cd "$(dirname "$0")/.."
. scripts/deps.sh
# clang (the tsan and clang presets); real programs the preload test runs;
# gdb reading crawl's JIT symbol files; libc6-dbg, libc's debug info by build id
crawl_ensure_deps clang lua5.4 python3 gdb linux-perf libc6-dbg
jobs=$(nproc)
presets="dev asan tsan clang debug"
for preset in $presets; do
    echo "== $preset build"
    cmake --preset "$preset" -DCRAWL_BUILD_TESTS=ON >/dev/null
    cmake --build --preset "$preset" -j"$jobs"
    echo "== $preset tests"
    ctest --preset "$preset" -j"$jobs" --no-tests=error
done
