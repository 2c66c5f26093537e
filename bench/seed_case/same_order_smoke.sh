#!/usr/bin/env bash
# The test bench.seed_case.same_order: bench/seed_case/same_order.sh on
# 60,000 + 10,000 generated rows (one seed, about 35 s): ActorFlow and
# TensorFlow, on the same batches in the same order from the same initial
# weights, must end within 0.0005 AUC of each other. The control: the
# same with the peer's initial weights drawn from another seed must fail
# the check (on this data that moves the final AUC by about 0.003), so the
# check can tell the same training from another one.
#   same_order_smoke.sh ACTORFLOW_BINARY
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
# shellcheck source=../../tests/support/skip.sh
source "$root/tests/support/skip.sh"
py=${AF_TF_PYTHON:-$root/build/venv/bin/python}
[ -x "$py" ] && "$py" -c 'import tensorflow' >/dev/null 2>&1 \
  || skip_missing "$py cannot import tensorflow (scripts/setup installs tensorflow-cpu into build/venv)"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export AF_BIN=$1 AF_SAME_ORDER_TOLERANCE=0.0005

"$root/bench/seed_case/same_order.sh" 1 "$work/data" 60000 10000 >"$work/same.out" 2>"$work/same.err"
rc=$?
cat "$work/same.out"
if [ "$rc" -ne 0 ] || ! grep -q '^final AUC: ActorFlow' "$work/same.out"; then
  echo "FAIL: same_order.sh exited $rc or printed no final AUC; its errors:"
  tail -20 "$work/same.err"
  exit 1
fi

AF_SAME_ORDER_PEER_SEED=2 "$root/bench/seed_case/same_order.sh" 1 "$work/data" 60000 10000 \
  >"$work/other.out" 2>"$work/other.err"
rc=$?
echo "control (the peer's initial weights from seed 2):"
cat "$work/other.out"
if [ "$rc" -ne 1 ] || ! grep -q 'the two trainings are not the same' "$work/other.out"; then
  echo "FAIL: with other initial weights on the peer's side same_order.sh exited $rc, not 1 with 'the two trainings are not the same'"
  tail -20 "$work/other.err"
  exit 1
fi
echo "PASS: the same training ends at the same AUC on both sides; another one does not"
