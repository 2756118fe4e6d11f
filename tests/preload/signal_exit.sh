#!/bin/sh
# heap_profile_signal, then exit while the helper writes: the profile is
# whole and no temporary file stays beside it, in each of thirteen runs
# (the signal once, once just before exit, a storm of them, a fork child
# that exits at once, a thread dump the exit does not wait for, and a
# thread writing through the API in a loop).
# Then a program that exits inside its own write of a profile (a describe
# hook calls exit, as libdw's out-of-memory handler does): exit goes on at
# once, writes nothing more, and the temporary files go (the thread's own
# and a heap_profile_signal helper's).
# usage: signal_exit.sh PROGRAM PRELOAD EXIT_IN_WRITE_PROGRAM
set -u
prog=$1 pre=$2 inwrite=$3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail=0
for run in once once once once once quick quick quick quick quick quick quick quick \
           storm storm storm fork dump writer writer writer; do
    t0=$(date +%s%N)
    CRAWL_OPTIONS=heap_profile=1:heap_profile_signal=12:heap_profile_path=$work/p.svg \
        LD_PRELOAD=$pre "$prog" 12 $run "$work/snap.txt" >"$work/out" 2>&1
    ms=$(( ($(date +%s%N) - t0) / 1000000 ))
    # (a bound, not a speed: it waited 5 s for a thread dump's helper)
    if [ $run = dump ] && [ $ms -gt 2500 ]; then
        echo "signal_exit: dump: exit took $ms ms"; fail=1
    fi
    if [ $run = fork ] && ! grep -q "the child took 0\.[0-9] s to exit" "$work/out"; then
        echo "signal_exit: fork: the child was slow to exit:"; cat "$work/out"; fail=1
    fi
    # (a signal taken just before exit is written by the helper, whole:
    # refused, it said "cannot write the heap profile ... canceled")
    if grep -q "cannot write" "$work/out"; then
        echo "signal_exit: run $run:"; cat "$work/out"; fail=1
    fi
    if ! grep -q "signal_exit: exiting" "$work/out"; then
        echo "signal_exit: run $run did not exit normally:"; cat "$work/out"; fail=1
    fi
    if ls "$work" | grep -q '\.tmp\.'; then
        echo "signal_exit: run $run left: $(ls "$work" | grep '\.tmp\.')"; fail=1
        rm -f "$work"/*.tmp.*
    fi
    if ! tail -c 7 "$work/p.svg" 2>/dev/null | grep -q '</svg>'; then
        echo "signal_exit: run $run: p.svg is not whole"; fail=1
    fi
    rm -f "$work/p.svg" "$work/snap.txt"
done
# exit_in_write's runs: NAME CRAWL_OPTIONS, then its arguments
in_write() {
    name=$1 opts=$2; shift 2
    t0=$(date +%s%N)
    CRAWL_OPTIONS=$opts LD_PRELOAD=$pre "$inwrite" "$@" >"$work/out" 2>&1 3>>"$work/fd3.svg"
    rc=$?
    ms=$(( ($(date +%s%N) - t0) / 1000000 ))
    hooks=$(grep -c "the describe hook exits" "$work/out")
    # with a profile to write at exit, one line says it was not (the exit
    # code of a leak check is lost with it: not in silence)
    said=$(grep -c "exited inside a heap profile write: no profile written at exit" "$work/out")
    case $opts in *heap_profile_path*) want_said=1 ;; *) want_said=0 ;; esac
    # (a bound, not a speed: exit waited 5 s for the thread's own write)
    if [ $rc -ne 3 ] || [ $ms -gt 2500 ] || [ "$hooks" -ne 1 ] || [ "$said" -ne $want_said ] ||
        ls "$work" | grep -q '\.tmp\.'; then
        echo "signal_exit: exit inside the write ($name): rc $rc after $ms ms, the hook ran $hooks times, said so $said times, left: $(ls "$work" | tr "\n" " ")"
        cat "$work/out"; fail=1
    fi
    rm -f "$work"/*.tmp.* "$work"/*.svg "$work"/snap.txt
}
in_write path heap_profile=1 "$work/w.svg"
# the exit hook does not write the profile again (it ran the hook again)
in_write fd heap_profile=1:heap_profile_path="$work/p.svg" "$work/w.svg" fd
in_write dev_fd heap_profile=1:heap_profile_path=/dev/fd/3 /dev/fd/3
# the helper's temporary file goes too
in_write helper heap_profile=1:heap_profile_signal=12:heap_profile_path="$work/p.svg" \
    "$work/w.svg" helper
# a fork inside the write: both finish it (the child spun for ever). (The
# two share the temporary file's name, so one of them may find it renamed
# by the other: either may fail, neither may hang.)
CRAWL_OPTIONS=heap_profile=1 LD_PRELOAD=$pre "$inwrite" "$work/f.svg" fork >"$work/out" 2>&1
if ! grep -q "the child ended (status [01])" "$work/out"; then
    echo "signal_exit: fork inside the write:"; cat "$work/out"; fail=1
fi
if [ $fail -ne 0 ]; then
    echo "signal_exit: 0 passed, 1 failed"
    exit 1
fi
echo "signal_exit: 1 passed, 0 failed"
