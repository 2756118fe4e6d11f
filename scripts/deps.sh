# Sourced by the other scripts: make sure crawl's Debian packages are here.
# As root, missing packages are installed with apt-get; otherwise the one
# apt-get line to run is printed and the script stops.

CRAWL_DEB_PACKAGES="build-essential cmake pkg-config libunwind-dev libdw-dev libgc-dev libffi-dev libxxhash-dev libcmocka-dev libprotobuf-c-dev protobuf-c-compiler zlib1g-dev"

# Extra packages (what only the tests use) are the function's arguments.
crawl_ensure_deps() {
    missing=""
    for p in $CRAWL_DEB_PACKAGES "$@"; do
        if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed"; then
            missing="$missing $p"
        fi
    done
    [ -z "$missing" ] && return 0
    if [ "$(id -u)" -ne 0 ]; then
        echo "crawl needs these Debian packages:$missing" >&2
        echo "run as root:  apt-get update && apt-get install -y$missing" >&2
        exit 1
    fi
    echo "crawl: installing$missing" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >&2
    # shellcheck disable=SC2086
    apt-get install -y -qq --no-install-recommends $missing >&2
}

# Debian's debuginfod client would ask the network for missing debug info;
# crawl symbolizes from what is installed.
export DEBUGINFOD_URLS=
