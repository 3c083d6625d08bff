#!/usr/bin/env bash
# Builds bench/loadgen (the Go load generator of bench/load.py --driver go) under .cache/loadgen/ when its
# source changed, and prints the binary's path. Needs Go; it has no dependencies beyond Go's standard
# library, so nothing is downloaded. The binary is never committed.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
command -v go >/dev/null || { echo "loadgen.sh: needs Go" >&2; exit 1; }
src="$root/bench/loadgen"
sum=$(cat "$src/go.mod" "$src/main.go" | sha256sum | cut -c1-16)
bin="$root/.cache/loadgen/$sum/loadgen"
if [ ! -x "$bin" ]; then
    mkdir -p "$(dirname "$bin")"
    (cd "$src" && GOFLAGS=-buildvcs=false go build -o "$bin.tmp" .)
    mv "$bin.tmp" "$bin"
fi
echo "$bin"
