#!/bin/sh
# The gdb extension on crawlvm: live (crawl bt, the bt frame filter, crawl
# frames, crawl roots) and on a core file written at the same stop (crawl
# frames and crawl bt from memory), with crawlvm's frame reader
# (vm/crawlvm-gdb.py), so the script frames come from memory in both. Frames
# and script activations must come at their true places: after the native
# frame that holds them. Then the extension alone, live: the activations
# through a call of crawl_debug_frame_text, where gdb can call functions in
# the process, else one line that says it could not (gdb 13 on a CPU with
# AMX state fails every call), and likewise crawl roots.
# Then Frames it cannot read whole (tests/gdb/bad_frames.c), and crawl bt
# with no process.
# usage: run.sh CRAWLVM EXTENSION READER BAD_FRAMES
set -u
vm=$1 ext=$2 reader=$3 bad=$4
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
gdb -nx -batch -x "$ext" -x "$reader" -ex "break b_gc" -ex run \
    -ex "echo ==crawl bt\n" -ex "crawl bt" -ex "echo ==bt\n" -ex bt \
    -ex "echo ==crawl frames\n" -ex "crawl frames" -ex "echo ==crawl roots\n" -ex "crawl roots" \
    -ex "generate-core-file $work/core" --args "$vm" -e "$script" >"$work/live" 2>&1
check "live crawl bt" "$work/live" "==crawl bt" " in b_gc at " \
    "Frame 'crawlvm-interpreter' at 0x" "inner -e:1" "spin -e:1" "<toplevel> -e:1" \
    " in vm_interp_run at " " in main at " "==bt"
# (the script frames just before vm_interp_run, which runs them: frame #1
# when vm_call_native is inlined into it, #2 in a -O0 build)
check "live bt (frame filter)" "$work/live" "==bt" "#0  b_gc" \
    "    Frame 'crawlvm-interpreter'" "    inner -e:1" "    spin -e:1" " in vm_interp_run (" \
    "==crawl frames"
# and right before it: the line after the last script frame is vm_interp_run's
if ! awk '/^==bt/ { on = 1 } /^==crawl frames/ { on = 0 }
          on && prev ~ /^    <toplevel> -e:1/ { ok = index($0, " in vm_interp_run (") > 0 }
          on { prev = $0 } END { exit !ok }' "$work/live"; then
    echo "gdb-ext: live bt: the script frames are not right before vm_interp_run"
    cat "$work/live"; fail=1
fi
check "live crawl frames" "$work/live" "==crawl frames" "1 Frame(s)" \
    "#0 Frame 'crawlvm-interpreter' at 0x" "     in inner -e:1" "     in spin -e:1"
if [ -s "$work/core" ]; then
    gdb -nx -batch -x "$ext" -x "$reader" -ex "echo ==crawl frames\n" -ex "crawl frames" \
        -ex "echo ==crawl bt\n" -ex "crawl bt" -ex "echo ==bt\n" -ex bt \
        -ex "echo ==crawl roots\n" -ex "crawl roots" \
        "$vm" "$work/core" >"$work/core.out" 2>&1
    check "core crawl frames" "$work/core.out" "==crawl frames" "1 Frame(s) (from memory)" \
        "#0 Frame 'crawlvm-interpreter' at 0x" "     in inner -e:1" "     in spin -e:1" \
        "     in <toplevel> -e:1" "==crawl bt"
    check "core crawl bt" "$work/core.out" "==crawl bt" " in b_gc at " \
        "Frame 'crawlvm-interpreter' at 0x" "inner -e:1" "spin -e:1" "<toplevel> -e:1" \
        " in vm_interp_run at " " in main at " "==bt"
    check "core bt (frame filter)" "$work/core.out" "==bt" "#0  b_gc" \
        "    Frame 'crawlvm-interpreter'" "    inner -e:1" "    spin -e:1" " in vm_interp_run (" \
        "==crawl roots"
    check "core crawl roots" "$work/core.out" "==crawl roots" "needs a live process"
else
    echo "gdb-ext: gdb wrote no core file"; fail=1
fi
# Damaged and huge segments: a callinfo whose closure pointer is bad is one
# '?' line between its neighbours (it lost the whole segment's); a script
# stopped at its stack overflow shows its newest 10000 activations and a
# count of the rest (gdb printed a million lines, for 35 s); a reader that
# returns nonsense is one line, not a Python exception that stopped bt.
gdb -nx -batch -x "$ext" -x "$reader" -ex "break b_gc" -ex run \
    -ex "set var vm->ci[1].cl = (closure *)8" -ex "echo ==crawl frames\n" -ex "crawl frames" \
    -ex "echo ==bt\n" -ex bt --args "$vm" -e "$script" >"$work/damaged" 2>&1
check "damaged callinfo" "$work/damaged" "==crawl frames" "     in inner -e:1" \
    "     in ? (callinfo 1: Cannot access memory at address 0x10)" "     in <toplevel> -e:1" \
    "==bt" "    inner -e:1" "    ? (callinfo 1: " "    <toplevel> -e:1" " in vm_interp_run ("
gdb -nx -batch -x "$ext" -x "$reader" -ex "break vm_error" -ex run -ex "echo ==crawl frames\n" \
    -ex "crawl frames" --args "$vm" -e '(define (f n) (+ 1 (f n))) (f 1)' >"$work/deep" 2>&1
if [ "$(grep -c '^     in f -e:1$' "$work/deep")" -ne 10000 ] ||
    ! grep -q '^     in \.\.\. [0-9]* older activation(s)$' "$work/deep"; then
    echo "gdb-ext: stack overflow: not 10000 activations and a count"
    grep -v '^     in f -e:1$' "$work/deep"; fail=1
fi
printf 'import gdb\ngdb.crawl_frame_readers["crawlvm-interpreter"] = lambda addr: None\n' \
    >"$work/bad_reader.py"
gdb -nx -batch -x "$ext" -x "$work/bad_reader.py" -ex "break b_gc" -ex run \
    -ex "echo ==crawl frames\n" -ex "crawl frames" -ex "echo ==bt\n" -ex bt -ex "echo ==end\n" \
    --args "$vm" -e "$script" >"$work/bad" 2>&1
check "a reader that returns nonsense" "$work/bad" "==crawl frames" \
    "#0 Frame 'crawlvm-interpreter' at 0x" "==bt" " in vm_interp_run (" " in main (" "==end"
# (where gdb can call functions, the activations come through the call)
if grep -q "Python Exception" "$work/bad" ||
    ! grep -q -e "frame reader failed" -e "^     in inner -e:1" "$work/bad"; then
    echo "gdb-ext: a reader that returns nonsense"; cat "$work/bad"; fail=1
fi
# The extension alone, live: can gdb call functions in the process here?
gdb -nx -batch -x "$ext" -ex "break b_gc" -ex run -ex "echo ==call\n" \
    -ex "print (int)crawl_frame_count()" -ex "echo ==crawl frames\n" -ex "crawl frames" \
    -ex "echo ==crawl roots\n" -ex "crawl roots" -ex "echo ==end\n" \
    --args "$vm" -e "$script" >"$work/alone" 2>&1
if awk '/^==call/ { on = 1; next } on { exit !/^\$1 = 1$/ }' "$work/alone"; then
    check "extension alone, calls" "$work/alone" "==crawl frames" "1 Frame(s)" \
        "#0 Frame 'crawlvm-interpreter' at 0x" "     in inner -e:1" "     in spin -e:1" \
        "==crawl roots" "crawlvm-interpreter" "==end"
else
    echo "gdb-ext: note: gdb cannot call functions in this process here:" \
        "$(sed -n '/^==call/{n;p;q}' "$work/alone")"
    # (the warning goes to stderr: its place among stdout's lines may vary)
    check "extension alone, no calls" "$work/alone" "==crawl frames" "1 Frame(s)" \
        "#0 Frame 'crawlvm-interpreter' at 0x" "==crawl roots" \
        "crawl roots: gdb could not call crawl_gc_census() in this process: " "==end"
    check "extension alone, the calls' failure said" "$work/alone" \
        "crawl: gdb could not call crawl_debug_frame_text() in this process ("
    if grep -q "^     in " "$work/alone"; then
        echo "gdb-ext: activations without a reader or a call"; cat "$work/alone"; fail=1
    fi
fi
# Stopped inside a qsort comparator: the same order as crawlvm's own
# --native traceback (script frames between qsort's and libffi's C frames).
examples=$(dirname "$ext")/../examples
"$vm" --native "$examples/qsort.crawl" >"$work/native" 2>&1
gdb -nx -batch -x "$ext" -x "$reader" -ex "break b_backtrace" -ex run -ex "echo ==crawl bt\n" -ex "crawl bt" \
    -ex "echo ==bt\n" -ex bt -ex "generate-core-file $work/core2" \
    --args "$vm" "$examples/qsort.crawl" >"$work/qsort" 2>&1
check "--native traceback" "$work/native" "compare at " "[C] vm_interp_run" "[C] callback_handler" \
    "[C] closure_entry" "[C] qsort_r" "[C] crawl_ffi_call" "[C] vm_call_ffi" "sort-numbers at " \
    "<toplevel> at " "[C] vm_eval" "[C] main"
check "crawl bt in qsort" "$work/qsort" "==crawl bt" " in b_backtrace at " "compare " \
    " in vm_interp_run at " " in callback_handler at " " in closure_entry at " "qsort_r" \
    " in crawl_ffi_call at " " in vm_call_ffi at " "sort-numbers " "<toplevel> " \
    " in vm_interp_run at " " in vm_eval at " " in main at " "==bt"
check "bt in qsort" "$work/qsort" "==bt" "b_backtrace" "    compare " " vm_interp_run " \
    " callback_handler " "qsort_r" " vm_call_ffi " "    sort-numbers " "    <toplevel> " \
    " vm_interp_run " " main "
if [ -s "$work/core2" ]; then
    gdb -nx -batch -x "$ext" -x "$reader" -ex "echo ==crawl bt\n" -ex "crawl bt" "$vm" "$work/core2" \
        >"$work/core2.out" 2>&1
    check "crawl bt in qsort, core" "$work/core2.out" "==crawl bt" " in b_backtrace at " \
        "Frame 'crawlvm-interpreter'" "compare " " in vm_interp_run at " " in callback_handler at " \
        "qsort_r" " in crawl_ffi_call at " "Frame 'crawlvm-interpreter'" "sort-numbers " \
        "<toplevel> " " in vm_interp_run at " " in main at "
fi
# A type name that is not UTF-8: a line for the Frame, no Python exception
# (UnicodeDecodeError; bt then showed no Frame at all)
gdb -nx -batch -x "$ext" -ex run -ex "echo ==crawl frames\n" -ex "crawl frames" -ex "echo ==bt\n" \
    -ex bt --args "$bad" utf8 >"$work/utf8" 2>&1
check "a type name not UTF-8" "$work/utf8" "==crawl frames" " bad' at 0x" "==bt" " bad' at 0x" " in main "
if grep -q "Python Exception" "$work/utf8"; then
    echo "gdb-ext: a type name not UTF-8 raised:"; cat "$work/utf8"; fail=1
fi
# A Frame whose type cannot be read: nothing is called in the process (a
# call into its hooks left the process stopped inside the call when they
# faulted), so it is still where it stopped
gdb -nx -batch -x "$ext" -ex run -ex "crawl frames" -ex "crawl bt" -ex bt -ex "echo ==bt 1\n" \
    -ex "bt 1" --args "$bad" unreadable >"$work/unreadable" 2>&1
check "an unreadable Frame" "$work/unreadable" "Frame '<unreadable>' at 0x" "==bt 1" "#0 "
if sed -n '/==bt 1/,$p' "$work/unreadable" | grep -Eq "called from gdb|crawl_debug_frame_text" ||
   grep -q "Python Exception" "$work/unreadable"; then
    echo "gdb-ext: an unreadable Frame:"; cat "$work/unreadable"; fail=1
fi
# crawl bt with no process: one line (it raised 'No registers.')
gdb -nx -batch -x "$ext" -ex "crawl bt" "$bad" >"$work/noproc" 2>&1
check "crawl bt with no process" "$work/noproc" "crawl bt: no stack here"
if grep -q "Python Exception" "$work/noproc"; then
    echo "gdb-ext: crawl bt with no process raised:"; cat "$work/noproc"; fail=1
fi
if [ $fail -ne 0 ]; then
    echo "gdb-ext: 0 passed, 1 failed"
    exit 1
fi
echo "gdb-ext: live and core: 1 passed, 0 failed"
