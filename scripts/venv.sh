# Sourced by the other scripts: makes .cache/venv (re)installed whenever pyproject.toml changes, and activates it.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
venv="$root/.cache/venv"
py=${PYTHON:-python3}
"$py" -c 'import sys; sys.exit(sys.version_info < (3, 11))' || { echo "querator needs Python >= 3.11" >&2; exit 1; }
stamp="$venv/.installed-$(sha256sum "$root/pyproject.toml" | cut -c1-16)"
if [ ! -f "$stamp" ]; then
    rm -rf "$venv"
    "$py" -m venv "$venv"
    "$venv/bin/pip" install -q --upgrade pip
    "$venv/bin/pip" install -q -e "$root[${QUERATOR_EXTRAS:-dev}]"
    touch "$stamp"
fi
# shellcheck disable=SC1091
. "$venv/bin/activate"
