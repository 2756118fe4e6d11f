#!/bin/sh
# libcrawl-preload.so on real programs: with every allocation sampled they
# run to completion with the same output and no report; a buggy program is
# caught, with its three stacks, on every run; so is its C++ twin, whose
# stacks start at operator new[] and operator delete[] and read demangled.
# usage: run.sh PRELOAD_LIB BUGGY_PROGRAM BUGGY_CXX_PROGRAM
set -u
lib=$1 buggy=$2 buggy_cxx=$3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail=0 passed=0
seq 1 100000 | awk '{ print ($1 * 7919) % 100003 }' >"$work/nums"
run_same() {   # name, command...
    name=$1; shift
    "$@" >"$work/plain" 2>&1
    CRAWL_OPTIONS=gpa_sample_rate=1 LD_PRELOAD=$lib "$@" >"$work/sampled" 2>"$work/err"
    rc=$?
    if [ $rc -ne 0 ] || ! cmp -s "$work/plain" "$work/sampled" || grep -q 'GWP-ASan' "$work/err"; then
        echo "preload: $name differs under the preload (rc $rc)"; head -20 "$work/err"; fail=1
    else
        passed=$((passed + 1))
    fi
}
run_same sort sort -n "$work/nums"
run_same gzip gzip -c "$work/nums"
if [ -x /usr/bin/python3 ]; then
    run_same python3 /usr/bin/python3 -c 'import json, email.parser, http.client, decimal, collections
print(sum(json.loads(json.dumps(list(range(1000))))))'
else
    echo "preload: note: /usr/bin/python3 absent, not tried"
fi
if command -v lua5.4 >/dev/null; then
    cat >"$work/words.lua" <<'LUA'
-- strings, tables, closures and a sort: the allocator's everyday traffic
local words, count = {}, {}
for i = 1, 20000 do
    local w = string.format("w%05d", (i * 7919) % 5003)
    words[#words + 1] = w
    count[w] = (count[w] or 0) + 1
end
table.sort(words, function(a, b) return a > b end)
local keys = {}
for k in pairs(count) do keys[#keys + 1] = k end
print(#words, #keys, words[1], table.concat(words, ","):len())
LUA
    run_same lua5.4 lua5.4 "$work/words.lua"
else
    echo "preload: note: lua5.4 absent, not tried (apt-get install lua5.4)"
fi
for i in 1 2 3; do
    CRAWL_OPTIONS=gpa_sample_rate=1:gpa_max_allocations=4096 LD_PRELOAD=$lib "$buggy" >/dev/null 2>"$work/err"
    rc=$?
    if [ $rc -ne 139 ] || ! grep -q '^Use After Free at ' "$work/err" ||
       ! grep -q 'in use .*buggy.c' "$work/err" || ! grep -q 'in drop .*buggy.c' "$work/err" ||
       ! grep -q 'in make_name .*buggy.c' "$work/err" ||
       ! grep -A2 '^Use After Free at ' "$work/err" | grep -q '#1 .* in main .*buggy.c' ||
       ! grep -A2 'was allocated by' "$work/err" | grep -q '#0 .* in malloc ' ||
       ! grep -A2 'was allocated by' "$work/err" | grep -q '#1 .* in make_name ' ||
       ! grep -A2 'was deallocated by' "$work/err" | grep -q '#0 .* in free ' ||
       ! grep -A2 'was deallocated by' "$work/err" | grep -q '#1 .* in drop '; then
        echo "preload: the buggy program was not caught on run $i (rc $rc)"; cat "$work/err"; fail=1
    else
        passed=$((passed + 1))
    fi
done
# stderr closed (and descriptor 2 taken by a read-only file) before the
# error: the report reaches the stderr the program started with (it was
# lost: only the heap profile kept a copy of stderr)
CRAWL_OPTIONS=gpa_sample_rate=1:gpa_max_allocations=4096 LD_PRELOAD=$lib "$buggy" closed \
    >/dev/null 2>"$work/err"
rc=$?
if [ $rc -eq 139 ] && grep -q '^Use After Free at ' "$work/err"; then
    passed=$((passed + 1))
else
    echo "preload: the report with stderr closed was lost (rc $rc)"; cat "$work/err"; fail=1
fi
CRAWL_OPTIONS=gpa_sample_rate=1:gpa_max_allocations=4096 LD_PRELOAD=$lib "$buggy_cxx" >/dev/null 2>"$work/err"
rc=$?
if [ $rc -ne 139 ] ||
   ! grep -A1 '^Use After Free at ' "$work/err" | grep -q '#0 .* in use_table(int const\*) .*buggy_cxx.cpp' ||
   ! grep -A1 'was deallocated by' "$work/err" | grep -q '#0 .* in operator delete\[\](void\*) ' ||
   ! grep -A2 'was deallocated by' "$work/err" | grep -q '#1 .* in drop_table(int\*) ' ||
   ! grep -A1 'was allocated by' "$work/err" | grep -q '#0 .* in operator new\[\](unsigned long) ' ||
   ! grep -A2 'was allocated by' "$work/err" | grep -q '#1 .* in make_table() '; then
    echo "preload: the buggy C++ program was not caught as expected (rc $rc)"; cat "$work/err"; fail=1
else
    passed=$((passed + 1))
fi
if [ $fail -ne 0 ]; then
    echo "preload: 0 passed, 1 failed"
    exit 1
fi
echo "preload: $passed runs as expected (4 real programs, the buggy one 3 times, its C++ twin): 1 passed, 0 failed"
