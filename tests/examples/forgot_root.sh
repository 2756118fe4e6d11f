#!/bin/sh
# examples/forgot_root finds both planted bugs, as the README shows:
# usage: forgot_root.sh PROGRAM
set -eu
out=$("$1" 2>&1)
fail=0
want() {
    if ! printf '%s\n' "$out" | grep -Eq -- "$1"; then
        echo "forgot_root: missing: $1"
        fail=1
    fi
}
want "^  #0 Frame 'script' 0x[0-9a-f]+ \(main script.vm:1\) in main .*forgot_root.c:[0-9]+: slot"
want "^why is 0x[0-9a-f]+ alive: no root reaches it"
want "^==[0-9]+==ERROR: AddressSanitizer: use-after-collect on address"
want "^    #0 in use-cache script.vm:9$"
want "^collected by collection #[0-9]+, which thread T0 started here:$"
want "^    #[0-9]+ 0x[0-9a-f]+ in crawl_gc_verify "
want "^    #1 in remember script.vm$"
want "^==[0-9]+==ERROR: crawl-boehm: unreported-reference: "
want "in the frame of native_helper .*forgot_root.c:[0-9]+$"
want "^  between script frames: callback script.vm:14 \(newer\) and main script.vm:1 \(older\)$"
want "^2 reports$"
if [ "$fail" -ne 0 ]; then
    printf '%s\n' "$out"
    echo "forgot_root: 0 passed, 1 failed"
    exit 1
fi
echo "forgot_root: 1 passed, 0 failed"
