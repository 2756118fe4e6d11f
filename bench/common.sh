# Sourced by the bench scripts after `build` is set: pin runs to one core
# when taskset exists ($pin), never ask debuginfod over the network, and a
# temporary directory ($tmp) removed at exit; run (a timed run) and
# median, below.
pin=""
command -v taskset >/dev/null && pin="taskset -c 1"
export DEBUGINFOD_URLS=
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# refused LABEL FILE: end the script when FILE (a run's stderr) says crawl
# refused its CRAWL_OPTIONS: the run went on with the defaults, and would
# be measured as what it did not do
refused() {
    if grep -q "in sanitizer options.*none applied" "$2"; then
        echo "bench: $1: crawl refused its options, so the run did not measure what it says:" >&2
        grep "in sanitizer options" "$2" | head -n 1 >&2
        exit 1
    fi
}
# run LABEL COMMAND...: the command's last line that is a number of
# seconds appended to $tmp/LABEL (its output otherwise dropped); a
# failure, no time or refused options end the script
run() {
    label=$1; shift
    "$@" >"$tmp/out" 2>"$tmp/err" || { echo "bench: $label failed" >&2; cat "$tmp/err" >&2; exit 1; }
    refused "$label" "$tmp/err"
    t=$(grep -E '^[0-9]+\.[0-9]+$' "$tmp/out" | tail -n 1)
    [ -n "$t" ] || { echo "bench: $label printed no time" >&2; exit 1; }
    echo "$t" >>"$tmp/$label"
}
# the median of the numbers on stdin, one a line
median() { sort -n | awk '{ v[NR] = $1 } END { print NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
