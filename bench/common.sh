# Sourced by the bench scripts after `build` is set: pin runs to one core
# when taskset exists ($pin), never ask debuginfod over the network, and a
# temporary directory ($tmp) removed at exit.
pin=""
command -v taskset >/dev/null && pin="taskset -c 1"
export DEBUGINFOD_URLS=
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
