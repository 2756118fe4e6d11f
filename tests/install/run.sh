#!/bin/sh
# Install crawl into a scratch prefix, then build and run an outside
# consumer through find_package(crawl) and through pkg-config.
# usage: run.sh BUILD_DIR SOURCE_DIR
set -eu
build=$1 src=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cmake --install "$build" --prefix "$work/prefix" >/dev/null
cmake -S "$src/tests/install" -B "$work/cmake" -DCMAKE_PREFIX_PATH="$work/prefix" >/dev/null
cmake --build "$work/cmake" >/dev/null
LD_LIBRARY_PATH="$work/prefix/lib" "$work/cmake/consumer"
"$work/cmake/consumer_static"
pcdir=$(find "$work/prefix" -name crawl.pc -printf '%h\n')
# pkg-config has the prefix baked in; point it at the scratch prefix.
export PKG_CONFIG_PATH="$pcdir"
pc() { pkg-config --define-variable=prefix="$work/prefix" "$@" crawl; }
cc "$src/tests/install/consumer.c" -o "$work/consumer_pc" $(pc --cflags --libs)
cc "$src/tests/install/consumer.c" -o "$work/consumer_pc_static" $(pc --cflags) \
   "$work/prefix/lib/libcrawl.a" $(pc --static --libs-only-other --libs-only-l | sed 's/-lcrawl//')
"$work/consumer_pc_static"
LD_LIBRARY_PATH="$work/prefix/lib" "$work/consumer_pc"
test -f "$work/prefix/include/crawl/crawl.h"
test -f "$(find "$work/prefix" -name crawlConfig.cmake)"
echo "install: 1 passed, 0 failed"
