#!/usr/bin/env bash
# The cost of running a model through libtorch (docs/benchmarks.md,
# "TorchScript models"): the same MLP (784-256-ReLU-128-ReLU-10, softmax
# cross-entropy, fmnist_mlp.pbtxt's) as built-in layers and as a TorchScript
# module, each trained by one trainer for one epoch of Fashion-MNIST (read
# from the IDX files, standardized), every step timed
# (timing_every_steps: 1), ROUNDS times interleaved. Prints the trainer's
# mean step time and its compute part (forward and backward; for
# TorchScript also taking the pulled values in and the gradients out) for
# each, and the ratios TorchScript / built-in.
#   bench/torchscript/step_overhead.sh [ROUNDS]
set -euo pipefail
if [ -z "${AF_BENCH_PINNED:-}" ] && command -v taskset >/dev/null; then
  AF_BENCH_PINNED=1 exec taskset -c 0,1 "$0" "$@"
fi
root=$(cd "$(dirname "$0")/../.." && pwd)
rounds=${1:-3}
bin=$root/build/release/bin/actorflow
[ -x "$bin" ] || { echo "step_overhead.sh: $bin is missing; run scripts/setup first" >&2; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
images=$(dpkg -L dataset-fashion-mnist | grep 'train-images-idx3')
# (TorchScript compiles from source files: the script goes into one.)
cat > "$work/mlp.py" <<'PY'
import sys
from typing import Tuple
import torch
import torch.nn.functional as F
from torch import nn

class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(784, 256), nn.ReLU(),
                                 nn.Linear(256, 128), nn.ReLU(), nn.Linear(128, 10))

    def forward(self, image: torch.Tensor, label: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        logits = self.net(image.flatten(1))
        return F.cross_entropy(logits, label), logits

torch.jit.script(MLP()).save(sys.argv[1])
PY
/usr/bin/python3 "$work/mlp.py" "$work/mlp.pt"

job() { # MODEL SEED
  cat <<JOB
name: "step-overhead"
runtime { seed: $2 }
training {
  model { $1 }
  optimizer { type: "adam" learning_rate: 0.001 }
}
stage { name: "read" type: "idx_source"
  idx_source { images: "$images" labels: "${images/images-idx3/labels-idx1}"
               records_per_item: 64 } }
stage { name: "norm" type: "numeric" input { stage: "read" }
  numeric { feature { input: "image" op: "standardize" mean: 72.93 std: 90.015 } } }
stage { name: "batch" type: "batcher" input { stage: "norm" } batcher { batch_size: 64 } }
stage { name: "train" type: "trainer" input { stage: "batch" window: 4 }
  trainer { log_every_steps: 0 timing_every_steps: 1 } }
JOB
}
builtin='input: "image" input_shape: [784]
    layer { type: "dense" units: 256 } layer { type: "relu" }
    layer { type: "dense" units: 128 } layer { type: "relu" }
    layer { type: "dense" units: 10 }'
torchscript="torchscript { file: \"$work/mlp.pt\" } inputs { field: \"image\" } inputs { field: \"label\" }"
for r in $(seq 1 "$rounds"); do
  for kind in builtin torchscript; do
    echo "round $r/$rounds: $kind" >&2
    job "${!kind}" "$r" > "$work/$kind$r.pbtxt"
    "$bin" run "$work/$kind$r.pbtxt" --no-progress --report-json "$work/$kind$r.json" \
      > /dev/null 2> "$work/$kind$r.log" || { tail -20 "$work/$kind$r.log" >&2; exit 1; }
  done
done
python3 - "$work" "$rounds" <<'PY'
import json, statistics, sys
work, rounds = sys.argv[1], int(sys.argv[2])
print("MLP 784-256-128-10, batch 64, 1 trainer, 1 epoch, every step timed\n")
print("| round | model | steps timed | step ms | compute ms | pull ms | push ms |")
print("|---|---|---|---|---|---|---|")
step, compute = [], []
for r in range(1, rounds + 1):
    row = {}
    for kind in ("builtin", "torchscript"):
        t = json.load(open(f"{work}/{kind}{r}.json"))["step_time"][0]
        row[kind] = t
        print(f"| {r} | {kind} | {t['timed_steps']} | {t['step_ms']:.3f} | {t['compute_ms']:.3f} | {t['pull_ms']:.3f} | {t['push_ms']:.3f} |")
    step.append(row["torchscript"]["step_ms"] / row["builtin"]["step_ms"])
    compute.append(row["torchscript"]["compute_ms"] / row["builtin"]["compute_ms"])
print(f"\nTorchScript / built-in, step time per round: {', '.join('%.2f' % x for x in step)}; median {statistics.median(step):.2f}")
print(f"TorchScript / built-in, compute per round: {', '.join('%.2f' % x for x in compute)}; median {statistics.median(compute):.2f}")
PY
