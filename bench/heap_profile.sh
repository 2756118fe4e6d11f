#!/bin/sh
# bench/heap_profile: 10M malloc/free pairs (bench_heap_work, -O2 without
# frame pointers) in one run each, alternating, 5 rounds: glibc alone;
# heaptrack (every allocation with its stack, when installed) as people run
# it, its interpreter process free to use the second core, and pinned to
# one core with the program (its whole CPU cost, which earlier versions of
# this script compared against); crawl's
# preload recording every allocation with its stack (CFI, the default);
# the same with frame-pointer stacks; crawl sampling stacks every 512 KiB
# (Go's MemProfileRate) and every 2 MiB (tcmalloc's default); the preload alone, recording nothing; the same
# with GWP-ASan at its default rate; and a bare forwarding interposer
# (bench/interpose_floor.c: the price of interposing malloc at all). Then
# the same workload with 192 call paths ("diverse": a thread's last stacks
# rarely start where the next one does, so the walk memo helps little),
# glibc alone and crawl with every stack (heaptrack 1.4's interpreter dies
# of std::bad_alloc on it from 300k pairs on, so it has no row there).
# The heap profile rows run with GWP-ASan off (gpa_sample_rate=0), as
# heaptrack has none: its cost is the last row's. Medians of the workload's
# own wall time; each overhead is the median of the rounds' own ratios to
# the glibc run of the same round (paired: this machine's speed drifts by
# more than the differences between the cheap rows within minutes). The
# cheap rows (sampled, the preload alone, GWP-ASan, the floor) run in 4 x
# ROUNDS rounds of their own after the others, each with its own glibc run,
# and show their ratios' quartiles too: a few percent apart, they need the
# extra rounds for a median that holds still.
# usage: bench/heap_profile.sh [BUILD_DIR] [ITERATIONS] [ROUNDS (5)]
set -eu
build=${1:-$(dirname "$0")/../build/dev}
iters=${2:-10000000}
rounds=${3:-5}
case $rounds in ''|*[!0-9]*|0) echo "bench/heap_profile: ROUNDS must be a positive integer, not '$rounds'" >&2; exit 2 ;; esac
work=$build/bench/bench_heap_work
pre=$build/libcrawl-preload.so
floor=$build/bench/libbench_interpose_floor.so
. "$(dirname "$0")/common.sh"
have_heaptrack=0
command -v heaptrack >/dev/null && have_heaptrack=1
for round in $(seq "$rounds"); do
    run glibc $pin "$work" "$iters"
    if [ $have_heaptrack -eq 1 ]; then
        run heaptrack heaptrack -o "$tmp/ht" "$work" "$iters"
        rm -f "$tmp"/ht*
        run heaptrack_1cpu $pin heaptrack -o "$tmp/ht" "$work" "$iters"
    fi
    CRAWL_OPTIONS=heap_profile=1:gpa_sample_rate=0 LD_PRELOAD=$pre run crawl $pin "$work" "$iters"
    CRAWL_OPTIONS=heap_profile=1:heap_stack_fast=1:gpa_sample_rate=0 LD_PRELOAD=$pre \
        run crawl_fast $pin "$work" "$iters"
    run glibc_div $pin "$work" "$iters" diverse
    CRAWL_OPTIONS=heap_profile=1:gpa_sample_rate=0 LD_PRELOAD=$pre run crawl_div $pin "$work" "$iters" diverse
    rm -f "$tmp"/ht*
done
# The cheap rows, a few percent apart, in rounds of their own: four times as
# many (each paired with a glibc run of its own), so that their medians hold
# still to about half a point here.
cheap=$((4 * rounds))
for round in $(seq "$cheap"); do
    run glibc_c $pin "$work" "$iters"
    CRAWL_OPTIONS=heap_profile=1:heap_sample_bytes=524288:gpa_sample_rate=0 LD_PRELOAD=$pre \
        run sampled $pin "$work" "$iters"
    CRAWL_OPTIONS=heap_profile=1:heap_sample_bytes=2097152:gpa_sample_rate=0 LD_PRELOAD=$pre \
        run sampled2m $pin "$work" "$iters"
    CRAWL_OPTIONS=gpa_sample_rate=0 LD_PRELOAD=$pre run preload $pin "$work" "$iters"
    LD_PRELOAD=$pre run gpa $pin "$work" "$iters"
    LD_PRELOAD=$floor run floor $pin "$work" "$iters"
done
med() { median <"$tmp/$1"; }
# the median of the rounds' ratios of $1's time to $2's (default glibc's)
ratio() { paste "$tmp/${2:-glibc}" "$tmp/$1" | awk '{ printf "%.6f\n", $2 / $1 }' | median; }
# the cheap rounds' ratios of $1's time to glibc's: their lower and upper
# quartiles as overheads (Tukey's hinges: the medians of the lower and upper
# halves), the spread a single run of this machine may show
spread() {
    paste "$tmp/glibc_c" "$tmp/$1" | awk '{ printf "%.6f\n", $2 / $1 }' | sort -n | awk '
        function med(a, b,   k) { k = b - a + 1; return k % 2 ? v[a + (k - 1) / 2] : (v[a + k / 2 - 1] + v[a + k / 2]) / 2 }
        { v[NR] = $1 }
        END { h = int((NR + 1) / 2); printf "quartiles %+.1f%% .. %+.1f%%", 100 * (med(1, h) - 1), 100 * (med(NR - h + 1, NR) - 1) }'
}
g=$(med glibc)
h=$([ $have_heaptrack -eq 1 ] && med heaptrack || echo 0)
h1=$([ $have_heaptrack -eq 1 ] && med heaptrack_1cpu || echo 0)
rh=$([ $have_heaptrack -eq 1 ] && ratio heaptrack || echo 0)
rh1=$([ $have_heaptrack -eq 1 ] && ratio heaptrack_1cpu || echo 0)
echo "bench/heap_profile: $iters malloc/free pairs, seconds (median of $rounds rounds, of $cheap for the rows with quartiles; all but the first heaptrack row pinned to one core)"
echo "  (x and overhead: the median of each round's ratio to that round's glibc run)"
awk -v g="$g" -v h="$h" -v h1="$h1" -v rh="$rh" -v rh1="$rh1" \
    -v c="$(med crawl)" -v rc="$(ratio crawl)" -v f="$(med crawl_fast)" -v rf="$(ratio crawl_fast)" \
    -v s="$(med sampled)" -v rs="$(ratio sampled glibc_c)" -v p="$(med preload)" -v rp="$(ratio preload glibc_c)" \
    -v a="$(med gpa)" -v ra="$(ratio gpa glibc_c)" -v fl="$(med floor)" -v rfl="$(ratio floor glibc_c)" \
    -v s2="$(med sampled2m)" -v rs2="$(ratio sampled2m glibc_c)" -v qs2="$(spread sampled2m)" \
    -v qs="$(spread sampled)" -v qp="$(spread preload)" -v qf="$(spread floor)" \
    -v gd="$(med glibc_div)" -v cd="$(med crawl_div)" -v rcd="$(ratio crawl_div glibc_div)" '
function row(name, t, r) { printf "  %-35s%7.3f  %6.2fx  overhead %+7.1f%%", name, t, r, 100 * (r - 1) }
BEGIN {
    printf "  %-35s%7.3f\n", "glibc alone", g
    if (h > 0) {
        row("heaptrack (every stack)", h, rh); printf "\n"
        row("heaptrack, pinned to one core", h1, rh1); printf "\n"
    } else
        printf "  heaptrack                          (not installed: apt-get install heaptrack)\n"
    row("crawl, every stack (CFI)", c, rc)
    if (h > 0) printf "   (%.2f of heaptrack'"'"'s overhead, %.2f pinned)", (rc - 1) / (rh - 1), (rc - 1) / (rh1 - 1)
    printf "\n"
    row("crawl, every stack (frame pointers)", f, rf); printf "\n"
    row("crawl, sampled every 512 KiB", s, rs); printf "   (%s)\n", qs
    row("crawl, sampled every 2 MiB", s2, rs2); printf "   (tcmalloc'"'"'s default; %s)\n", qs2
    row("the preload recording nothing", p, rp); printf "   (%s)\n", qp
    row("the same, GWP-ASan 1 in 5000", a, ra); printf "\n"
    row("a bare forwarding interposer", fl, rfl); printf "   (the floor for any LD_PRELOAD; %s)\n", qf
    printf "  %-35s%7.3f\n", "192 call paths: glibc alone", gd
    row("192 call paths: crawl, every stack", cd, rcd); printf "\n" }'
