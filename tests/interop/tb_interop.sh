#!/usr/bin/env bash
# TensorBoard (the tensorboard package from PyPI) reads what `actorflow run
# --logdir` writes: the CTR training job with checkpoints, then the same
# job resumed from its final checkpoint (a SessionLog START at that step).
# Usage: tb_interop.sh ACTORFLOW
set -eu
bin=$1
here=$(cd "$(dirname "$0")" && pwd)
data=$here/../apps/data
py() { bash "$here/python.sh" "$@"; }
# shellcheck source=../support/skip.sh
source "$here/../support/skip.sh"
# Without TensorFlow python.sh says SKIP (exit 0), or FAIL where CI is set.
check=$(py -c 'import tensorflow') || { echo "$check"; exit 1; }
if grep -q '^SKIP:' <<<"$check"; then echo "$check"; exit 0; fi
py -c 'import tensorboard.backend.event_processing.event_accumulator' >/dev/null 2>&1 \
  || skip_missing "the tensorboard package cannot be imported (scripts/setup installs it into build/venv)"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# Histograms every 50 steps of replica 0 (about 390 steps each).
sed 's/trainer { log_every_steps: 0 }/trainer { log_every_steps: 0 histogram_every_steps: 50 }/' \
  "$data/train_ctr.pbtxt" >"$tmp/job.pbtxt"
grep -q histogram_every_steps "$tmp/job.pbtxt" || { echo "FAIL: train_ctr.pbtxt changed"; exit 1; }
printf '\ncheckpoint { dir: "%s/ckpt" }\n' "$tmp" >>"$tmp/job.pbtxt"
"$bin" run "$tmp/job.pbtxt" --logdir "$tmp/logs" --no-progress >"$tmp/out" 2>"$tmp/err" \
  || { cat "$tmp/err"; exit 1; }
py "$here/tb_interop.py" --logdir "$tmp/logs" --summary "$tmp/out"
step=$(sed -n 's/^  checkpoints written: .*ckpt-0*\([0-9]\+\)$/\1/p' "$tmp/out")
[ -n "$step" ] || { echo "FAIL: no checkpoint in the summary"; cat "$tmp/out"; exit 1; }
sleep 1 # (a new file name: its 10-digit seconds)
"$bin" run "$tmp/job.pbtxt" --logdir "$tmp/logs" --no-progress --resume >"$tmp/out2" 2>"$tmp/err2" \
  || { cat "$tmp/err2"; exit 1; }
grep -q "resumed from .* (step $step)" "$tmp/out2" \
  || { echo "FAIL: the second run did not resume at step $step"; cat "$tmp/out2"; exit 1; }
py "$here/tb_interop.py" --logdir "$tmp/logs" --summary "$tmp/out" --resumed-step "$step"
