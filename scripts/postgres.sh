#!/usr/bin/env bash
# A throwaway local PostgreSQL: the postgres store's tests (tests/postgres_node.py), its benchmark
# (bench/bench.py --storage postgres) and the durable-execution benchmark (bench/durable_bench.py runs DBOS).
#
#   scripts/postgres.sh install          make sure the server's binaries are here (scripts/test runs it)
#   scripts/postgres.sh start DIR PORT   make a cluster in DIR (once) and start it on 127.0.0.1:PORT;
#                                        prints its URL (user postgres, trust authentication, loopback only)
#   scripts/postgres.sh stop DIR         stop it (the caller removes DIR)
#
# The server is the machine's PostgreSQL when it has one (Debian's postgresql package, or pg_ctl on the
# PATH). Otherwise Debian's packages are unpacked under .cache/postgres/ with dpkg -x, as scripts/chromium.sh
# does, rather than installed: nothing outside .cache/ changes (installing would run the packages' scripts,
# create a system cluster and upgrade the machine's PostgreSQL packages), and no root is needed once apt has
# its package lists (docs/adr/0055). Never committed. The binaries refuse to run as root, so as root the
# cluster belongs to the postgres user, or to nobody on a machine without one.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cache="$root/.cache/postgres"

# The newest PostgreSQL bin directory of a Debian file tree rooted at $1 ("" = the machine's), if any.
newest_bin() {
    ls -d "$1"/usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1 || true
}

# Unpacks what installing Debian's postgresql would add to this machine into $cache/unpacked.
unpack() {
    if ! command -v apt-get >/dev/null || ! command -v dpkg >/dev/null; then
        echo "postgres.sh: no PostgreSQL found, and no apt-get to fetch Debian's: install PostgreSQL" >&2
        exit 1
    fi
    apt-cache show postgresql >/dev/null 2>&1 || apt-get update -qq
    mkdir -p "$cache"
    local packages deb
    work=$(mktemp -d "$cache/tmp.XXXXXX") # global: the trap removes it after we return
    trap 'rm -rf "$work"' EXIT
    chmod 755 "$work" # apt downloads as its own user (_apt)
    mapfile -t packages < <(apt-get install --dry-run -y --no-install-recommends postgresql |
        awk '$1 == "Inst" {print $2}')
    if [ ${#packages[@]} -eq 0 ]; then
        echo "postgres.sh: apt-get says postgresql is installed, yet no /usr/lib/postgresql/*/bin exists" >&2
        exit 1
    fi
    (cd "$work" && apt-get download -qq "${packages[@]}" 2>&1 | grep -v "unsandboxed" >&2 || true)
    ls "$work"/*.deb >/dev/null # fail here if nothing came
    for deb in "$work"/*.deb; do
        dpkg -x "$deb" "$work/unpacked"
    done
    if [ -z "$(newest_bin "$work/unpacked")" ]; then
        echo "postgres.sh: Debian's packages held no /usr/lib/postgresql/*/bin: ${packages[*]}" >&2
        exit 1
    fi
    rm -rf "$cache/unpacked"
    # A rename is atomic: a concurrent run sees either no server or a complete one.
    mv "$work/unpacked" "$cache/unpacked"
    rm -rf "$work"
}

# Sets bin to the directory of initdb and pg_ctl; for an unpacked server, the dynamic linker also looks
# among the unpacked libraries (the machine may lack some the server links, ICU's for one).
find_bin() {
    bin=$(newest_bin "")
    if [ -z "$bin" ] && command -v pg_ctl >/dev/null; then
        bin=$(dirname "$(readlink -f "$(command -v pg_ctl)")")
    fi
    if [ -z "$bin" ]; then
        [ -n "$(newest_bin "$cache/unpacked")" ] || unpack
        bin=$(newest_bin "$cache/unpacked")
        local arch
        arch=$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || echo x86_64-linux-gnu)
        export LD_LIBRARY_PATH="$cache/unpacked/usr/lib/$arch${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    fi
}

# The user the cluster runs as when we are root.
owner() {
    if id postgres >/dev/null 2>&1; then echo postgres; else echo nobody; fi
}

# Runs a PostgreSQL binary as the cluster's owner: ourselves, or owner() when we are root.
as_owner() {
    if [ "$(id -u)" = 0 ]; then
        runuser -u "$(owner)" -- env ${LD_LIBRARY_PATH:+LD_LIBRARY_PATH="$LD_LIBRARY_PATH"} "$@"
    else
        "$@"
    fi
}

start() {
    local dir=$1 port=$2
    find_bin
    mkdir -p "$dir"
    if [ "$(id -u)" = 0 ]; then
        chown "$(owner):" "$dir"
        as_owner test -x "$bin/postgres" || {
            echo "postgres.sh: user $(owner) cannot run $bin/postgres (a directory above it is private)" >&2
            exit 1
        }
    fi
    if [ ! -f "$dir/data/PG_VERSION" ]; then
        as_owner "$bin/initdb" -D "$dir/data" -U postgres --auth=trust --no-sync >"$dir/initdb.log"
    fi
    # The socket goes in DIR: the packaged /var/run/postgresql may be missing or another cluster's.
    as_owner "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w \
        -o "-h 127.0.0.1 -p $port -k $dir" start >&2
    echo "postgresql://postgres@127.0.0.1:$port"
}

stop() {
    local dir=$1
    find_bin
    as_owner "$bin/pg_ctl" -D "$dir/data" -m fast -w stop >&2
}

case "${1:-}" in
    install) find_bin ;;
    start) start "${2:?DIR}" "${3:?PORT}" ;;
    stop) stop "${2:?DIR}" ;;
    *) echo "usage: $0 install | start DIR PORT | stop DIR" >&2; exit 2 ;;
esac
