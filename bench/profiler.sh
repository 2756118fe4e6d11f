#!/bin/sh
# bench/profiler: crawlvm running bench/profiler/fib.crawl and qsort.crawl
# with the profiler off, at 100 Hz and at 1 kHz, alternating, ROUNDS rounds
# on one core; medians of the script's own time (CRAWLVM_TIME: the profile
# is written after it, symbolizing once) and the overhead of each rate. Then
# the top 3 C functions by self samples, crawl's (the newest native frame of
# each sample) against perf record's on a run of the same script, when perf
# can record here, and the samples that came back without a stack.
# usage: bench/profiler.sh [BUILD_DIR] [ROUNDS]   (build/dev, 7)
set -eu
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-$here/../build/dev}
rounds=${2:-7}
vm=$build/crawlvm
. "$here/common.sh"
for script in "$here/profiler/fib.crawl" "$here/profiler/qsort.crawl"; do
    name=$(basename "$script" .crawl)
    : >"$tmp/off"; : >"$tmp/100"; : >"$tmp/1000"
    for r in $(seq 1 "$rounds"); do
        CRAWLVM_TIME=1 $pin "$vm" "$script" 2>&1 >/dev/null | awk '/script ran/ { print $4 }' >>"$tmp/off"
        CRAWLVM_TIME=1 $pin "$vm" --profile "$tmp/p100.folded" --profile-hz 100 "$script" \
            2>"$tmp/err100" >/dev/null
        awk '/script ran/ { print $4 }' "$tmp/err100" >>"$tmp/100"
        CRAWLVM_TIME=1 $pin "$vm" --profile "$tmp/p1000.folded" "$script" 2>"$tmp/err1000" >/dev/null
        awk '/script ran/ { print $4 }' "$tmp/err1000" >>"$tmp/1000"
    done
    mid=$(( (rounds + 1) / 2 ))
    off=$(sort -n "$tmp/off" | sed -n "${mid}p")
    h=$(sort -n "$tmp/100" | sed -n "${mid}p")
    k=$(sort -n "$tmp/1000" | sed -n "${mid}p")
    echo "bench/profiler: $name, seconds (median of $rounds, one core)"
    awk -v o="$off" -v h="$h" -v k="$k" 'BEGIN {
        printf "  profiler off   %7.3f\n", o
        printf "  100 Hz         %7.3f   overhead %+5.1f%%\n", h, 100 * (h - o) / o
        printf "  1 kHz          %7.3f   overhead %+5.1f%%\n", k, 100 * (k - o) / o }'
    grep -v 'script ran' "$tmp/err1000" | sed 's/^crawlvm: /  /' 
    # crawl's top C functions by self samples: each sample's newest native frame
    awk '{ n = $NF; $NF = ""; c = split($0, f, ";"); leaf = ""
           for (i = c; i >= 1; i--) { g = f[i]; gsub(/ +$/, "", g)
               if (g != "" && g !~ /\.crawl:[0-9]+$/ && g !~ / -e:[0-9]+$/) { leaf = g; break } }
           self[leaf] += n }
         END { for (l in self) print self[l], l }' "$tmp/p1000.folded" | sort -rn | head -3 >"$tmp/crawl.top"
    echo "  crawl's top 3 C functions (self samples):"; sed 's/^/    /' "$tmp/crawl.top"
    # script functions and their share
    awk '{ n = $NF; t += n; if (index($0, ".crawl:")) s += n }
         END { if (t) printf "  samples with a script frame: %d of %d\n", s, t }' "$tmp/p1000.folded"
    if command -v perf >/dev/null &&
       $pin perf record -q -F 1000 -o "$tmp/perf.data" "$vm" "$script" >/dev/null 2>&1; then
        perf report -q -i "$tmp/perf.data" --stdio --sort symbol 2>/dev/null |
            awk 'NF >= 3 { s = $0; sub(/^ *[0-9.]+% +\[[.k]\] +/, "", s); print $1, s }' | head -3 >"$tmp/perf.top"
        echo "  perf record's top 3 (self):"; sed 's/^/    /' "$tmp/perf.top"
    else
        echo "  perf record: not available here"
    fi
done
