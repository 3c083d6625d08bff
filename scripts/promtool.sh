#!/usr/bin/env bash
# Builds the pinned promtool under .cache/promtool/ (once) and prints its path.
# No PyPI, npm or Debian package ships promtool; the Go module proxy serves the Prometheus module, and
# `go install` builds its cmd/promtool with the machine's Go, checking every module against the Go
# checksum database. Go's module and build caches (outside the work tree) make the build in a fresh
# clone on the same machine take seconds; the first one downloads about 2 GB of modules and takes
# minutes. The binary is never committed.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
module="github.com/prometheus/prometheus"
version="v0.316.0" # Prometheus 3.x: its Go module versions are v0.<minor>.<patch>
dir="$root/.cache/promtool"
bin="$dir/$version/promtool"
if [ ! -x "$bin" ]; then
    command -v go >/dev/null || { echo "promtool.sh: needs Go to build promtool" >&2; exit 1; }
    mkdir -p "$dir"
    work=$(mktemp -d "$dir/tmp.XXXXXX")
    trap 'rm -rf "$work"' EXIT
    GOBIN="$work" GOFLAGS=-buildvcs=false go install "$module/cmd/promtool@$version"
    mkdir -p "$(dirname "$bin")"
    # A rename is atomic: a concurrent run sees either no binary or the whole one.
    mv "$work/promtool" "$bin"
fi
# A stable name for the tests (tests/api/test_alerts.py) whatever the pin.
ln -sfn "$version/promtool" "$dir/promtool"
echo "$bin"
