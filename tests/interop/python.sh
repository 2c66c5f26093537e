#!/usr/bin/env bash
# Runs a Python script with an interpreter that can import TensorFlow:
# $AF_PYTHON, else the project's venv (build/venv, made by scripts/setup),
# else python3. When there is none: prints "SKIP: ..." and exits 0, or,
# where CI is set, "FAIL: ..." and exits 1 (tests/support/skip.sh).
# Usage: python.sh SCRIPT [ARGS...]
root=$(cd "$(dirname "$0")/../.." && pwd)
# shellcheck source=../support/skip.sh
source "$root/tests/support/skip.sh"
for py in "${AF_PYTHON:-}" "$root/build/venv/bin/python" python3; do
  [ -n "$py" ] || continue
  command -v "$py" >/dev/null 2>&1 || continue
  if "$py" -c 'import tensorflow' >/dev/null 2>&1; then
    exec "$py" "$@"
  fi
done
skip_missing "no Python here can import tensorflow (scripts/setup installs tensorflow-cpu into build/venv; AF_NO_TENSORFLOW=1 turns that off)"
