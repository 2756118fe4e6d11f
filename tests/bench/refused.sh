#!/bin/sh
# bench/common.sh's run: a run whose CRAWL_OPTIONS crawl refused (it then
# goes on with its defaults) ends the bench with a message, where it used
# to be timed as what it had asked for; a run with good options is timed.
# usage: refused.sh BENCH_DIR PRELOAD
set -u
bench=$1 pre=$2
pass=0 fail=0
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "refused: FAIL: $*"; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
# (each in a subshell: run exits; common.sh makes and removes its own $tmp)
(. "$bench/common.sh"
 CRAWL_OPTIONS=heap_profile=1:heap_sample_bytes=1073741824 LD_PRELOAD=$pre run sampled sh -c 'echo 0.5'
 echo "not reached") >"$out/o" 2>"$out/e"
rc=$?
[ $rc -eq 1 ] && ok || bad "a refused option: exit $rc, not 1"
grep -q "^bench: sampled: crawl refused its options" "$out/e" && ok || bad "no message: $(cat "$out/e")"
grep -q "heap_sample_bytes=1073741824' in sanitizer options (takes 0 .. 1000000000)" "$out/e" && ok \
    || bad "crawl's own line not shown: $(cat "$out/e")"
grep -q "not reached" "$out/o" && bad "the bench went on" || ok
(. "$bench/common.sh"
 CRAWL_OPTIONS=heap_profile=1:heap_sample_bytes=524288 LD_PRELOAD=$pre run sampled sh -c 'echo 0.5'
 cat "$tmp/sampled") >"$out/o" 2>"$out/e"
rc=$?
[ $rc -eq 0 ] && ok || bad "good options: exit $rc: $(cat "$out/e")"
[ "$(cat "$out/o")" = "0.5" ] && ok || bad "good options: recorded '$(cat "$out/o")', not 0.5"
echo "refused: $pass passed, $fail failed"
[ $fail -eq 0 ]
