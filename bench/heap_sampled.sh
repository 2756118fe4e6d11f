#!/bin/sh
# bench/heap_sampled: the sampled heap profile's overhead alone, in rounds
# enough for its median to hold still on a noisy machine (this one's runs
# move by several percent from one to the next, more than the row
# measures): ROUNDS (400) rounds of bench_heap_work (10M malloc/free pairs
# unless told), each glibc alone, then crawl's preload sampling every
# 512 KiB and the bare forwarding interposer (bench/interpose_floor.c, the
# least any LD_PRELOAD of malloc costs) in turn, every run pinned to one
# core. Prints, for each, the median of the rounds' ratios to their own
# glibc run, the quartiles, and the median's 95% interval (the order
# statistics of ranks n/2 - 0.98 sqrt(n) and n + 1 less that,
# distribution-free; none below 6 rounds). About 10 minutes for 400
# rounds here.
# usage: bench/heap_sampled.sh [BUILD_DIR] [ROUNDS (400)] [PAIRS (10000000)]
set -eu
build=${1:-$(dirname "$0")/../build/dev}
rounds=${2:-400}
iters=${3:-10000000}
case $rounds in ''|*[!0-9]*|0) echo "bench/heap_sampled: ROUNDS must be a positive integer, not '$rounds'" >&2; exit 2 ;; esac
case $iters in ''|*[!0-9]*|0) echo "bench/heap_sampled: PAIRS must be a positive integer, not '$iters'" >&2; exit 2 ;; esac
work=$build/bench/bench_heap_work
pre=$build/libcrawl-preload.so
floor=$build/bench/libbench_interpose_floor.so
for f in "$work" "$pre" "$floor"; do
    [ -e "$f" ] || { echo "bench/heap_sampled: $f is missing: build $build first" >&2; exit 2; }
done
. "$(dirname "$0")/common.sh"
for round in $(seq "$rounds"); do
    run glibc $pin "$work" "$iters"
    if [ $((round % 2)) -eq 0 ]; then   # (each order in half the rounds)
        CRAWL_OPTIONS=heap_profile=1:heap_sample_bytes=524288:gpa_sample_rate=0 LD_PRELOAD=$pre \
            run sampled $pin "$work" "$iters"
        LD_PRELOAD=$floor run floor $pin "$work" "$iters"
    else
        LD_PRELOAD=$floor run floor $pin "$work" "$iters"
        CRAWL_OPTIONS=heap_profile=1:heap_sample_bytes=524288:gpa_sample_rate=0 LD_PRELOAD=$pre \
            run sampled $pin "$work" "$iters"
    fi
done
# label: its rounds' ratios to glibc's, sorted, summarised
summary() {
    paste "$tmp/glibc" "$tmp/$1" | awk '{ printf "%.6f\n", $2 / $1 }' | sort -n | awk -v name="$2" '
        { v[NR] = $1 }
        END {
            n = NR
            med = n % 2 ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2
            # (ranks lo and n + 1 - lo, symmetric about the median; below 6
            # rounds no pair of them covers 95%)
            lo = int(n / 2 - 0.98 * sqrt(n)); if (lo < 1) lo = 1
            hi = n + 1 - lo
            if (n < 6)
                ci = "too few rounds for a 95% interval of the median"
            else
                ci = sprintf("median in %+.2f%% .. %+.2f%%, 95%%", 100 * (v[lo] - 1), 100 * (v[hi] - 1))
            printf "  %-30s overhead %+6.2f%%   (quartiles %+.1f%% .. %+.1f%%; %s)\n",
                name, 100 * (med - 1), 100 * (v[int((n + 3) / 4)] - 1), 100 * (v[int((3 * n + 3) / 4)] - 1), ci
        }'
}
glibc_med=$(median <"$tmp/glibc")
echo "bench/heap_sampled: $iters malloc/free pairs, $rounds paired rounds, pinned; glibc alone $glibc_med s (median)"
summary sampled "crawl, sampled every 512 KiB"
summary floor "a bare forwarding interposer"
