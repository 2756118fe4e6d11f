#!/bin/sh
# bench/heap: one allocation workload (free + malloc of 16..528 bytes, three
# 8-byte accesses) on glibc malloc, on crawl's checked heap (each access
# checked), and built with -fsanitize=address; ns per operation and ratios.
# usage: bench/heap.sh [BUILD_DIR]   (default build/dev)
set -eu
build=${1:-$(dirname "$0")/../build/dev}
pin=""
command -v taskset >/dev/null && pin="taskset -c 1"
export DEBUGINFOD_URLS=
g=$($pin "$build/bench/bench_heap" glibc | awk '{print $2}')
c=$($pin "$build/bench/bench_heap" crawl | awk '{print $2}')
a=$(ASAN_OPTIONS=detect_leaks=0 $pin "$build/bench/bench_heap_asan" | awk '{print $2}')
echo "bench/heap: ns per operation (free + malloc + 3 accesses), median of 9 batches"
awk -v g="$g" -v c="$c" -v a="$a" 'BEGIN {
    printf "  glibc malloc                   %7.1f\n", g
    printf "  AddressSanitizer (-fsanitize)  %7.1f   %5.2fx glibc\n", a, a / g
    printf "  crawl checked heap + checks    %7.1f   %5.2fx glibc   %5.2fx ASan\n", c, c / g, c / a }'
