#!/usr/bin/env bash
# The Python front door against PyTorch's DataLoader (docs/benchmarks.md,
# "Python: ActorFlow's iterator against the DataLoader"):
#  1. one PyTorch training loop (train_loop.py: a small CNN, SGD, batches of
#     64 random-resized crops of the ImageNet-sized photo set of
#     bench/input_pipeline) fed by ActorFlow's iterator and by the
#     DataLoader with 2 workers (pin_memory off and on) and 3 workers,
#     ROUNDS times interleaved; images/s (after 4 warm-up batches) and
#     wall time, and per round the ratio to the best DataLoader of that
#     round;
#  2. the per-batch cost of crossing into Python: batches/s of the same
#     topology (Fashion-MNIST test images, 64 per batch, replayed by a
#     cache) to a C++ actor (outlet_rate) and to Python's iterator
#     (outlet_rate.py), interleaved.
# Needs scripts/setup (build/pyvenv with the package, build/release) and
# Debian's python3-torchvision (installed here if missing).
#   bench/python/run.sh [ROUNDS] [EPOCHS]
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
here=$root/bench/python
rounds=${1:-5}
epochs=${2:-2}
py=$root/build/pyvenv/bin/python
images=${AF_BENCH_IMAGES:-/tmp/af_bench_images}
"$py" -c 'import actorflow' 2>/dev/null || {
  echo "run.sh: $py cannot import actorflow: run scripts/setup" >&2
  exit 2
}
if ! dpkg-query -W -f='${Status}' python3-torchvision 2>/dev/null | grep -q "install ok installed"; then
  sudo=""; [ "$(id -u)" -eq 0 ] || sudo=sudo
  $sudo apt-get install -y -q --no-install-recommends python3-torchvision >&2
fi
cmake --build "$root/build/release" --target outlet_rate >&2
/usr/bin/python3 "$root/bench/input_pipeline/make_dataset.py" --out "$images" --count 2000 --seed 0 >&2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

fm=$(dpkg -L dataset-fashion-mnist | grep t10k-images-idx3)
cat > "$work/outlet.pbtxt" <<EOF
name: "outlet-rate"
stage { name: "read" type: "idx_source"
        idx_source { images: "$fm" labels: "${fm/images-idx3/labels-idx1}"
                     records_per_item: 64 } }
stage { name: "cache" type: "cache" input { stage: "read" } cache { epochs: 300 } }
stage { name: "out" type: "outlet" input { stage: "cache" } }
EOF

field() { "$py" -c 'import json,sys; print(json.loads(sys.stdin.readlines()[-1])[sys.argv[1]])' "$1"; }
loop() { "$py" "$here/train_loop.py" --data "$images" --epochs "$epochs" "$@"; }
: > "$work/results"
for ((r = 1; r <= rounds; ++r)); do
  for c in actorflow dl2 dl2pin dl3; do
    echo "run.sh: round $r/$rounds: $c (load $(cut -d' ' -f1 /proc/loadavg))" >&2
    case $c in
      actorflow) out=$(loop --loader actorflow) ;;
      dl2) out=$(loop --loader dataloader --workers 2) ;;
      dl2pin) out=$(loop --loader dataloader --workers 2 --pin-memory) ;;
      dl3) out=$(loop --loader dataloader --workers 3) ;;
    esac
    echo "$r $c $(echo "$out" | field images_per_s) $(echo "$out" | field wall_s)" >> "$work/results"
  done
  for c in cpp python; do
    case $c in
      cpp) out=$("$root/build/release/bin/outlet_rate" "$work/outlet.pbtxt") ;;
      python) out=$("$py" "$here/outlet_rate.py" "$work/outlet.pbtxt") ;;
    esac
    echo "$r outlet_$c $(echo "$out" | field batches_per_s) $(echo "$out" | field seconds)" >> "$work/results"
  done
done

/usr/bin/python3 - "$work/results" "$rounds" "$epochs" <<'PY'
import collections, statistics, sys
path, rounds, epochs = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rate = collections.defaultdict(dict)
wall = collections.defaultdict(dict)
for line in open(path):
    r, c, v, w = line.split()
    rate[c][int(r)] = float(v)
    wall[c][int(r)] = float(w)
names = {
    "actorflow": "ActorFlow's iterator (2 scheduler threads, 2 decode replicas)",
    "dl2": "DataLoader, 2 workers, persistent, pin_memory=False",
    "dl2pin": "DataLoader, 2 workers, persistent, pin_memory=True",
    "dl3": "DataLoader, 3 workers, persistent, pin_memory=False",
}
best = {r: max(rate[c][r] for c in ("dl2", "dl2pin", "dl3")) for r in range(1, rounds + 1)}
print(f"| same PyTorch loop ({epochs} epochs of 2,000 photographs, 2 cores) | images/s (median) | wall s (median) | vs the round's best DataLoader (median) | per round |")
print("|---|---|---|---|---|")
for c in ("actorflow", "dl2", "dl2pin", "dl3"):
    ratios = [rate[c][r] / best[r] for r in range(1, rounds + 1)]
    print(f"| {names[c]} | {statistics.median(rate[c].values()):,.0f} | {statistics.median(wall[c].values()):.2f} "
          f"| {statistics.median(ratios):.2f} | {', '.join(f'{x:.2f}' for x in ratios)} |")
print()
cpp = [rate["outlet_cpp"][r] for r in range(1, rounds + 1)]
pyr = [rate["outlet_python"][r] for r in range(1, rounds + 1)]
over = [1e6 / p - 1e6 / c for p, c in zip(pyr, cpp)]
print("| batches of 64 Fashion-MNIST images from a cache, 2 threads | batches/s (median) | per round |")
print("|---|---|---|")
print(f"| outlet to a C++ actor (outlet_rate) | {statistics.median(cpp):,.0f} | {', '.join(f'{x:,.0f}' for x in cpp)} |")
print(f"| outlet to Python's iterator (outlet_rate.py) | {statistics.median(pyr):,.0f} | {', '.join(f'{x:,.0f}' for x in pyr)} |")
print(f"| Python's extra cost per batch, µs (1/python - 1/C++, paired) | {statistics.median(over):.1f} | {', '.join(f'{x:.1f}' for x in over)} |")
PY
