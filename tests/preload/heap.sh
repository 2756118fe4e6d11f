#!/bin/sh
# The heap profile's public contract under LD_PRELOAD=libcrawl-preload.so:
# heap_profile=1 with heap_profile_path=FILE writes the live heap at exit in
# the format of FILE's extension (each read back here), and leak_check=1
# prints LeakSanitizer's report of planted leaks (and nothing for programs
# that do not leak: lua5.4, python3).
# usage: heap.sh PRELOAD_LIB LEAKY_PROGRAM CRAWLVM EXAMPLES_DIR
set -u
lib=$1 leaky=$2 crawlvm=$3 examples=$4
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail=0 checks=0
bad() { echo "heap: $*"; fail=1; }
ok() { checks=$((checks + 1)); }

# ---- the leak check ------------------------------------------------------------------
CRAWL_OPTIONS=leak_check=1 LD_PRELOAD=$lib "$leaky" >"$work/out" 2>"$work/err"
rc=$?
cp "$work/err" "$work/leaky_err"
[ $rc -eq 23 ] && ok || bad "leaky exits $rc, not 23 (LeakSanitizer's exit status)"
grep -q '^hello$' "$work/out" && ok || bad "leaky's own output is lost"
for want in '==ERROR: LeakSanitizer: detected memory leaks' \
    'Direct leak of 100 byte(s) in 1 object(s) allocated from:' \
    'Direct leak of 32 byte(s) in 1 object(s) allocated from:' \
    'Indirect leak of 96 byte(s) in 3 object(s) allocated from:' \
    'SUMMARY: LeakSanitizer: 228 byte(s) leaked in 5 allocation(s).'; do
    grep -qF "$want" "$work/err" && ok || bad "missing: $want"
done
# the same with every allocation in the guarded pool: the same report (the
# check skips the pool's pages and its slot table, which holds every live
# slot's address; a slot freed while it scans used to fault)
CRAWL_OPTIONS=leak_check=1:gpa_sample_rate=1:gpa_max_allocations=4096 LD_PRELOAD=$lib "$leaky" \
    >/dev/null 2>"$work/gerr"
rc=$?
[ $rc -eq 23 ] && grep -qF 'SUMMARY: LeakSanitizer: 228 byte(s) leaked in 5 allocation(s).' "$work/gerr" &&
    grep -qF 'Indirect leak of 96 byte(s) in 3 object(s) allocated from:' "$work/gerr" && ok ||
    { bad "leak check over the guarded pool: rc $rc"; head -20 "$work/gerr"; }
# a thread attaching inside a malloc hook (the main thread's stack bounds
# come from pthread_getattr_np, which mallocs under the thread's lock): a
# sampled allocation there used to deadlock, in about 1 run in 4 at this rate
hung=0
for i in $(seq 40); do
    timeout -s KILL 20 env CRAWL_OPTIONS=leak_check=1:gpa_sample_rate=10:gpa_max_allocations=4096 \
        LD_PRELOAD=$lib "$leaky" >/dev/null 2>&1
    [ $? -eq 23 ] || hung=$((hung + 1))
done
[ $hung -eq 0 ] && ok || bad "$hung of 40 sampled leak-check runs hung or failed"

# leak_check=1 records every allocation whatever heap_sample_bytes says:
# with samples only, chunks reachable through others not sampled were
# reported (ls: 1648 bytes of locale data)
CRAWL_OPTIONS=leak_check=1:heap_sample_bytes=64 LD_PRELOAD=$lib "$leaky" >/dev/null 2>"$work/serr"
rc=$?
[ $rc -eq 23 ] && grep -qF 'SUMMARY: LeakSanitizer: 228 byte(s) leaked in 5 allocation(s).' "$work/serr" &&
    grep -qF 'crawl: leak_check=1 records every allocation: heap_sample_bytes=64 is ignored' \
        "$work/serr" && ok || { bad "leak check with heap_sample_bytes=64: rc $rc"; head -20 "$work/serr"; }
CRAWL_OPTIONS=leak_check=1:heap_sample_bytes=64 LD_PRELOAD=$lib ls -la /usr/lib >/dev/null 2>"$work/serr"
rc=$?
[ $rc -eq 0 ] && ! grep -q 'Direct leak' "$work/serr" && ok ||
    { bad "ls under leak_check=1:heap_sample_bytes=64: rc $rc"; head -20 "$work/serr"; }

# each leak's stack: malloc, then the function that leaked it
grep -A2 'Direct leak of 100 ' "$work/err" | grep -q ' in leak_direct .*leaky.c' && ok ||
    bad "the 100-byte leak's stack does not show leak_direct"
grep -A3 'Direct leak of 32 ' "$work/err" | grep -q ' in lost_list .*leaky.c' && ok ||
    bad "the list's stack does not show lost_list"
grep -q 'kept_list' "$work/err" && bad "the list a global keeps is reported" || ok
[ $fail -eq 0 ] || cat "$work/err"

CRAWL_OPTIONS=leak_check=1:leak_check_exitcode=0 LD_PRELOAD=$lib "$leaky" >/dev/null 2>&1
rc=$?
[ $rc -eq 0 ] && ok || bad "leak_check_exitcode=0 still exits $rc"
CRAWL_OPTIONS=leak_check=1:log_path=$work/leaks LD_PRELOAD=$lib "$leaky" >/dev/null 2>"$work/err"
grep -qF 'SUMMARY: LeakSanitizer: 228 byte(s)' "$work"/leaks.* 2>/dev/null && ok ||
    bad "log_path did not get the report"
[ -s "$work/err" ] && bad "with log_path the report still went to stderr" || ok

# programs that do not leak report nothing (valgrind's memcheck: 0 bytes
# definitely or indirectly lost for the same commands)
quiet() {   # name, command...
    name=$1; shift
    CRAWL_OPTIONS=leak_check=1 LD_PRELOAD=$lib "$@" >"$work/out" 2>"$work/err"
    rc=$?
    if [ $rc -ne 0 ] || grep -q 'leak of' "$work/err"; then
        bad "$name under leak_check=1: rc $rc"; head -40 "$work/err"
    else
        ok
    fi
}
quiet python3 /usr/bin/python3 -c 'import json, email.parser, http.client, decimal, collections
print(sum(json.loads(json.dumps(list(range(1000))))))'
if command -v lua5.4 >/dev/null; then
    printf 'local t = {}\nfor i = 1, 20000 do t[i] = string.rep("x", i %% 50) end\nprint(#t)\n' >"$work/t.lua"
    quiet lua5.4 lua5.4 "$work/t.lua"
else
    echo "heap: note: lua5.4 absent, not tried (apt-get install lua5.4)"
fi
# sort leaks 16 bytes (valgrind's memcheck: "definitely lost: 16 bytes in 1
# blocks"), and closes stderr in an atexit handler: the report still comes
CRAWL_OPTIONS=leak_check=1 LD_PRELOAD=$lib sort /etc/passwd >/dev/null 2>"$work/err"
rc=$?
[ $rc -eq 23 ] && grep -qF 'SUMMARY: LeakSanitizer: 16 byte(s) leaked in 1 allocation(s).' "$work/err" &&
    ok || { bad "sort's leak: rc $rc"; cat "$work/err"; }
if command -v valgrind >/dev/null; then
    valgrind --leak-check=full sort /etc/passwd 2>&1 >/dev/null | grep -q 'definitely lost: 16 bytes in 1 blocks' &&
        ok || bad "valgrind no longer agrees on sort's leak"
fi

# leak_check_reachable=1 lists what is still reachable too (the global's
# list among it, with its stack); by default it is not listed
grep -q 'Still reachable' "$work/leaky_err" && bad "reachable chunks listed by default" || ok
CRAWL_OPTIONS=leak_check=1:leak_check_reachable=1 LD_PRELOAD=$lib "$leaky" >/dev/null 2>"$work/err"
grep -Eq '^Still reachable \(not leaks\): [0-9]+ byte\(s\) in [0-9]+ object\(s\):$' "$work/err" &&
    grep -A4 -F 'Reachable of 96 byte(s) in 3 object(s) allocated from:' "$work/err" |
    grep -q ' in kept_list ' &&
    grep -qF 'SUMMARY: LeakSanitizer: 228 byte(s) leaked in 5 allocation(s).' "$work/err" && ok ||
    { bad "leak_check_reachable=1"; cat "$work/err"; }

# sort closes stdout and stderr at exit: a report to log_path=/dev/stderr
# used to follow descriptor 2 to whatever crawl had opened there since
CRAWL_OPTIONS=leak_check=1:log_path=/dev/stderr LD_PRELOAD=$lib sort /etc/passwd >/dev/null \
    2>"$work/err"
rc=$?
[ $rc -eq 23 ] && grep -qF 'SUMMARY: LeakSanitizer: 16 byte(s) leaked in 1 allocation(s).' "$work/err" &&
    ok || { bad "sort's leak to log_path=/dev/stderr: rc $rc"; cat "$work/err"; }

# log_path naming a FIFO (a tool reading reports) is written as named, not
# as FIFO.PID beside it (the README's claim)
mkfifo "$work/fifo"
timeout 30 cat "$work/fifo" >"$work/fifo_out" &
reader=$!
CRAWL_OPTIONS=leak_check=1:log_path=$work/fifo LD_PRELOAD=$lib "$leaky" >/dev/null 2>"$work/err"
wait $reader
grep -qF 'SUMMARY: LeakSanitizer: 228 byte(s) leaked in 5 allocation(s).' "$work/fifo_out" &&
    [ -z "$(ls "$work" | grep '^fifo\.')" ] && ok ||
    { bad "log_path=a FIFO"; ls "$work"; cat "$work/err"; }

# a process with nothing to report leaves no log file (an empty one was made)
CRAWL_OPTIONS=leak_check=1:log_path=$work/clean LD_PRELOAD=$lib /bin/true
rc=$?
[ $rc -eq 0 ] && [ -z "$(ls "$work" | grep '^clean')" ] && ok ||
    { bad "a clean process under log_path: rc $rc"; ls "$work"; }

# ---- the profile files ---------------------------------------------------------------
for ext in txt json folded svg pb.gz; do
    CRAWL_OPTIONS=heap_profile=1:heap_profile_path=$work/p.$ext LD_PRELOAD=$lib "$leaky" >/dev/null
    [ -s "$work/p.$ext" ] && ok || bad "no $ext profile written"
done
grep -q '^By caller module:' "$work/p.txt" && grep -q '^By stack:' "$work/p.txt" && ok ||
    bad "the text profile lacks its two views"
python3 - "$work" <<'PY' && ok || bad "a profile does not read back (above)"
import json, sys, xml.etree.ElementTree as ET
w = sys.argv[1]
live = 100 + 4 * 32 + 3 * 32          # leak_direct, lost_list, kept_list (stdio's buffer aside)
d = json.load(open(w + "/p.json"))
stacks = sum(s["bytes"] for s in d["stacks"])
assert stacks == d["live_bytes"], (stacks, d["live_bytes"])
assert sum(m["bytes"] for m in d["modules"]) == d["live_bytes"]
names = [[f["function"] for f in s["frames"]] for s in d["stacks"]]
assert any(n[:2] == ["malloc", "leak_direct"] for n in names), names
assert d["live_bytes"] >= live
folded = 0
for line in open(w + "/p.folded"):
    stack, n = line.rsplit(" ", 1)
    assert ";" in stack and int(n) > 0, line
    folded += int(n)
assert folded == d["live_bytes"], (folded, d["live_bytes"])
assert any(l.endswith(";leak_direct;malloc 100\n") for l in open(w + "/p.folded"))
svg = ET.parse(w + "/p.svg").getroot()
boxes = [g for g in svg.iter("{http://www.w3.org/2000/svg}g") if g.get("data-depth")]
root = [g for g in boxes if g.get("data-depth") == "0"]
assert len(root) == 1 and int(root[0].get("data-bytes")) == d["live_bytes"]
top = sum(int(g.get("data-bytes")) for g in boxes if g.get("data-depth") == "1")
assert top == d["live_bytes"], (top, d["live_bytes"])
assert int(svg.get("data-total-bytes")) == d["live_bytes"]
PY
gzip -t "$work/p.pb.gz" && ok || bad "the pprof file is not gzip"
if command -v go >/dev/null; then
    HOME=$work GOCACHE=$work/go GOFLAGS= go tool pprof -top -sample_index=inuse_space "$work/p.pb.gz" \
        >"$work/top" 2>&1
    grep -q 'leak_direct' "$work/top" && ok || { bad "go tool pprof does not read the profile"; cat "$work/top"; }
else
    echo "heap: note: go absent, pprof not read back by go tool pprof (apt-get install golang-go)"
fi

# heap_profile_signal: SIGUSR2 makes the helper thread write the profile
CRAWL_OPTIONS=heap_profile=1:heap_profile_signal=12:heap_profile_path=$work/sig.folded \
    LD_PRELOAD=$lib "$leaky" signal "$work/sig.folded" >/dev/null 2>"$work/err"
rc=$?
[ $rc -eq 0 ] && grep -q ';leak_direct;malloc 100$' "$work/sig.folded" && ok ||
    { bad "heap_profile_signal: rc $rc"; cat "$work/err" "$work/sig.folded"; }

# ---- heap_profile_mmap=1: mapped regions, by the stack that mapped them ------------------
CRAWL_OPTIONS=heap_profile=1:heap_profile_mmap=1:heap_profile_path=$work/map.json LD_PRELOAD=$lib \
    "$leaky" map >/dev/null 2>"$work/err"
rc=$?
[ $rc -eq 0 ] && ok || { bad "leaky map exits $rc"; cat "$work/err"; }
python3 - "$work/map.json" "$(getconf PAGESIZE)" <<'PY' && ok || bad "the mapped regions are wrong (above)"
import json, sys
d = json.load(open(sys.argv[1]))
page = int(sys.argv[2])
ours = [s for s in d["stacks"] if [f["function"] for f in s["frames"]][:2] == ["mmap", "map_pages"]]
assert ours, [[f["function"] for f in s["frames"]][:4] for s in d["stacks"]]
assert sum(s["bytes"] for s in ours) == 8 * page, ours
assert sum(s["objects"] for s in ours) == 3, ours
assert d["mapped_bytes"] >= 8 * page and d["mapped_regions"] >= 3, d
PY
# without the option, no region is recorded
CRAWL_OPTIONS=heap_profile=1:heap_profile_path=$work/nomap.json LD_PRELOAD=$lib "$leaky" map \
    >/dev/null 2>&1
grep -q '"mapped_bytes":0,"mapped_regions":0' "$work/nomap.json" && ok ||
    bad "mapped regions recorded without heap_profile_mmap=1"

# heap_profile_path through a symbolic link: the link stays, its target is
# written (a link to a file not there yet was renamed over, and the
# profile listed realpath's own malloc); one that leads nowhere when the
# profile is written (/dev/stdout after echo closed it) is never replaced,
# and a path that cannot be written says so
ln -s "$work/target.txt" "$work/link.txt"
for round in 1 2; do
    CRAWL_OPTIONS=heap_profile=1:heap_profile_path=$work/link.txt LD_PRELOAD=$lib "$leaky" >/dev/null
    [ -L "$work/link.txt" ] && grep -q 'bytes live in' "$work/target.txt" &&
        ! grep -q 'ho_write_path' "$work/target.txt" && ok ||
        { bad "heap_profile_path through a link (round $round)"; ls -l "$work"; }
done
ln -s /proc/self/fd/1 "$work/stdout_link"
CRAWL_OPTIONS=heap_profile=1:heap_profile_path=$work/stdout_link LD_PRELOAD=$lib /bin/echo hi \
    >"$work/out" 2>"$work/err"
[ -L "$work/stdout_link" ] && grep -qx hi "$work/out" &&
    grep -q "crawl: cannot write the heap profile to '$work/stdout_link': " "$work/err" && ok ||
    { bad "heap_profile_path=a link to a closed stdout"; ls -l "$work"; cat "$work/err"; }
# /dev/stdout is the descriptor itself: the profile follows the program's
# own output in the file stdout goes to (through the link, that file was
# renamed over and the output lost), and once the program closed it the
# profile is not written (the link led to whatever file took descriptor 1)
CRAWL_OPTIONS=heap_profile=1:heap_profile_path=/dev/stdout LD_PRELOAD=$lib "$leaky" \
    >"$work/both.txt" 2>"$work/err"
grep -qx hello "$work/both.txt" && grep -q 'bytes live in' "$work/both.txt" && ok ||
    { bad "heap_profile_path=/dev/stdout into a file"; cat "$work/both.txt" "$work/err"; }
CRAWL_OPTIONS=heap_profile=1:heap_profile_path=/dev/fd//01 LD_PRELOAD=$lib /bin/echo hi \
    >"$work/echo.txt" 2>"$work/err"
[ "$(cat "$work/echo.txt")" = hi ] &&
    grep -qx "crawl: cannot write the heap profile to '/dev/fd//01': Bad file descriptor" \
        "$work/err" && ok || { bad "heap_profile_path=/dev/fd//01, stdout closed"; cat "$work/err"; }
CRAWL_OPTIONS=heap_profile=1:heap_profile_path=$work/no/dir.json LD_PRELOAD=$lib /bin/true \
    2>"$work/err"
grep -qx "crawl: cannot write the heap profile to '$work/no/dir.json': No such file or directory" \
    "$work/err" && ok || { bad "no word of an unwritable heap_profile_path"; cat "$work/err"; }

# heap_profile_signal alone records nothing: said once, not silently
CRAWL_OPTIONS=heap_profile_signal=10 LD_PRELOAD=$lib /bin/true 2>"$work/err"
[ "$(cat "$work/err")" = "crawl: heap_profile_signal=10 does nothing without heap_profile=1" ] &&
    ok || { bad "heap_profile_signal without heap_profile=1"; cat "$work/err"; }

# ---- crawlvm --heap-profile: script frames in the stacks --------------------------------
"$crawlvm" --heap-profile "$work/vm.folded" "$examples/heap.crawl" >/dev/null 2>"$work/err"
rc=$?
[ $rc -eq 0 ] && ok || { bad "crawlvm --heap-profile exits $rc"; cat "$work/err"; }
# (crawlvm's own frames between them as its build inlines them: vm_call_native
# and plain_alloc stay in a -O0 build)
grep -Eq 'warm-cache [^;]*heap.crawl:[0-9]+;load-page [^;]*heap.crawl:[0-9]+;(vm_call_native;)?b_make_buffer;(plain_alloc;)?malloc 1572864$' \
    "$work/vm.folded" && ok || { bad "crawlvm's profile lacks the script frames"; cat "$work/vm.folded"; }
grep -Eq 'intern-name [^;]*;(vm_call_native;)?vm_call_ffi;.*strdup;malloc' "$work/vm.folded" && ok ||
    bad "crawlvm's profile lacks strdup called from the script through the FFI"
# crawl's own allocations are not the program's: the thread dump's helper
# thread (its TLS, calloc'ed by pthread_create) was in every profile
! grep -E 'sw_on_signal_run|crawl_install_thread_dump' "$work/vm.folded" && ok ||
    bad "crawlvm's profile holds crawl's own helper thread's allocation"
# with -e, the first allocations are GC_init's, inside pthread_getattr_np:
# recording them attached the main thread there, and crawlvm hung
timeout -s KILL 20 "$crawlvm" --heap-profile "$work/vm_e.txt" -e '(print (+ 40 2))' \
    >"$work/out" 2>"$work/err"
rc=$?
[ $rc -eq 0 ] && grep -qx 42 "$work/out" && grep -q 'bytes live in' "$work/vm_e.txt" && ok ||
    { bad "crawlvm --heap-profile -e exits $rc"; cat "$work/err"; }

# CRAWL_OPTIONS that crawl refuses: one warning, and crawlvm says why it
# does not record (it used to restart itself anyway: the warning twice, then
# "libcrawl-preload.so is not recording")
CRAWL_OPTIONS=bogus=1 "$crawlvm" --heap-profile "$work/vm_bad.txt" -e '(print 1)' \
    >"$work/out" 2>"$work/err"
rc=$?
[ $rc -eq 2 ] && [ "$(grep -c "unknown option 'bogus'" "$work/err")" -eq 1 ] &&
    grep -q 'crawlvm: --heap-profile: CRAWL_OPTIONS were refused' "$work/err" &&
    [ ! -s "$work/out" ] && [ ! -e "$work/vm_bad.txt" ] && ok ||
    { bad "crawlvm --heap-profile with bad CRAWL_OPTIONS exits $rc"; cat "$work/err"; }

# CRAWL_OPTIONS too long to add heap_profile=1 to: said, not cut (the
# restarted program then did not record, and said only that)
long=$(awk 'BEGIN { for (i = 0; i < 600; i++) printf "halt_on_error=1:"; printf "halt_on_error=1" }')
CRAWL_OPTIONS=$long "$crawlvm" --heap-profile "$work/vm_long.txt" -e '(print 1)' >"$work/out" 2>"$work/err"
rc=$?
[ $rc -eq 2 ] && grep -q 'crawlvm: --heap-profile: LD_PRELOAD or CRAWL_OPTIONS is too long' "$work/err" &&
    [ ! -s "$work/out" ] && ok || { bad "crawlvm --heap-profile with long CRAWL_OPTIONS exits $rc"; cat "$work/err"; }

# crawlvm --profile: the CPU profile's pprof file, read back by go tool pprof
"$crawlvm" --profile "$work/cpu.pb.gz" -e '(define i 0) (define (inner) (set! i (+ i 1)))
 (define (spin) (while (< i 20000000) (inner))) (spin)' >/dev/null 2>"$work/err"
gzip -t "$work/cpu.pb.gz" && ok || { bad "crawlvm --profile wrote no pprof file"; cat "$work/err"; }
if command -v go >/dev/null; then
    HOME=$work GOCACHE=$work/go GOFLAGS= go tool pprof -top -sample_index=samples "$work/cpu.pb.gz" \
        >"$work/cputop" 2>&1
    grep -q 'spin' "$work/cputop" && grep -q 'Type: samples' "$work/cputop" && ok ||
        { bad "go tool pprof does not read the CPU profile"; cat "$work/cputop"; }
fi

if [ $fail -ne 0 ]; then
    echo "heap: 0 passed, 1 failed"
    exit 1
fi
echo "heap: $checks checks: 1 passed, 0 failed"
