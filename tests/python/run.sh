#!/usr/bin/env bash
# The Python package's tests (pytest), against the package that scripts/setup
# installed with pip into build/pyvenv (a venv of Debian's Python that sees
# its python3-torch, python3-numpy and python3-pytest).
#   tests/python/run.sh VENV [PYTEST ARGS...]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/../support/skip.sh"
venv=$(realpath -m "$1"); shift
py=$venv/bin/python
[ -x "$py" ] || skip_missing "no $venv (scripts/setup makes it and installs the package into it)"
for m in actorflow numpy torch pytest; do
  "$py" -c "import $m" 2>/dev/null || skip_missing "python module $m is missing in $venv (scripts/setup installs it)"
done
# The package in the venv must be this tree's: scripts/setup reinstalls it.
installed=$("$py" -c 'import actorflow, os; print(os.path.dirname(actorflow.__file__))')
root=$(cd "$here/../.." && pwd)
for f in "$root"/python/actorflow/*.py; do
  cmp -s "$f" "$installed/$(basename "$f")" || {
    echo "FAIL: $installed/$(basename "$f") is not this tree's $f: run scripts/setup (it pip-installs the package)"
    exit 1
  }
done
built=$(ls "$root"/build/release/python/_actorflow*.so 2>/dev/null | head -1)
if [ -n "$built" ] && [ "$built" -nt "$(ls "$installed"/_actorflow*.so | head -1)" ]; then
  echo "FAIL: the installed module is older than $built: run scripts/setup (it pip-installs the package)"
  exit 1
fi
cd "$here"
export PYTHONDONTWRITEBYTECODE=1
exec "$py" -m pytest -q -p no:cacheprovider "$@" .
