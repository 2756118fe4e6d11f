#!/bin/sh
# bench/vm: crawlvm with crawl's bookkeeping on and compiled out, and Lua 5.4,
# on a call-heavy, an allocation-heavy and a callback-heavy program, in one
# run; then root enumeration cost. Each round runs the three commands one
# after the other (so drift hits them alike); figures are medians of the
# rounds' wall times, process start included (the same for all).
# With --instructions, also count the instructions each crawlvm build runs
# (valgrind's callgrind: exact and repeatable, unlike wall time, which code
# layout alone can move by several percent).
# usage: bench/vm/run.sh [--instructions] [BUILD_DIR] [ROUNDS]   (build/dev, 15)
set -eu
count=0
[ "${1:-}" = "--instructions" ] && { count=1; shift; }
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-$here/../../build/dev}
rounds=${2:-15}
crawlvm=$build/bench/crawlvm_frames
noframes=$build/bench/crawlvm_noframes
lua=$(command -v lua5.4 || true)
[ -x "$crawlvm" ] && [ -x "$noframes" ] || {
    echo "build first: cmake --build build/dev --target crawlvm_frames crawlvm_noframes bench_vm_roots" >&2
    exit 2
}
[ -n "$lua" ] || echo "note: lua5.4 not found (apt-get install lua5.4); its column is left empty" >&2
pin=""
command -v taskset >/dev/null && pin="taskset -c 1"

ms() {   # wall time of one run of "$@", in microseconds
    t0=$(date +%s%N)
    $pin "$@" >/dev/null
    t1=$(date +%s%N)
    echo $(( (t1 - t0) / 1000 ))
}

median() { sort -n | awk '{a[NR]=$1} END {printf "%.1f", a[int((NR+1)/2)]/1000}'; }

export DEBUGINFOD_URLS=
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
printf "%-10s %12s %14s %10s %10s %9s\n" program "crawlvm ms" "no Frames ms" "overhead" "lua ms" "vs lua"
for prog in fib alloc callback; do
    for _ in $(seq "$rounds"); do
        ms "$crawlvm" "$here/$prog.crawl" >>"$tmp/on"
        ms "$noframes" "$here/$prog.crawl" >>"$tmp/off"
        [ -z "$lua" ] || ms "$lua" "$here/$prog.lua" >>"$tmp/lua"
    done
    on=$(median <"$tmp/on")
    off=$(median <"$tmp/off")
    l=""
    [ -z "$lua" ] || l=$(median <"$tmp/lua")
    rm -f "$tmp/on" "$tmp/off" "$tmp/lua"
    awk -v p="$prog" -v on="$on" -v off="$off" -v l="$l" 'BEGIN {
        printf "%-10s %12.1f %14.1f %9.1f%% %10s %9s\n", p, on, off, (on - off) / off * 100,
               l == "" ? "-" : sprintf("%.1f", l), l == "" ? "-" : sprintf("%.2fx", on / l) }'
done
echo
$pin "$build/bench/bench_vm_roots"

if [ "$count" = 1 ]; then
    command -v valgrind >/dev/null || { echo "valgrind not found" >&2; exit 2; }
    irefs() {
        valgrind --tool=callgrind --callgrind-out-file=/dev/null "$@" 2>&1 >/dev/null |
            awk '/refs:/ {gsub(",", "", $NF); print $NF}'
    }
    echo
    printf "%-10s %16s %16s %10s\n" program "crawlvm instr" "no Frames instr" "overhead"
    for prog in fib alloc callback; do
        on=$(irefs "$crawlvm" "$here/$prog.crawl")
        off=$(irefs "$noframes" "$here/$prog.crawl")
        awk -v p="$prog" -v on="$on" -v off="$off" 'BEGIN {
            printf "%-10s %16.0f %16.0f %9.2f%%\n", p, on, off, (on - off) / off * 100 }'
    done
fi
