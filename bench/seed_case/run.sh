#!/usr/bin/env bash
# The seed's case study, side by side (docs/case-study.md): ActorFlow
# (apps/examples/criteo_like.pbtxt: 6 asynchronous trainers, 2 PS shards)
# in one process, and with its 2 shards on 2 `actorflow node` processes on
# 127.0.0.1 (started here, and stopped), against the seed's own system,
# tf.data + ParameterServerStrategy with 6 workers and 2 PS processes
# (bench/seed_case/tf_peer.py), on the same TFRecords, the same 2 cores,
# the same model, batch, epochs and optimizer, ROUNDS times interleaved
# (round 1: ActorFlow, ActorFlow with nodes, TensorFlow; round 2: ...).
# Round r seeds all three with r: ActorFlow's runtime.seed (its initial
# weights and the order of its data) and the peer's --seed (its initial
# weights; its data order is not deterministic). The final AUC moves by
# about 0.001 from one seed to another in both systems, so the AUCs are
# compared as means over the rounds, next to their spread. A seed is not
# the same draw on both sides (each system turns it into its own initial
# weights), so the AUCs are compared unpaired: the difference of the means
# and its standard error, sqrt(var_a/n_a + var_b/n_b) with the sample
# variances over the rounds.
# Prints a markdown table per round, the medians of the paired speed
# ratios, and the mean AUC of each system with that difference.
#   bench/seed_case/run.sh [ROUNDS] [EPOCHS] [DATA...]
# AF_SEED_CASE_EXAMPLE=criteo_dlrm runs apps/examples/criteo_dlrm.pbtxt
# (DLRM's dense part as a TorchScript module) as ActorFlow's side instead.
# AF_SEED_CASE_NODES=0 leaves out the runs with the shards on nodes (a
# round then takes the ActorFlow run and the TensorFlow run).
# DATA: DIR or DIR:SEED, the data of bench/seed_case/prepare.sh in DIR,
# generated with SEED (default 1; made there if missing), default
# build/data/criteo_like:1. One data set's AUCs carry the luck of its one
# draw (the case study's own favours TensorFlow by about 0.0004, the data
# set of seed 2 ActorFlow by 0.0003, of seed 4 TensorFlow by 0.0010:
# docs/case-study.md, "Four data sets"), so several data sets may
# be given: each round then runs every data set in turn, the tables and
# AUC means are per data set, and a last line pools the differences: their
# mean over the data sets, with standard error sqrt(sum of the per-set
# squared errors) / number of sets. The target AUC for "time to target" is
# the planted model's test AUC minus 0.02, per data set (AF_TARGET_AUC sets
# one for all). AF_SEED_CASE_ROWS and AF_SEED_CASE_TEST_ROWS: the rows of
# data sets made here (default 2000000 and 100000; a smaller one is
# another data set, for smoke runs). Needs the Release build and TensorFlow
# in build/venv (scripts/setup).
set -euo pipefail
# Every contender on the same 2 cores: this script and all it starts are
# pinned to CPUs 0 and 1 (the peer pins itself there too, --cpus 0,1).
if [ -z "${AF_SEED_CASE_PINNED:-}" ] && command -v taskset >/dev/null; then
  AF_SEED_CASE_PINNED=1 exec taskset -c 0,1 "$0" "$@"
fi
root=$(cd "$(dirname "$0")/../.." && pwd)
here=$root/bench/seed_case
bin=$root/build/release/bin/actorflow
py=${AF_TF_PYTHON:-$root/build/venv/bin/python}
rounds=${1:-2}
epochs=${2:-1}
nodes=${AF_SEED_CASE_NODES:-1}
case $nodes in 0|1) ;; *) echo "run.sh: AF_SEED_CASE_NODES must be 0 or 1, not '$nodes'" >&2; exit 2;; esac
case $rounds in ''|*[!0-9]*|0) echo "run.sh: ROUNDS must be a positive integer, not '$rounds'" >&2; exit 2;; esac
shift $(($# < 2 ? $# : 2))
[ $# -gt 0 ] || set -- "$root/build/data/criteo_like:1"
dirs=() data_seeds=()
for d in "$@"; do
  if [[ $d =~ ^(.+):([0-9]+)$ ]]; then dirs+=("${BASH_REMATCH[1]}"); data_seeds+=("${BASH_REMATCH[2]}")
  else dirs+=("$d"); data_seeds+=(1); fi
done
"$py" -c 'import tensorflow' 2>/dev/null \
  || { echo "run.sh: TensorFlow is missing in $py (scripts/setup installs it)" >&2; exit 2; }
work=$(mktemp -d)
source "$root/bench/multi_process/nodes.sh"
trap 'stop_nodes; rm -rf "$work"' EXIT
# ActorFlow's side: criteo_like (the built-in layers), or criteo_dlrm
# (DLRM's dense part as a TorchScript module over the same tables, scripted
# here by its companion script).
example=${AF_SEED_CASE_EXAMPLE:-criteo_like}
case $example in
  criteo_like) ;;
  criteo_dlrm) /usr/bin/python3 "$root/apps/examples/criteo_dlrm.py" --out "$work/criteo_dlrm.pt" >&2 ;;
  *) echo "run.sh: AF_SEED_CASE_EXAMPLE must be criteo_like or criteo_dlrm, not '$example'" >&2; exit 2 ;;
esac
# Per data set D (0, 1, ...): its data, its target AUC (in $work/setD.json
# for the summary), and the example reading it with EPOCHS epochs, without
# checkpoints (the peer writes none).
targets=()
for i in "${!dirs[@]}"; do
  dir=${dirs[$i]}
  "$here/prepare.sh" "$dir" "${AF_SEED_CASE_ROWS:-2000000}" "${AF_SEED_CASE_TEST_ROWS:-100000}" "${data_seeds[$i]}" >&2
  planted=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["planted_auc_test"])' "$dir/planted.json")
  targets+=("${AF_TARGET_AUC:-$(python3 -c "print(round($planted - 0.02, 4))")}")
  python3 -c 'import json,sys; json.dump({"dir": sys.argv[1], "seed": int(sys.argv[2]), "planted": float(sys.argv[3]), "target": float(sys.argv[4])}, open(sys.argv[5], "w"))' \
    "$dir" "${data_seeds[$i]}" "$planted" "${targets[$i]}" "$work/set$i.json"
  sed -e "s#build/data/criteo_like#$dir#g" -e "s#^\( *\)epochs: 1\$#\1epochs: $epochs#" \
      -e "s#build/models/$example.pt#$work/$example.pt#" \
      -e '/^checkpoint {/,/^}/d' "$root/apps/examples/$example.pbtxt" >"$work/job$i.pbtxt"
  grep -q "^    epochs: $epochs\$" "$work/job$i.pbtxt" || { echo "run.sh: could not set the epochs" >&2; exit 1; }
  # The same with the shards on two nodes (their ports are filled in per
  # round: every round starts its own nodes).
  sed -e 's#^  ps { shards: 2 }$#  ps { shards: 2 hosts: ["ps1", "ps2"] }#' \
    -e 's#^runtime { seed: 1 }$#runtime { seed: 1 }\nhost { name: "ps1" address: "127.0.0.1:PORT1" }\nhost { name: "ps2" address: "127.0.0.1:PORT2" }#' \
      "$work/job$i.pbtxt" >"$work/nodes$i.pbtxt.in"
  grep -q 'hosts: \["ps1", "ps2"\]' "$work/nodes$i.pbtxt.in" && grep -q '^host { name: "ps2"' "$work/nodes$i.pbtxt.in" \
    || { echo "run.sh: could not place the shards on nodes" >&2; exit 1; }
done

run_actorflow() { # NAME TOPOLOGY SEED TARGET
  local log=$work/$1.log
  sed -e "s#^runtime { seed: 1 }\$#runtime { seed: $3 }#" "$2" >"$work/$1.pbtxt"
  grep -q "^runtime { seed: $3 }\$" "$work/$1.pbtxt" \
    || { echo "run.sh: could not set the seed" >&2; exit 1; }
  "$bin" run "$work/$1.pbtxt" --report-json "$work/$1.json" >"$work/$1.out" 2>"$log" \
    || { tail -20 "$log" >&2; exit 1; }
  python3 - "$work/$1.json" "$log" "$4" >"$work/$1.row" <<'PY'
import json, re, sys, datetime
r = json.load(open(sys.argv[1]))
lines = open(sys.argv[2]).read().splitlines()
ts = lambda l: datetime.datetime.strptime(l[:23], "%Y-%m-%d %H:%M:%S.%f")
start = ts(lines[0])
samples = sum(m.get("samples", 0) for k, m in r["metrics"].items() if k.startswith("train["))
auc, to_target = None, None
for l in lines:
    m = re.search(r"evaluate\[0\]: (?:final, )?step \d+: test loss [0-9.]+, AUC ([0-9.]+)", l)
    if m:
        auc = float(m.group(1))
        if to_target is None and auc >= float(sys.argv[3]):
            to_target = (ts(l) - start).total_seconds()
u = r["utilization"]
print(json.dumps({"samples_per_s": samples / r["elapsed_s"], "wall_s": r["elapsed_s"],
                  "final_auc": auc, "time_to_target_s": to_target,
                  "busy": sum(x["busy"] for x in u) / len(u),
                  "slot_wait": sum(x.get("slot_wait", 0) for x in u) / len(u),
                  "input_wait": sum(x["input_wait"] for x in u) / len(u)}))
PY
}

run_tf() { # NAME SEED DIR TARGET
  "$py" "$here/tf_peer.py" --train "$3/train-*.tfrecord" --test "$3/test-*.tfrecord" \
    --planted-json "$3/planted.json" --workers 6 --ps 2 --cpus 0,1 \
    --epochs "$epochs" --batch 256 --lr 0.05 --buckets 100000 --dim 16 --hidden 256,128 \
    --eval-every-steps 2000 --target-auc "$4" --seed "$2" --json "$work/$1.json" \
    >"$work/$1.out" 2>"$work/$1.log" || { tail -20 "$work/$1.log" >&2; exit 1; }
}

for r in $(seq 1 "$rounds"); do
  for i in "${!dirs[@]}"; do
    on="data set ${data_seeds[$i]} (${dirs[$i]})"
    [ "${#dirs[@]}" -gt 1 ] || on=${dirs[$i]}
    echo "round $r/$rounds, $on: ActorFlow" >&2
    run_actorflow "af${i}_$r" "$work/job$i.pbtxt" "$r" "${targets[$i]}"
    if [ "$nodes" = 1 ]; then
      echo "round $r/$rounds, $on: ActorFlow, shards on 2 nodes" >&2
      start_node ps1
      start_node ps2
      sed -e "s#PORT1#${port[ps1]}#" -e "s#PORT2#${port[ps2]}#" "$work/nodes$i.pbtxt.in" >"$work/nodes$i.pbtxt"
      run_actorflow "afn${i}_$r" "$work/nodes$i.pbtxt" "$r" "${targets[$i]}"
      stop_nodes
    fi
    echo "round $r/$rounds, $on: TensorFlow ParameterServerStrategy" >&2
    run_tf "tf${i}_$r" "$r" "${dirs[$i]}" "${targets[$i]}"
  done
done

python3 - "$work" "$rounds" "${#dirs[@]}" "$epochs" "$nodes" <<'PY'
import json, math, statistics, sys
work, rounds, sets, epochs = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
nodes = sys.argv[5] == "1"
fmt = lambda v, f="%.1f": "-" if v is None else f % v
sd = lambda v: statistics.stdev(v) if len(v) > 1 else float("nan")
pooled = {}  # system -> [(difference, standard error)], one per data set
for i in range(sets):
    info = json.load(open(f"{work}/set{i}.json"))
    if sets > 1:
        print(f"## Data set of seed {info['seed']} ({info['dir']})\n")
    print(f"Planted model's test AUC {info['planted']:.4f}; target AUC {info['target']}; {epochs} epoch(s); 2 cores.\n")
    print("| round (= seed) | system | samples/s | training wall s | final AUC | time to target s | trainers busy | of it, waiting for a step slot | input wait |")
    print("|---|---|---|---|---|---|---|---|---|")
    ratios, node_ratios = [], []
    aucs = {"ActorFlow": [], "ActorFlow, shards on 2 nodes": [], "TF PS strategy": []}
    for r in range(1, rounds + 1):
        a = json.load(open(f"{work}/af{i}_{r}.row"))
        t = json.load(open(f"{work}/tf{i}_{r}.json"))
        print(f"| {r} | ActorFlow | {a['samples_per_s']:.0f} | {a['wall_s']:.1f} | {a['final_auc']:.4f} | {fmt(a['time_to_target_s'])} | {a['busy']:.2f} | {a['slot_wait']:.2f} | {a['input_wait']:.2f} |")
        if nodes:
            n = json.load(open(f"{work}/afn{i}_{r}.row"))
            print(f"| {r} | ActorFlow, shards on 2 nodes | {n['samples_per_s']:.0f} | {n['wall_s']:.1f} | {n['final_auc']:.4f} | {fmt(n['time_to_target_s'])} | {n['busy']:.2f} | {n['slot_wait']:.2f} | {n['input_wait']:.2f} |")
            node_ratios.append(n["samples_per_s"] / t["samples_per_s"])
            aucs["ActorFlow, shards on 2 nodes"].append(n["final_auc"])
        # The workers' shares of the training wall time, as ActorFlow's are of
        # each trainer's time: in steps, and blocked on an empty prefetch buffer.
        w = t["per_worker"]
        span = t["wall_s"] * len(w)
        busy = sum(x["step_s"] for x in w) / span
        wait = sum(x["input_wait_s"] for x in w) / span
        print(f"| {r} | TF PS strategy | {t['samples_per_s']:.0f} | {t['wall_s']:.1f} (+{t['startup_s']:.0f} startup) | {t['final_auc']:.4f} | {fmt(t.get('time_to_target_s'))} | {busy:.2f} | - | {wait:.2f} |")
        ratios.append(a["samples_per_s"] / t["samples_per_s"])
        aucs["ActorFlow"].append(a["final_auc"])
        aucs["TF PS strategy"].append(t["final_auc"])
    print(f"\nActorFlow / TensorFlow samples/s per round: {', '.join('%.2f' % x for x in ratios)}; median {statistics.median(ratios):.2f}")
    if nodes:
        print(f"ActorFlow with shards on nodes / TensorFlow: {', '.join('%.2f' % x for x in node_ratios)}; median {statistics.median(node_ratios):.2f}")
    else:
        del aucs["ActorFlow, shards on 2 nodes"]
    print("\n| system | rounds | mean final AUC | standard deviation | min | max |\n|---|---|---|---|---|---|")
    for name, v in aucs.items():
        print(f"| {name} | {len(v)} | {statistics.mean(v):.4f} | {sd(v):.4f} | {min(v):.4f} | {max(v):.4f} |")
    tf = aucs["TF PS strategy"]
    for name in [k for k in aucs if k != "TF PS strategy"]:
        v = aucs[name]
        diff = statistics.mean(v) - statistics.mean(tf)
        se = math.sqrt(sd(v) ** 2 / len(v) + sd(tf) ** 2 / len(tf))
        pooled.setdefault(name, []).append((diff, se))
        print(f"{name} - TensorFlow, mean final AUC: {diff:+.4f}, standard error {se:.4f} "
              f"({'n/a' if se != se or se == 0 else '%+.1f' % (diff / se)} standard errors)")
    print()
if sets > 1:
    print(f"## Over the {sets} data sets\n")
    for name, d in pooled.items():
        diff = statistics.mean(x for x, _ in d)
        se = math.sqrt(sum(e ** 2 for _, e in d)) / len(d)
        print(f"{name} - TensorFlow, mean final AUC over the data sets: {diff:+.4f}, standard error {se:.4f} "
              f"({'n/a' if se != se or se == 0 else '%+.1f' % (diff / se)} standard errors)")
PY
