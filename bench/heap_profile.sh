#!/bin/sh
# bench/heap_profile: 10M malloc/free pairs (bench_heap_work, -O2 without
# frame pointers) in one run each, alternating, 5 rounds: glibc alone;
# heaptrack (every allocation with its stack, when installed) as people run
# it, its interpreter process free to use the second core, and pinned to
# one core with the program (its whole CPU cost, which earlier versions of
# this script compared against); crawl's
# preload recording every allocation with its stack (CFI, the default);
# the same with frame-pointer stacks; crawl sampling stacks every 512 KiB
# (Go's MemProfileRate); the preload alone, recording nothing; the same
# with GWP-ASan at its default rate; and a bare forwarding interposer
# (bench/interpose_floor.c: the price of interposing malloc at all). Then
# the same workload with 192 call paths ("diverse": a thread's last stacks
# rarely start where the next one does, so the walk memo helps little),
# glibc alone and crawl with every stack (heaptrack 1.4's interpreter dies
# of std::bad_alloc on it from 300k pairs on, so it has no row there).
# The heap profile rows run with GWP-ASan off (gpa_sample_rate=0), as
# heaptrack has none: its cost is the last row's. Medians of the workload's
# own wall time, and the overhead of each over glibc.
# usage: bench/heap_profile.sh [BUILD_DIR] [ITERATIONS]
set -eu
build=${1:-$(dirname "$0")/../build/dev}
iters=${2:-10000000}
work=$build/bench/bench_heap_work
pre=$build/libcrawl-preload.so
floor=$build/bench/libbench_interpose_floor.so
. "$(dirname "$0")/common.sh"
run() {   # label, command...
    label=$1; shift
    "$@" >"$tmp/out" 2>/dev/null || { echo "bench: $label failed" >&2; exit 1; }
    grep -E '^[0-9]+\.[0-9]+$' "$tmp/out" | tail -n 1 >>"$tmp/$label"
}
have_heaptrack=0
command -v heaptrack >/dev/null && have_heaptrack=1
for round in 1 2 3 4 5; do
    run glibc $pin "$work" "$iters"
    if [ $have_heaptrack -eq 1 ]; then
        run heaptrack heaptrack -o "$tmp/ht" "$work" "$iters"
        rm -f "$tmp"/ht*
        run heaptrack_1cpu $pin heaptrack -o "$tmp/ht" "$work" "$iters"
    fi
    CRAWL_OPTIONS=heap_profile=1:gpa_sample_rate=0 LD_PRELOAD=$pre run crawl $pin "$work" "$iters"
    CRAWL_OPTIONS=heap_profile=1:heap_stack_fast=1:gpa_sample_rate=0 LD_PRELOAD=$pre \
        run crawl_fast $pin "$work" "$iters"
    CRAWL_OPTIONS=heap_profile=1:heap_sample_bytes=524288:gpa_sample_rate=0 LD_PRELOAD=$pre \
        run sampled $pin "$work" "$iters"
    CRAWL_OPTIONS=gpa_sample_rate=0 LD_PRELOAD=$pre run preload $pin "$work" "$iters"
    LD_PRELOAD=$pre run gpa $pin "$work" "$iters"
    LD_PRELOAD=$floor run floor $pin "$work" "$iters"
    run glibc_div $pin "$work" "$iters" diverse
    CRAWL_OPTIONS=heap_profile=1:gpa_sample_rate=0 LD_PRELOAD=$pre run crawl_div $pin "$work" "$iters" diverse
    rm -f "$tmp"/ht*
done
med() { sort -n "$tmp/$1" | sed -n 3p; }
g=$(med glibc)
h=$([ $have_heaptrack -eq 1 ] && med heaptrack || echo 0)
h1=$([ $have_heaptrack -eq 1 ] && med heaptrack_1cpu || echo 0)
echo "bench/heap_profile: $iters malloc/free pairs, seconds (median of 5; all but the first heaptrack row pinned to one core)"
awk -v g="$g" -v h="$h" -v h1="$h1" -v c="$(med crawl)" -v f="$(med crawl_fast)" -v s="$(med sampled)" \
    -v p="$(med preload)" -v a="$(med gpa)" -v fl="$(med floor)" \
    -v gd="$(med glibc_div)" -v cd="$(med crawl_div)" 'BEGIN {
    printf "  glibc alone                        %7.3f\n", g
    if (h > 0) {
        printf "  heaptrack (every stack)            %7.3f   %5.2fx  overhead %+6.0f%%\n", h, h / g, 100 * (h - g) / g
        printf "  heaptrack, pinned to one core      %7.3f   %5.2fx  overhead %+6.0f%%\n", h1, h1 / g, 100 * (h1 - g) / g
    } else
        printf "  heaptrack                          (not installed: apt-get install heaptrack)\n"
    printf "  crawl, every stack (CFI)           %7.3f   %5.2fx  overhead %+6.0f%%", c, c / g, 100 * (c - g) / g
    if (h > 0) printf "   (%.2f of heaptrack'"'"'s overhead, %.2f pinned)", (c - g) / (h - g), (c - g) / (h1 - g)
    printf "\n  crawl, every stack (frame pointers) %6.3f   %5.2fx  overhead %+6.0f%%\n", f, f / g, 100 * (f - g) / g
    printf "  crawl, sampled every 512 KiB       %7.3f   %5.2fx  overhead %+6.0f%%\n", s, s / g, 100 * (s - g) / g
    printf "  the preload recording nothing      %7.3f   %5.2fx  overhead %+6.0f%%\n", p, p / g, 100 * (p - g) / g
    printf "  the same, GWP-ASan 1 in 5000       %7.3f   %5.2fx  overhead %+6.0f%%\n", a, a / g, 100 * (a - g) / g
    printf "  a bare forwarding interposer       %7.3f   %5.2fx  overhead %+6.0f%%   (the floor for any LD_PRELOAD)\n", fl, fl / g, 100 * (fl - g) / g
    printf "  192 call paths: glibc alone        %7.3f\n", gd
    printf "  192 call paths: crawl, every stack %7.3f   %5.2fx  overhead %+6.0f%%\n", cd, cd / gd, 100 * (cd - gd) / gd }'
