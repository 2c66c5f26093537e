#!/usr/bin/env bash
# Do ActorFlow and TensorFlow compute the same training? (docs/case-study.md,
# "Same data order, same initial weights")
#
# The case study's AUCs move by about 0.0005 from one data order to the
# next in both systems, more than the difference between them. This takes
# the order and the initial weights out of the comparison: per seed S,
#   - ActorFlow: apps/examples/criteo_like.pbtxt with runtime { seed: S },
#     without checkpoints, without its shuffles (no shuffle stage, the
#     files in sorted order) and with one parse replica and one trainer, so
#     that it trains on the records in file order, 256 at a time;
#   - TensorFlow: bench/seed_case/tf_peer.py with 1 worker and 2 PS tasks,
#     --same-order (the same batches in the same order) and
#     --init-like-actorflow --seed S (ActorFlow's initial weights);
# both with Adagrad at 0.05, 1 epoch, evaluated every 2,000 steps on the
# test split. Prints, per seed, the AUC of both at each evaluation, and
# exits 1 when a final AUC differs by more than 0.001 (the same training
# ends within about 0.0001; a different one, such as another data order,
# by up to about 0.002).
#   bench/seed_case/same_order.sh [SEEDS] [DIR] [ROWS] [TEST_ROWS] [DATA_SEED]
# SEEDS: a comma-separated list (default 1). DIR, ROWS, TEST_ROWS, DATA_SEED:
# the data of bench/seed_case/prepare.sh (made there if missing), default
# build/data/criteo_like with 2,000,000 + 100,000 rows of data seed 1. ActorFlow's job
# takes the numeric means and deviations of DIR/planted.json, as the peer
# does. AF_SAME_ORDER_TOLERANCE: the largest final AUC difference
# accepted (default 0.001). AF_SAME_ORDER_PEER_SEED: the peer's seed
# instead of S (its initial weights then differ: the control of the
# test bench.seed_case.same_order, which must then fail). Needs the Release build (AF_BIN overrides the
# binary) and TensorFlow in build/venv (scripts/setup). About 6 minutes
# per seed on 2 cores at 2 M rows.
set -euo pipefail
if [ -z "${AF_SEED_CASE_PINNED:-}" ] && command -v taskset >/dev/null; then
  AF_SEED_CASE_PINNED=1 exec taskset -c 0,1 "$0" "$@"
fi
root=$(cd "$(dirname "$0")/../.." && pwd)
here=$root/bench/seed_case
bin=${AF_BIN:-$root/build/release/bin/actorflow}
py=${AF_TF_PYTHON:-$root/build/venv/bin/python}
seeds=${1:-1}
dir=${2:-$root/build/data/criteo_like}
rows=${3:-2000000}
test_rows=${4:-100000}
data_seed=${5:-1}
tolerance=${AF_SAME_ORDER_TOLERANCE:-0.001}
case $seeds in ''|*[!0-9,]*) echo "same_order.sh: SEEDS must be a comma-separated list of integers, not '$seeds'" >&2; exit 2;; esac
AF_BIN=$bin "$here/prepare.sh" "$dir" "$rows" "$test_rows" "$data_seed" >&2
"$py" -c 'import tensorflow' 2>/dev/null \
  || { echo "same_order.sh: TensorFlow is missing in $py (scripts/setup installs it)" >&2; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

status=0
for s in ${seeds//,/ }; do
  # The example without its shuffles, checkpoints and replicas; every
  # change is checked to have happened.
  python3 - "$root/apps/examples/criteo_like.pbtxt" "$dir" "$s" >"$work/af$s.pbtxt" <<'PY'
import json, re, sys
text, data, seed = open(sys.argv[1]).read(), sys.argv[2], sys.argv[3]
planted = json.load(open(data + "/planted.json"))
def change(old, new):
    global text
    if text.count(old) != 1:
        sys.exit("same_order.sh: the example changed: %r is not in it once" % old)
    text = text.replace(old, new)
text = re.sub(r"(?ms)^checkpoint \{.*?^\}\n", "", text)
change("runtime { seed: 1 }", "runtime { seed: %s }" % seed)
change("    shuffle_files: true\n", "")
change('stage {\n  name: "shuffle"\n  type: "shuffle"\n  input { stage: "read" window: 8 }\n'
       '  shuffle { buffer_size: 20000 }\n}\n\n', "")
change('  replicas: 2\n  input { stage: "shuffle" window: 8 }',
       '  input { stage: "read" window: 8 }')
change("  replicas: 6\n", "  replicas: 1\n")
change(" concurrent_steps: 2", "")
# The numeric transforms with DIR's means and deviations (the example's
# are those of 2 M rows of seed 1, to 6 digits).
for k, (mean, std) in enumerate(zip(planted["numeric_mean"], planted["numeric_std"])):
    pattern = r'(feature \{ input: "I%d" op: \["log1p", "standardize"\]) mean: [0-9.e+-]+ std: [0-9.e+-]+' % (k + 1)
    text, n = re.subn(pattern, r"\1 mean: %r std: %r" % (mean, std), text)
    if n != 2:
        sys.exit("same_order.sh: the example changed: I%d's transform is not in it twice" % (k + 1))
print(text.replace("build/data/criteo_like", data), end="")
PY
  echo "seed $s: ActorFlow" >&2
  "$bin" run "$work/af$s.pbtxt" >"$work/af$s.out" 2>"$work/af$s.log" \
    || { tail -20 "$work/af$s.log" >&2; exit 1; }
  echo "seed $s: TensorFlow, 1 worker, the same order and initial weights" >&2
  "$py" "$here/tf_peer.py" --train "$dir/train-*.tfrecord" --test "$dir/test-*.tfrecord" \
    --planted-json "$dir/planted.json" --workers 1 --ps 2 --cpus 0,1 \
    --epochs 1 --batch 256 --lr 0.05 --buckets 100000 --dim 16 --hidden 256,128 \
    --eval-every-steps 2000 --same-order --init-like-actorflow --seed "${AF_SAME_ORDER_PEER_SEED:-$s}" \
    --json "$work/tf$s.json" >"$work/tf$s.out" 2>"$work/tf$s.log" \
    || { tail -20 "$work/tf$s.log" >&2; exit 1; }
  python3 - "$work/af$s.log" "$work/tf$s.json" "$s" "$tolerance" <<'PY' || status=1
import json, re, sys
af = [(int(m.group(1)), float(m.group(2))) for m in re.finditer(
    r"evaluate\[0\]: (?:final, )?step (\d+): test loss [0-9.]+, AUC ([0-9.]+)",
    open(sys.argv[1]).read())]
tf = [(e["steps_done"], e["auc"]) for e in json.load(open(sys.argv[2]))["evals"]]
if not af or not tf:
    sys.exit("same_order.sh: no evaluation in a log")
print(f"\nseed {sys.argv[3]}:\n\n| evaluation | ActorFlow step | AUC | TensorFlow step | AUC | difference |")
print("|---|---|---|---|---|---|")
for i in range(max(len(af), len(tf))):
    a = af[i] if i < len(af) else (None, None)
    t = tf[i] if i < len(tf) else (None, None)
    d = "-" if None in (a[1], t[1]) else "%+.4f" % (a[1] - t[1])
    f = lambda x, p: "-" if x is None else p % x
    print(f"| {i + 1} | {f(a[0], '%d')} | {f(a[1], '%.4f')} | {f(t[0], '%d')} | {f(t[1], '%.4f')} | {d} |")
diff = af[-1][1] - tf[-1][1]
print(f"\nfinal AUC: ActorFlow {af[-1][1]:.4f}, TensorFlow {tf[-1][1]:.4f}, difference {diff:+.4f}")
if abs(diff) > float(sys.argv[4]):
    print(f"same_order.sh: the final AUCs differ by more than {sys.argv[4]}: the two trainings are not the same")
    sys.exit(1)
PY
done
exit "$status"
