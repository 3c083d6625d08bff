# Sourced by the other scripts: makes .cache/venv with the package and the extras in $QUERATOR_EXTRAS
# (comma-separated, none by default), rebuilt whenever pyproject.toml changes, and activates it.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
venv="$root/.cache/venv"
py=${PYTHON:-python3}
"$py" -c 'import sys; sys.exit(sys.version_info < (3, 11))' || { echo "querator needs Python >= 3.11" >&2; exit 1; }
project=$(sha256sum "$root/pyproject.toml" | cut -c1-16)
extras=${QUERATOR_EXTRAS:-}
if [ ! -f "$venv/.project-$project" ]; then
    rm -rf "$venv"
    "$py" -m venv "$venv"
    "$venv/bin/pip" install -q --upgrade pip
    touch "$venv/.project-$project"
fi
# One stamp per set of extras: serve installs the package alone, test adds its tools on top.
stamp="$venv/.installed-${extras:-package}"
if [ ! -f "$stamp" ]; then
    "$venv/bin/pip" install -q -e "$root${extras:+[$extras]}"
    touch "$stamp"
fi
# shellcheck disable=SC1091
. "$venv/bin/activate"
