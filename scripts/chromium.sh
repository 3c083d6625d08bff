#!/usr/bin/env bash
# Installs Debian's Chromium under .cache/chromium/ (once) and prints the path of a launcher for it.
# The console's browser tests (tests/integration/test_console*.py) drive it with Playwright; Playwright's own
# browser download is not reachable from these machines, Debian's packages are. The packages are unpacked
# with dpkg -x rather than installed, so nothing outside .cache/ changes: the launcher points the
# dynamic linker at the unpacked libraries. Only the packages this machine lacks are fetched (apt works
# that out), so another machine may unpack a few more. Never committed.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
dir="$root/.cache/chromium"
launcher="$dir/chromium"
if [ ! -x "$launcher" ]; then
    command -v apt-get >/dev/null || {
        echo "chromium.sh: needs apt-get (Debian's chromium package)" >&2
        exit 1
    }
    apt-cache show chromium >/dev/null 2>&1 || apt-get update -qq
    mkdir -p "$dir"
    work=$(mktemp -d "$dir/tmp.XXXXXX")
    trap 'rm -rf "$work"' EXIT
    chmod 755 "$work"  # apt downloads as its own user (_apt)
    # What installing chromium would add to this machine, without its recommendations.
    mapfile -t packages < <(apt-get install --dry-run -y --no-install-recommends chromium |
        awk '$1 == "Inst" {print $2}')
    (cd "$work" && apt-get download -qq "${packages[@]}" 2>&1 | grep -v "unsandboxed" >&2 || true)
    ls "$work"/*.deb >/dev/null  # fail here if nothing came
    for deb in "$work"/*.deb; do
        dpkg -x "$deb" "$work/unpacked"
    done
    arch=$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || echo x86_64-linux-gnu)
    cat >"$work/chromium" <<LAUNCHER
#!/bin/sh
# Every path is inside the unpacked packages beside this launcher, never the machine's own.
lib="\$(dirname "\$0")/unpacked/usr/lib"
export LD_LIBRARY_PATH="\$lib/$arch:\$lib/$arch/pulseaudio\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"
exec "\$lib/chromium/chromium" "\$@"
LAUNCHER
    chmod +x "$work/chromium"
    rm -rf "$dir/root" "$dir/unpacked"  # root: where earlier versions unpacked
    mv "$work/unpacked" "$dir/unpacked"
    # The launcher last, atomically: a concurrent run sees either no launcher or a complete install.
    mv "$work/chromium" "$launcher"
fi
echo "$launcher"
