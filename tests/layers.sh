#!/bin/sh
# The layer order the build promises (docs/design.md): an object file of a
# layer may use symbols of its own layer and the layers below it, never one
# above or beside it. usage: layers.sh LAYERS_FILE, whose lines are
#   layer|layers below it|object files
# Fails naming each symbol used across the order; also fails if it found no
# use of a lower layer at all (then it checked nothing).
set -eu
list=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
while IFS='|' read -r layer below objs; do
    # shellcheck disable=SC2086
    nm -g --defined-only $objs | awk -v l="$layer" 'NF == 3 { print $3, l }' >>"$work/defined"
done <"$list"
bad=0 used=0
while IFS='|' read -r layer below objs; do
    # shellcheck disable=SC2086
    nm -u $objs | awk '{ print $2 }' | sort -u >"$work/undef"
    out=$(awk -v l="$layer" -v ok=" $layer $below " '
        NR == FNR { owner[$1] = $2; next }
        ($1 in owner) {
            if (index(ok, " " owner[$1] " ") == 0) print "BAD " l " uses " $1 " of " owner[$1]
            else if (owner[$1] != l) print "OK"
        }' "$work/defined" "$work/undef")
    n=$(printf '%s\n' "$out" | grep -c '^OK' || true)
    used=$((used + n))
    if printf '%s\n' "$out" | grep '^BAD'; then
        bad=1
    fi
done <"$list"
if [ "$used" -eq 0 ]; then
    echo "layers: no layer uses a lower one: the object lists are wrong"
    exit 1
fi
if [ "$bad" -ne 0 ]; then
    echo "layers: 0 passed, 1 failed"
    exit 1
fi
echo "layers: $used uses of lower layers, none upwards: 1 passed, 0 failed"
