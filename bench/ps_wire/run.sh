#!/usr/bin/env bash
# bench/ps_wire: what a 16-bit parameter-server wire (Training.ps.wire,
# docs/training.md) costs in accuracy, and what it does to speed. Runs the
# main job (apps/examples/fmnist_mlp.pbtxt: test accuracy) and the CTR
# example (apps/examples/ctr_embedding.pbtxt: test AUC) with wire f32,
# bf16 and f16, interleaved, ROUNDS times each, in one process as the
# examples are, and prints every run and the medians per wire.
#   bench/ps_wire/run.sh [ROUNDS] [BUILD_DIR]
# (defaults: 2 rounds, build/release). Run from anywhere; the examples'
# data paths are relative to the repository root, which becomes the
# working directory. The main job needs build/data/fmnist (scripts/demo
# makes it).
# Both examples train asynchronously (the MLP: unbounded staleness; CTR:
# staleness 2), so two f32 runs differ too: compare a wire's spread with
# f32's, not one number with another.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
rounds=${1:-2}
build=${2:-$root/build/release}
bin=$build/bin/actorflow
[ -x "$bin" ] || { echo "no $bin: build the actorflow target first" >&2; exit 2; }
[ -e "$root/build/data/fmnist/complete" ] && [ -e "$root/build/data/fmnist/test-complete" ] \
  || { echo "no build/data/fmnist: run scripts/demo once first" >&2; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$root"

# topology EXAMPLE WIRE: the example with ps { ... wire: WIRE }.
topology() {
  local out=$work/$1-$2.pbtxt
  sed -E "s/^(  ps \\{[^}]*)\\}/\\1 wire: \"$2\" }/" "apps/examples/$1.pbtxt" >"$out"
  grep -q "wire: \"$2\"" "$out" || { echo "cannot set the wire in $1" >&2; exit 1; }
  echo "$out"
}

results=$work/results
: >"$results"
for ((r = 1; r <= rounds; ++r)); do
  for example in fmnist_mlp ctr_embedding; do
    for wire in f32 bf16 f16; do
      topo=$(topology "$example" "$wire")
      timeout -k 5 900 "$bin" run "$topo" --no-progress --report-json "$work/report.json" \
        >"$work/out" 2>"$work/err" || { cat "$work/err" >&2; exit 1; }
      score=$(sed -n 's/^  test (step [0-9]*): loss [0-9.]*, \(accuracy\|AUC\) \([0-9.]*\).*/\2/p' "$work/out")
      rate=$(sed -n 's/^  training: .* \([0-9]*\) samples\/s.*/\1/p' "$work/out")
      [ -n "$score" ] && [ -n "$rate" ] || { cat "$work/out" >&2; echo "no test score" >&2; exit 1; }
      echo "$example $wire $score $rate" | tee -a "$results" >&2
    done
  done
done

echo "| example | metric | wire | runs | median | all runs | samples/s (median) |"
echo "|---|---|---|---|---|---|---|"
python3 - "$results" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
for ex, metric in (("fmnist_mlp", "test accuracy"), ("ctr_embedding", "test AUC")):
    for wire in ("f32", "bf16", "f16"):
        got = [r for r in rows if r[0] == ex and r[1] == wire]
        scores = [float(r[2]) for r in got]
        rates = [float(r[3]) for r in got]
        print(f"| {ex} | {metric} | {wire} | {len(got)} | {statistics.median(scores):.4f} "
              f"| {', '.join(f'{s:.4f}' for s in scores)} | {statistics.median(rates):.0f} |")
PY
