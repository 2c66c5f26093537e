#!/usr/bin/env bash
# The Python package's tests against the extension module and binary of the
# sanitizer build (AddressSanitizer + UndefinedBehaviorSanitizer), in
# Debian's Python (not instrumented) with ASan's runtime preloaded, as ASan
# needs to be first in a process (and libstdc++ right after it). Leak checking is off: CPython does not
# free everything at exit. Child processes (the `actorflow` binary that
# actorflow.run() starts, the examples, the Ctrl-C test's child) inherit
# the preload and run under the sanitizers too.
#   tests/python/run_asan.sh MODULE BINARY [PYTEST ARGS...]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/../support/skip.sh"
module=$(realpath "$1") binary=$(realpath "$2"); shift 2
py=/usr/bin/python3
for m in numpy torch pytest; do
  "$py" -c "import $m" 2>/dev/null || skip_missing "python module $m is missing for $py (scripts/setup installs it)"
done
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/actorflow/_bin"
cp "$here/../../python/actorflow/"*.py "$stage/actorflow/"
ln -s "$module" "$stage/actorflow/"
ln -s "$binary" "$stage/actorflow/_bin/actorflow"
export PYTHONPATH=$stage PYTHONDONTWRITEBYTECODE=1
# libstdc++ too: ASan finds the real __cxa_throw only in libraries loaded
# before it (CPython itself does not link libstdc++).
export LD_PRELOAD="$(gcc -print-file-name=libasan.so) $(gcc -print-file-name=libstdc++.so.6)"
export ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1}:halt_on_error=1
cd "$here"
exec "$py" -m pytest -q -p no:cacheprovider "$@" .
