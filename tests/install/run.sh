#!/bin/sh
# Install crawl into a scratch prefix the build was not configured for,
# then use it as an outside user would: build consumers through
# find_package(crawl) and through pkg-config (shared and static, core and
# glue libraries), run them and the installed crawlvm with no
# LD_LIBRARY_PATH (RUNPATH must find the libraries), and check that the
# .pc files follow the tree when it is moved.
# usage: run.sh BUILD_DIR SOURCE_DIR
set -eu
build=$1 src=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
unset LD_LIBRARY_PATH
fail() { echo "install: $*"; echo "install: 0 passed, 1 failed"; exit 1; }

cmake --install "$build" --prefix "$work/prefix" >/dev/null
P=$work/prefix
test -f "$P/include/crawl/crawl.h" || fail "no crawl.h"
test -f "$P/include/crawl/boehm.h" || fail "no boehm.h"
test -f "$P/share/doc/crawl/README.md" || fail "no README.md in share/doc/crawl"
test -f "$(find "$P" -name crawlConfig.cmake)" || fail "no crawlConfig.cmake"
# gdb's auto-load script, under the real directory of the installed library
# (it went under the configure-time libdir, where gdb never looked)
so=$(find "$P" -name 'libcrawl.so.0.*' ! -name '*-gdb.py' | head -n 1)
lib=$(dirname "$so")
test -f "$P/share/gdb/auto-load$lib/$(basename "$so")-gdb.py" ||
    fail "no gdb auto-load script at share/gdb/auto-load$lib: $(find "$P/share/gdb" -name '*-gdb.py')"

# the installed command runs on its own
printf '(print (+ 1 2))\n' >"$work/t.crawl"
out=$("$P/bin/crawlvm" "$work/t.crawl") || fail "installed crawlvm does not run"
[ "$out" = 3 ] || fail "installed crawlvm printed '$out'"

# CMake consumers
cmake -S "$src/tests/install" -B "$work/cmake" -DCMAKE_PREFIX_PATH="$P" \
      -DCMAKE_BUILD_RPATH="$(dirname "$(find "$P" -name libcrawl.so)")" >/dev/null
cmake --build "$work/cmake" >/dev/null
for c in consumer consumer_static consumer_glue consumer_glue_static; do
    "$work/cmake/$c" >/dev/null || fail "$c (CMake) failed"
done
ldd "$work/cmake/consumer_glue_static" | grep -q 'libcrawl' && fail "consumer_glue_static links a shared libcrawl"

# pkg-config consumers, after moving the whole tree: the .pc files must
# find it from where they are.
mv "$P" "$work/moved"
P=$work/moved
pcdir=$(find "$P" -name crawl.pc -printf '%h\n')
export PKG_CONFIG_PATH="$pcdir"
libdir=$(pkg-config --variable=libdir crawl)
[ "$libdir" -ef "$(dirname "$(find "$P" -name libcrawl.so)")" ] || fail "crawl.pc libdir is $libdir"
cc -Werror=implicit-function-declaration "$src/tests/install/consumer.c" -o "$work/pc" $(pkg-config --cflags --libs crawl) \
   -Wl,-rpath,"$libdir" || fail "pkg-config crawl: no build"
"$work/pc" >/dev/null || fail "pkg-config consumer failed"
cc -static-libgcc "$src/tests/install/consumer.c" -o "$work/pc_static" $(pkg-config --cflags crawl) \
   "$libdir/libcrawl.a" $(pkg-config --static --libs-only-other --libs-only-l crawl | sed 's/-lcrawl//') \
   || fail "static link against libcrawl.a"
"$work/pc_static" >/dev/null || fail "static pkg-config consumer failed"
cc "$src/tests/install/consumer_glue.c" -o "$work/pc_glue" \
   $(pkg-config --cflags --libs crawl-boehm crawl-ffi) -Wl,-rpath,"$libdir" || fail "pkg-config glue: no build"
"$work/pc_glue" >/dev/null || fail "pkg-config glue consumer failed"
# the GC roots contract's adapter through crawl/gcroots.h alone, where that
# contract declared it (crawl/boehm.h has it too)
printf '#include <crawl/gcroots.h>\n#include <gc/gc.h>\nint main(void)\n{\n    GC_INIT();\n    crawl_boehm_install();\n    GC_gcollect();\n    return 0;\n}\n' >"$work/roots_only.c"
cc -Werror=implicit-function-declaration "$work/roots_only.c" -o "$work/roots_only" \
   $(pkg-config --cflags --libs crawl-boehm) -Wl,-rpath,"$libdir" || fail "crawl_boehm_install through crawl/gcroots.h: no build"
"$work/roots_only" || fail "crawl_boehm_install through crawl/gcroots.h failed"
"$P/bin/crawlvm" "$work/t.crawl" >/dev/null || fail "moved crawlvm does not run"

# the README's "Embedding crawl" example, as a reader copies it: it builds
# with no warning (it lacked <stdio.h>) and prints the script frame in its
# place: after the transition Frame, before vm_call_native
awk '/^## Embedding crawl/ { on = 1 } on && /^```c$/ { inside = 1; next }
     inside && /^```$/ { exit } inside' "$src/README.md" >"$work/embed.c"
[ -s "$work/embed.c" ] || fail "no C block under the README's 'Embedding crawl'"
printf 'int main(void)\n{\n    vm_call_native(anywhere);\n    return 0;\n}\n' >>"$work/embed.c"
cc -Wall -Werror -O2 "$work/embed.c" -o "$work/embed" $(pkg-config --cflags --libs crawl) \
   -Wl,-rpath,"$libdir" 2>"$work/embed.err" || { cat "$work/embed.err"; fail "the README's example does not build"; }
"$work/embed" >"$work/embed.out" || fail "the README's example failed"
awk '/ in \[transition Frame: VM -> native/ { t = NR } / in main demo.script:3$/ { m = NR }
     / in vm_call_native / { v = NR } END { exit !(t && m && v && t < m && m < v) }' "$work/embed.out" ||
    { cat "$work/embed.out"; fail "the README's example prints its frames out of order"; }
echo "install: 1 passed, 0 failed"
