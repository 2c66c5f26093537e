#!/usr/bin/env bash
# Your own model against PyTorch at its best on the same 2 cores
# (docs/benchmarks.md, "TorchScript models"): apps/examples/fmnist_resnet.py's
# residual CNN with batch norm, trained on Fashion-MNIST for EPOCHS epochs
#   - by ActorFlow: apps/examples/fmnist_resnet.pbtxt (2 asynchronous
#     trainers against 2 PS shards, the module run by libtorch, the images
#     read losslessly from the IDX files and standardized) with EPOCHS
#     epochs and Adam's rate constant, as the peers have it;
#   - by PyTorch Hogwild: 2 processes x 1 thread sharing the model
#     (bench/torchscript/pytorch_peer.py --mode hogwild);
#   - by PyTorch DDP: 2 processes, gloo (--mode ddp);
# the same images, normalization, batch 64 per worker, Adam 1e-3 and
# epsilon 1e-7, ROUNDS times interleaved (round r: ActorFlow, Hogwild, DDP,
# all seeded with r). Samples/s count the training loop only on both sides
# (ActorFlow: the trainers' own rate, first batch to last step, summed;
# PyTorch: the parent's clock from ready to the last epoch's end). Prints a
# table per round, the median ratio of ActorFlow's samples/s to the better
# peer's, and the accuracies.
#   bench/torchscript/run.sh [ROUNDS] [EPOCHS]
# Needs the Release build (scripts/setup) and Debian's python3-torch.
set -euo pipefail
if [ -z "${AF_BENCH_PINNED:-}" ] && command -v taskset >/dev/null; then
  AF_BENCH_PINNED=1 exec taskset -c 0,1 "$0" "$@"
fi
root=$(cd "$(dirname "$0")/../.." && pwd)
rounds=${1:-2} epochs=${2:-2}
bin=$root/build/release/bin/actorflow
[ -x "$bin" ] || { echo "run.sh: $bin is missing; run scripts/setup first" >&2; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
/usr/bin/python3 "$root/apps/examples/fmnist_resnet.py" --out "$work/fmnist_resnet.pt" >&2

job() { # SEED -> the ActorFlow job: the example, for EPOCHS epochs, at
  # Adam's constant rate as the peers, evaluated once at the end, without
  # checkpoints.
  sed -e "s#build/models/fmnist_resnet.pt#$work/fmnist_resnet.pt#" \
      -e "s#^runtime { seed: 1 }\$#runtime { seed: $1 }#" \
      -e "s#cache { epochs: [0-9]* }#cache { epochs: $epochs }#" \
      -e "s#optimizer { .* }#optimizer { type: \"adam\" learning_rate: 0.001 }#" \
      -e "s#evaluator { every_steps: 2000 }#evaluator { }#" \
      -e '/^checkpoint {/,/^}/d' "$root/apps/examples/fmnist_resnet.pbtxt"
}
check_job() { # FILE: every substitution took
  grep -q "^runtime { seed: $2 }\$" "$1" && grep -q "cache { epochs: $epochs }" "$1" \
    && grep -q 'optimizer { type: "adam" learning_rate: 0.001 }$' "$1" \
    && grep -q "$work/fmnist_resnet.pt" "$1" && ! grep -q '^checkpoint {' "$1" \
    || { echo "run.sh: could not derive the job from fmnist_resnet.pbtxt" >&2; exit 1; }
}

for r in $(seq 1 "$rounds"); do
  echo "round $r/$rounds: ActorFlow" >&2
  job "$r" > "$work/af$r.pbtxt"
  check_job "$work/af$r.pbtxt" "$r"
  "$bin" run "$work/af$r.pbtxt" --no-progress --report-json "$work/af$r.json" \
    > "$work/af$r.out" 2> "$work/af$r.log" || { tail -20 "$work/af$r.log" >&2; exit 1; }
  for mode in hogwild ddp; do
    echo "round $r/$rounds: PyTorch $mode" >&2
    /usr/bin/python3 "$root/bench/torchscript/pytorch_peer.py" --mode "$mode" \
      --epochs "$epochs" --seed "$r" > "$work/$mode$r.json" 2> "$work/$mode$r.log" \
      || { tail -20 "$work/$mode$r.log" >&2; exit 1; }
  done
done

python3 - "$work" "$rounds" "$epochs" <<'PY'
import json, statistics, sys
work, rounds, epochs = sys.argv[1], int(sys.argv[2]), sys.argv[3]
print(f"fmnist_resnet, {epochs} epoch(s), 2 cores, {rounds} round(s) interleaved\n")
print("| round (= seed) | system | samples/s | test accuracy | test loss |")
print("|---|---|---|---|---|")
ratios, acc = [], {"ActorFlow": [], "pytorch-hogwild": [], "pytorch-ddp": []}
for r in range(1, rounds + 1):
    m = json.load(open(f"{work}/af{r}.json"))["metrics"]
    sps = sum(v["samples_per_s"] for k, v in m.items() if k.startswith("train["))
    ev = m["evaluate[0]"]
    print(f"| {r} | ActorFlow (2 async trainers, libtorch) | {sps:.0f} | {ev['test_accuracy']:.4f} | {ev['test_loss']:.4f} |")
    acc["ActorFlow"].append(ev["test_accuracy"])
    best = 0
    for mode in ("hogwild", "ddp"):
        p = json.loads(open(f"{work}/{mode}{r}.json").read().strip().splitlines()[-1])
        print(f"| {r} | PyTorch {mode} (2 processes x 1 thread) | {p['samples_per_s']:.0f} | {p['test_accuracy']:.4f} | {p['test_loss']:.4f} |")
        acc[p["peer"]].append(p["test_accuracy"])
        best = max(best, p["samples_per_s"])
    ratios.append(sps / best)
print(f"\nActorFlow / the better PyTorch peer, samples/s per round: "
      f"{', '.join('%.2f' % x for x in ratios)}; median {statistics.median(ratios):.2f}")
for k, v in acc.items():
    print(f"{k}: mean test accuracy {statistics.mean(v):.4f} over {len(v)} round(s)")
PY
