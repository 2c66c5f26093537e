#!/usr/bin/env bash
# bench/train_fmnist: training throughput and time to a test accuracy, for
# ActorFlow (1 and 2 trainers; staleness tau = 0, 4 and unbounded) next to
# PyTorch (Debian's python3-torch) at its two best settings for 2 cores:
# one process with 1 thread, and Hogwild (the model in shared memory, 2
# processes x 1 thread, each with its own Adam), all training the same MLP
# on the same data with the same batch size, optimizer and number of
# samples, ROUNDS times interleaved (the machine is shared and noisy: read
# the per-round ratios). Prints a markdown table (docs/benchmarks.md shows
# one).
#   bench/train_fmnist/run.sh [ROUNDS] [EPOCHS] [TARGET]
# Needs a Release build (scripts/setup && cmake --build build/release).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
here=$root/bench/train_fmnist
bin=$root/build/release/bin/actorflow
rounds=${1:-3}
epochs=${2:-10}
target=${3:-0.88}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

need=()
for p in python3-torch libopenblas0-pthread dataset-fashion-mnist; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || need+=("$p")
done
if [ ${#need[@]} -gt 0 ]; then
  sudo=""; [ "$(id -u)" -eq 0 ] || sudo=sudo
  $sudo apt-get install -y -q --no-install-recommends "${need[@]}" >&2
fi
# AF_BUILD_LOCK=FILE: build under flock FILE (others build in the same tree).
${AF_BUILD_LOCK:+flock "$AF_BUILD_LOCK"} cmake --build "$root/build/release" --target actorflow >&2
# A copy, so that every round runs the same binary even when the tree is
# rebuilt during the benchmark.
cp "$bin" "$work/actorflow"
bin=$work/actorflow
data=$(dirname "$(dpkg -L dataset-fashion-mnist | grep train-images-idx3)")

# ActorFlow: "T TAU" -> "samples/s seconds-to-target final-accuracy".
# samples/s is the trainers' own rate summed (after the data is loaded,
# as the peer's); the evaluator runs alongside and takes its share of the
# two cores, which the peer's figure leaves out.
actorflow() {
  local t=$1 tau=$2 prefetch=${3:-false} ps="shards: 2"
  [ "$tau" = inf ] || ps="shards: 2 staleness: $tau"
  sed -e "s|@TRAINERS@|$t|" -e "s|@PS@|$ps|" -e "s|@EPOCHS@|$epochs|" \
      -e "s|@PREFETCH@|$prefetch|" \
      -e "s|@DATA@|$data|g" "$here/actorflow_mlp.pbtxt.in" > "$work/af.pbtxt"
  "$bin" run "$work/af.pbtxt" --no-progress > "$work/out" 2>&1
  python3 - "$work/out" "$target" <<'PY'
import re, sys, datetime
lines = open(sys.argv[1]).read().splitlines()
target = float(sys.argv[2])
def ts(line):
    return datetime.datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S.%f")
start = rate = None
hit = "-"
final = None
rate = 0.0
for l in lines:
    if start is None and " job '" in l:
        start = ts(l)
    m = re.search(r"train\[\d+\]: \d+ steps, \d+ samples, loss [0-9.]+, (\d+) samples/s", l)
    if m:
        rate += float(m.group(1))
    m = re.search(r"evaluate\[0\]: (final, )?step \d+: test loss [0-9.]+, accuracy ([0-9.]+)", l)
    if m:
        acc = float(m.group(2))
        if hit == "-" and acc >= target:
            hit = "%.2f" % (ts(l) - start).total_seconds()
        if m.group(1):
            final = acc
print("%.0f %s %.4f" % (rate, hit, final))
PY
}

pytorch() {  # PROCESSES -> as actorflow()
  /usr/bin/python3 "$here/torch_peer.py" --data "$data" --epochs "$epochs" \
    --target "$target" --eval-every 500 --threads 1 --processes "$1" | python3 -c '
import json, sys
r = json.loads(sys.stdin.readlines()[-1])
t = r["time_to_target_s"]
print("%.0f %s %.4f" % (r["samples_per_s"], "-" if t is None else "%.2f" % t, r["final_accuracy"]))'
}

configs=("1 inf" "1 4" "1 0" "2 inf" "2 4" "2 0" "1 inf true" "2 inf true")
declare -A runs
for ((r = 0; r < rounds; ++r)); do
  echo "round $((r + 1))/$rounds" >&2
  runs[torch]+="$(pytorch 1);"
  runs[hogwild]+="$(pytorch 2);"
  for c in "${configs[@]}"; do
    runs[$c]+="$(actorflow $c);"
  done
done

python3 - "$target" "$epochs" "${runs[torch]}" "${runs[hogwild]}" <<PY
import statistics, sys
target, epochs, torch, hogwild = sys.argv[1:5]
runs = {}
$(for c in "${configs[@]}"; do echo "runs['$c'] = '${runs[$c]}'"; done)
def parse(s):
    return [x.split() for x in s.strip(';').split(';')]
t = parse(torch)
h = parse(hogwild)
print(f"MLP 784-256-128-10, Adam 0.001, batch 64, {epochs} epochs; time to "
      f"{float(target):.0%} test accuracy (evaluated every 500 steps). Median of "
      f"{len(t)} interleaved rounds; ratios = median of the per-round ratios "
      f"against PyTorch 1 process x 1 thread and PyTorch Hogwild 2 processes x 1 thread.")
print()
print("| engine | trainers | staleness | prefetch | samples/s | vs PyTorch 1 thread | vs PyTorch Hogwild | s to target | final accuracy |")
print("|---|---|---|---|---|---|---|---|---|")
def med(xs):
    return statistics.median(xs)
def fmt_hit(rows):
    hits = [float(r[1]) for r in rows if r[1] != "-"]
    return "%.1f" % med(hits) if len(hits) == len(rows) else f"{len(hits)}/{len(rows)} reached"
def ratio(rows, base):
    return "%.2f" % med([float(a[0]) / float(b[0]) for a, b in zip(rows, base)])
def row(engine, trainers, tau, pre, rows):
    print(f"| {engine} | {trainers} | {tau} | {pre} | "
          f"{med([float(r[0]) for r in rows]):,.0f} | {ratio(rows, t)} | {ratio(rows, h)} | "
          f"{fmt_hit(rows)} | {med([float(r[2]) for r in rows]):.4f} |")
row("PyTorch", "1 process x 1 thread", "-", "-", t)
row("PyTorch Hogwild", "2 processes x 1 thread", "unbounded (lock-free)", "-", h)
for c, s in runs.items():
    trainers, tau, *pre = c.split()
    row("ActorFlow", trainers, "unbounded" if tau == "inf" else tau,
        "yes" if pre else "no", parse(s))
PY
