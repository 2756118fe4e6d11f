#!/bin/sh
# The gdb extension on crawlvm: live (crawl bt, the bt frame filter, crawl
# frames, crawl roots) and on a core file written at the same stop (crawl
# frames and crawl bt from memory). Frames and script activations must come
# at their true places: after the native frame that holds them.
# usage: run.sh CRAWLVM EXTENSION
set -u
vm=$1 ext=$2
if ! command -v gdb >/dev/null; then
    echo "gdb-ext: note: gdb absent, not tried (apt-get install gdb): 1 passed, 0 failed"
    exit 0
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail=0
in_order() {   # file, patterns... (each on a later line than the one before)
    file=$1; shift
    awk -v n="$#" 'BEGIN { for (i = 1; i <= n; i++) want[i] = ARGV[i + 1]; ARGC = 2; k = 1 }
        k <= n && index($0, want[k]) { k++ }
        END { if (k <= n) { print "missing, in order: " want[k]; exit 1 } }' "$file" "$@"
}
check() {   # name, file, patterns...
    name=$1; file=$2; shift 2
    if ! in_order "$file" "$@"; then
        echo "gdb-ext: $name"; cat "$file"; fail=1
    fi
}
script='(define (inner) (gc)) (define (spin) (inner)) (spin)'
gdb -nx -batch -x "$ext" -ex "break b_gc" -ex run \
    -ex "echo ==crawl bt\n" -ex "crawl bt" -ex "echo ==bt\n" -ex bt \
    -ex "echo ==crawl frames\n" -ex "crawl frames" -ex "echo ==crawl roots\n" -ex "crawl roots" \
    -ex "generate-core-file $work/core" --args "$vm" -e "$script" >"$work/live" 2>&1
check "live crawl bt" "$work/live" "==crawl bt" " in b_gc at " " in vm_interp_run at " \
    "Frame 'crawlvm-interpreter' at 0x" "inner -e:1" "spin -e:1" "<toplevel> -e:1" \
    " in vm_call at " " in main at " "==bt"
check "live bt (frame filter)" "$work/live" "==bt" "#0  b_gc" "#1  0x" \
    "    Frame 'crawlvm-interpreter'" "    inner -e:1" "    spin -e:1" "#2  0x" "==crawl frames"
check "live crawl frames" "$work/live" "==crawl frames" "1 Frame(s)" \
    "#0 Frame 'crawlvm-interpreter' at 0x" "     in inner -e:1" "     in spin -e:1"
check "live crawl roots" "$work/live" "==crawl roots" "crawlvm-interpreter"
if [ -s "$work/core" ]; then
    gdb -nx -batch -x "$ext" -ex "echo ==crawl frames\n" -ex "crawl frames" \
        -ex "echo ==crawl bt\n" -ex "crawl bt" -ex "echo ==crawl roots\n" -ex "crawl roots" \
        "$vm" "$work/core" >"$work/core.out" 2>&1
    check "core crawl frames" "$work/core.out" "==crawl frames" "1 Frame(s) (from memory" \
        "#0 Frame 'crawlvm-interpreter' at 0x"
    check "core crawl bt" "$work/core.out" "==crawl bt" " in b_gc at " " in vm_interp_run at " \
        "Frame 'crawlvm-interpreter' at 0x" " in vm_call at " " in main at "
    check "core crawl roots" "$work/core.out" "==crawl roots" "needs a live process"
else
    echo "gdb-ext: gdb wrote no core file"; fail=1
fi
if [ $fail -ne 0 ]; then
    echo "gdb-ext: 0 passed, 1 failed"
    exit 1
fi
echo "gdb-ext: live and core: 1 passed, 0 failed"
