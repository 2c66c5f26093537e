#!/usr/bin/env bash
# Checks bench/smoke.sh itself (test bench.smoke_wrapper): with a real
# benchmark, it passes a good run, and fails a run that printed its table
# but exited non-zero, one that exited 0 without the table, and one killed
# by a signal after the table.
# Usage: smoke_test.sh STREAM_OVERHEAD_BINARY
set -u
bin=$1
here=$(cd "$(dirname "$0")" && pwd)
smoke=$here/smoke.sh
pattern='\| af::tensor deserialize \|'
bench="'$bin' --items 2000 --reps 1"
fails=0
log=$(mktemp)
trap 'rm -f "$log"' EXIT
expect() { # WANT_RC DESCRIPTION COMMAND
  local want=$1 what=$2 rc; shift 2
  bash "$smoke" "$pattern" bash -c "$1" >"$log" 2>&1
  rc=$?
  if { [ "$want" = 0 ] && [ "$rc" -ne 0 ]; } || { [ "$want" != 0 ] && [ "$rc" -eq 0 ]; }; then
    echo "FAIL: $what: smoke.sh exited with $rc"; cat "$log"; fails=1
  else
    echo "ok: $what: smoke.sh exited with $rc ($(tail -1 "$log"))"
  fi
}
expect 0 "the benchmark as it is" "$bench"
# The table printed, then a non-zero exit: what PASS_REGULAR_EXPRESSION let pass.
out=$(bash -c "$bench; exit 3" 2>&1)
grep -qE -- "$pattern" <<<"$out" || { echo "FAIL: the benchmark printed no table"; exit 1; }
expect 1 "the table, then exit 3" "$bench; exit 3"
expect 1 "the table, then SIGABRT" "$bench; kill -ABRT \$\$"
expect 1 "exit 0 without the table" "$bench | grep -vE -- '$pattern'"
[ "$fails" -eq 0 ] || exit 1
echo "PASS"
