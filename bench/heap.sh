#!/bin/sh
# bench/heap: one allocation workload (free + malloc of 16..528 bytes, three
# 8-byte accesses) on glibc malloc, on crawl's checked heap (each access
# checked; allocation stacks by CFI, the default, and by frame pointers), and
# built with -fsanitize=address; ns per operation and ratios.
# usage: bench/heap.sh [BUILD_DIR]   (default build/dev)
set -eu
build=${1:-$(dirname "$0")/../build/dev}
. "$(dirname "$0")/common.sh"
g=$($pin "$build/bench/bench_heap" glibc | awk '{print $2}')
c=$($pin "$build/bench/bench_heap" crawl | awk '{print $2}')
f=$(CRAWL_OPTIONS=fast_unwind_on_malloc=1 $pin "$build/bench/bench_heap" crawl | awk '{print $2}')
a=$(ASAN_OPTIONS=detect_leaks=0 $pin "$build/bench/bench_heap_asan" | awk '{print $2}')
echo "bench/heap: ns per operation (free + malloc + 3 accesses), median of 9 batches"
awk -v g="$g" -v c="$c" -v a="$a" -v f="$f" 'BEGIN {
    printf "  glibc malloc                   %7.1f\n", g
    printf "  AddressSanitizer (-fsanitize)  %7.1f   %5.2fx glibc\n", a, a / g
    printf "  crawl checked heap + checks    %7.1f   %5.2fx glibc   %5.2fx ASan  (stacks: CFI, the default)\n", c, c / g, c / a
    printf "  the same, frame-pointer stacks %7.1f   %5.2fx glibc   %5.2fx ASan  (fast_unwind_on_malloc=1; CFI costs %.2fx)\n", f, f / g, f / a, c / f }'
