#!/bin/sh
# bench/gpa_programs: the guarded pool on real malloc-heavy programs, whole
# process through libcrawl-preload.so, at GWP-ASan's default rate (1 in
# 5000): python3 building and sorting a million small objects, and
# sort(1) on 2,000,000 lines. Each program runs glibc alone, under the
# preload with sampling off (the price of interposing malloc at all), and
# at the default rate -- alternating, 7 rounds, one core; medians of wall
# time and the overhead over glibc. GWP-ASan's promise is within 2%.
# usage: bench/gpa_programs.sh [BUILD_DIR]
set -eu
build=${1:-$(dirname "$0")/../build/dev}
pre=$build/libcrawl-preload.so
. "$(dirname "$0")/common.sh"
seq 1 2000000 | awk '{ printf "%08d line %d\n", ($1 * 7919) % 2000003, $1 }' >"$tmp/lines"
cat >"$tmp/work.py" <<'PY'
import json
rows = [{"id": i, "name": "n%06d" % ((i * 7919) % 1000003), "tags": [str(i % 7), str(i % 11)]}
        for i in range(1000000)]
rows.sort(key=lambda r: r["name"])
print(len(json.dumps(rows[:20000])))
PY
now() { date +%s.%N; }
time_it() {   # label, command...
    label=$1; shift
    t0=$(now)
    "$@" >/dev/null 2>"$tmp/err" || { echo "bench: $label failed" >&2; cat "$tmp/err" >&2; exit 1; }
    t1=$(now)
    refused "$label" "$tmp/err"
    awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.4f\n", b - a }' >>"$tmp/$label"
}
rounds=7
for round in $(seq 1 $rounds); do
    for prog in python sort; do
        case $prog in
        python) set -- /usr/bin/python3 "$tmp/work.py" ;;
        sort) set -- sort "$tmp/lines" ;;
        esac
        time_it "$prog.glibc" $pin "$@"
        CRAWL_OPTIONS=gpa_sample_rate=0 LD_PRELOAD=$pre time_it "$prog.off" $pin "$@"
        LD_PRELOAD=$pre time_it "$prog.default" $pin "$@"
    done
done
med() { sort -n "$tmp/$1" | sed -n "$(((rounds + 1) / 2))p"; }
echo "bench/gpa_programs: seconds, median of $rounds, one core"
for prog in python sort; do
    awk -v name="$prog" -v g="$(med $prog.glibc)" -v o="$(med $prog.off)" -v d="$(med $prog.default)" 'BEGIN {
        printf "  %-7s glibc %7.3f   preload, sampling off %7.3f (%+5.1f%%)   default rate %7.3f (%+5.1f%%)\n",
               name, g, o, 100 * (o - g) / g, d, 100 * (d - g) / g }'
done
