#!/bin/sh
# The set-uid refusal: the same program samples every allocation normally,
# and none when it runs set-uid (AT_SECURE). Needs root (to make a set-uid
# copy owned by another user) and a file system that honours set-uid.
# usage: secure.sh PROGRAM
set -u
prog=$1
normal=$("$prog")
if [ "$normal" != "secure=0 sampled=100" ]; then
    echo "secure: not sampled normally: $normal"; echo "secure: 0 passed, 1 failed"; exit 1
fi
if [ "$(id -u)" != 0 ] || ! id nobody >/dev/null 2>&1; then
    echo "secure: note: not root, set-uid run not tried: 1 passed, 0 failed"; exit 0
fi
work=$(mktemp -d "$(dirname "$prog")/secure.XXXXXX")
trap 'rm -rf "$work"' EXIT
cp "$prog" "$work/secure-copy"
chmod 755 "$work"
chown nobody "$work/secure-copy" && chmod 4755 "$work/secure-copy"
# The set-uid copy runs as nobody: the build tree (its libraries) must be
# reachable by nobody, which a clone under a private directory is not.
if command -v runuser >/dev/null &&
   ! runuser -u nobody -- "$work/secure-copy" >/dev/null 2>&1; then
    echo "secure: note: nobody cannot load the build tree's libraries here (a private directory on the way), set-uid run not tried: 1 passed, 0 failed"
    exit 0
fi
out=$("$work/secure-copy")
case $out in
secure=0*) echo "secure: note: set-uid not honoured here ($out): 1 passed, 0 failed"; exit 0 ;;
"secure=1 sampled=0") echo "secure: set-uid run passes through: 1 passed, 0 failed"; exit 0 ;;
esac
echo "secure: set-uid run sampled: $out"; echo "secure: 0 passed, 1 failed"; exit 1
