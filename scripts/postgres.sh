#!/usr/bin/env bash
# A throwaway local PostgreSQL: the postgres store's tests (tests/postgres_node.py), its benchmark
# (bench/bench.py --storage postgres) and the durable-execution benchmark (bench/durable_bench.py runs DBOS).
#
#   scripts/postgres.sh install          make sure the server's binaries are here (scripts/test runs it)
#   scripts/postgres.sh start DIR PORT   make a cluster in DIR (once) and start it on 127.0.0.1:PORT;
#                                        prints its URL (user postgres, trust authentication, loopback only)
#   scripts/postgres.sh stop DIR         stop it (the caller removes DIR)
#
# The server is the machine's PostgreSQL (Debian's postgresql package; installed with apt-get when missing
# and we are root). Its binaries refuse to run as root, so as root the cluster belongs to the postgres user.
set -euo pipefail

bindir() {
    local found
    found=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1 || true)
    if [ -z "$found" ] && command -v pg_ctl >/dev/null; then
        found=$(dirname "$(readlink -f "$(command -v pg_ctl)")")
    fi
    if [ -z "$found" ] && [ "$(id -u)" = 0 ]; then
        # A fresh machine (a CI container) may have no package lists yet.
        export DEBIAN_FRONTEND=noninteractive
        apt-get install -y -q postgresql >&2 || { apt-get update -q >&2 && apt-get install -y -q postgresql >&2; }
        found=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n 1)
    fi
    if [ -z "$found" ]; then
        echo "postgres.sh: no PostgreSQL found; install Debian's postgresql package" >&2
        exit 1
    fi
    echo "$found"
}

# Runs a PostgreSQL binary as the cluster's owner: ourselves, or the postgres user when we are root.
as_owner() {
    if [ "$(id -u)" = 0 ]; then
        runuser -u postgres -- "$@"
    else
        "$@"
    fi
}

start() {
    local dir=$1 port=$2 bin
    bin=$(bindir)
    mkdir -p "$dir"
    if [ "$(id -u)" = 0 ]; then
        chown postgres: "$dir"
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
    local dir=$1 bin
    bin=$(bindir)
    as_owner "$bin/pg_ctl" -D "$dir/data" -m fast -w stop >&2
}

case "${1:-}" in
    install) bindir >/dev/null ;;
    start) start "${2:?DIR}" "${3:?PORT}" ;;
    stop) stop "${2:?DIR}" ;;
    *) echo "usage: $0 install | start DIR PORT | stop DIR" >&2; exit 2 ;;
esac
