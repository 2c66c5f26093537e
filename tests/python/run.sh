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
cd "$here"
exec "$py" -m pytest -q -p no:cacheprovider "$@" .
