#!/usr/bin/env bash
# A benchmark's smoke test (bench/CMakeLists.txt): runs COMMAND, shows its
# output, and passes only when COMMAND exits with status 0 AND a line of
# its output matches PATTERN (grep -E), its result table. (CTest's
# PASS_REGULAR_EXPRESSION alone would ignore the exit status: a benchmark
# that printed its table and then crashed would pass.)
# Usage: smoke.sh PATTERN COMMAND [ARGS...]
set -u
[ $# -ge 2 ] || { echo "usage: smoke.sh PATTERN COMMAND [ARGS...]" >&2; exit 2; }
pattern=$1; shift
out=$(mktemp)
trap 'rm -f "$out"' EXIT
"$@" >"$out" 2>&1
rc=$?
cat "$out"
if [ "$rc" -ne 0 ]; then
  echo "FAIL: $1 exited with status $rc"
  exit 1
fi
if ! grep -qE -- "$pattern" "$out"; then
  echo "FAIL: no line of $1's output matches '$pattern'"
  exit 1
fi
echo "PASS: $1 exited with 0 and printed its table"
