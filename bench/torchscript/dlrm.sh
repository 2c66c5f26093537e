#!/usr/bin/env bash
# DLRM's dense part as your own model against the built-in layers on the
# case study's data (docs/benchmarks.md, "TorchScript models"):
# apps/examples/criteo_dlrm.pbtxt (a TorchScript module: bottom MLP, dot
# interaction, top MLP) and apps/examples/criteo_like.pbtxt (built-in
# dense 256-128-1), the same tables in the PS, pipeline, optimizer and 6
# asynchronous trainers, EPOCHS epochs, ROUNDS times interleaved (round r
# seeds both with r). Prints each run's samples/s (samples trained over the
# job's wall time) and final test AUC next to the planted model's, and the
# mean AUC difference DLRM - built-in with its standard error.
#   bench/torchscript/dlrm.sh [ROUNDS] [EPOCHS] [DATA_DIR]
# DATA_DIR: bench/seed_case/prepare.sh's (made there if missing; default
# build/data/criteo_like). Against TensorFlow's ParameterServerStrategy:
# AF_SEED_CASE_EXAMPLE=criteo_dlrm bench/seed_case/run.sh.
set -euo pipefail
if [ -z "${AF_BENCH_PINNED:-}" ] && command -v taskset >/dev/null; then
  AF_BENCH_PINNED=1 exec taskset -c 0,1 "$0" "$@"
fi
root=$(cd "$(dirname "$0")/../.." && pwd)
rounds=${1:-2} epochs=${2:-1} dir=${3:-$root/build/data/criteo_like}
bin=$root/build/release/bin/actorflow
[ -x "$bin" ] || { echo "dlrm.sh: $bin is missing; run scripts/setup first" >&2; exit 2; }
"$root/bench/seed_case/prepare.sh" "$dir" >&2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
/usr/bin/python3 "$root/apps/examples/criteo_dlrm.py" --out "$work/criteo_dlrm.pt" >&2
for r in $(seq 1 "$rounds"); do
  for ex in criteo_like criteo_dlrm; do
    echo "round $r/$rounds: $ex" >&2
    sed -e "s#build/data/criteo_like#$dir#g" -e "s#^\( *\)epochs: 1\$#\1epochs: $epochs#" \
        -e "s#build/models/criteo_dlrm.pt#$work/criteo_dlrm.pt#" \
        -e "s#^runtime { seed: 1 }\$#runtime { seed: $r }#" \
        -e '/^checkpoint {/,/^}/d' "$root/apps/examples/$ex.pbtxt" > "$work/$ex$r.pbtxt"
    grep -q "^runtime { seed: $r }\$" "$work/$ex$r.pbtxt" || { echo "dlrm.sh: could not set the seed" >&2; exit 1; }
    "$bin" run "$work/$ex$r.pbtxt" --no-progress --report-json "$work/$ex$r.json" \
      > /dev/null 2> "$work/$ex$r.log" || { tail -20 "$work/$ex$r.log" >&2; exit 1; }
  done
done
python3 - "$work" "$rounds" "$epochs" <<'PY'
import json, math, statistics, sys
work, rounds, epochs = sys.argv[1], int(sys.argv[2]), sys.argv[3]
print(f"Case study data, {epochs} epoch(s), 6 trainers, 2 shards, 2 cores\n")
print("| round (= seed) | model | samples/s | final AUC | planted AUC |")
print("|---|---|---|---|---|")
auc = {"criteo_like": [], "criteo_dlrm": []}
sps = {"criteo_like": [], "criteo_dlrm": []}
for r in range(1, rounds + 1):
    for ex in auc:
        j = json.load(open(f"{work}/{ex}{r}.json"))
        m = j["metrics"]
        samples = sum(v.get("samples", 0) for k, v in m.items() if k.startswith("train["))
        ev = m["evaluate[0]"]
        auc[ex].append(ev["test_auc"])
        sps[ex].append(samples / j["elapsed_s"])
        print(f"| {r} | {ex} | {sps[ex][-1]:.0f} | {ev['test_auc']:.4f} | {ev['reference_auc']:.4f} |")
sd = lambda v: statistics.stdev(v) if len(v) > 1 else float("nan")
d = statistics.mean(auc["criteo_dlrm"]) - statistics.mean(auc["criteo_like"])
se = math.sqrt(sd(auc["criteo_dlrm"]) ** 2 / rounds + sd(auc["criteo_like"]) ** 2 / rounds)
print(f"\nmean final AUC: criteo_dlrm {statistics.mean(auc['criteo_dlrm']):.4f}, "
      f"criteo_like {statistics.mean(auc['criteo_like']):.4f}; difference {d:+.4f} (standard error {se:.4f})")
ratios = [a / b for a, b in zip(sps["criteo_dlrm"], sps["criteo_like"])]
print(f"samples/s, criteo_dlrm / criteo_like per round: {', '.join('%.2f' % x for x in ratios)}")
PY
