# Sourced by the bench scripts after `build` is set: pin runs to one core
# when taskset exists ($pin), never ask debuginfod over the network, and a
# temporary directory ($tmp) removed at exit; run (a timed run) and
# median, below.
pin=""
command -v taskset >/dev/null && pin="taskset -c 1"
export DEBUGINFOD_URLS=
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# run LABEL COMMAND...: the command's last line that is a number of
# seconds appended to $tmp/LABEL (its output otherwise dropped); a failure
# or no time ends the script
run() {
    label=$1; shift
    "$@" >"$tmp/out" 2>/dev/null || { echo "bench: $label failed" >&2; exit 1; }
    t=$(grep -E '^[0-9]+\.[0-9]+$' "$tmp/out" | tail -n 1)
    [ -n "$t" ] || { echo "bench: $label printed no time" >&2; exit 1; }
    echo "$t" >>"$tmp/$label"
}
# the median of the numbers on stdin, one a line
median() { sort -n | awk '{ v[NR] = $1 } END { print NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
