#!/usr/bin/env bash
# bench/multi_process: the MLP job of bench/train_fmnist (2 trainers,
# unbounded staleness) in one process, and the same job split over three
# local `actorflow node` processes:
#   n1: the input pipeline (read, cache, shuffle, batch)
#   n2: the two trainers
#   n3: the two parameter-server shards
# (the coordinator, `actorflow run`, keeps the evaluator and its test split).
# The two runs alternate ROUNDS times on the same nodes (the machine is
# shared and noisy: read the ratio, the median of per-round ratios).
#   bench/multi_process/run.sh [ROUNDS] [EPOCHS] [BUILD_DIR] [PREFETCH]
# (defaults: 3 rounds, 3 epochs, build/release, false; PREFETCH=true lets
# the trainers pull the next step's parameters while they compute).
# WIRE=bf16 (or f16) sets training.ps.wire in both placements (default
# f32). DATA_SOCKET=tcp starts the nodes with --data-socket tcp (loopback
# TCP between them, as between machines; default auto: a Unix socket).
# DATA_SHM=MIB starts them with --data-shm MIB (default 64: tensors
# between them in shared memory; 0: through the Unix socket).
# NODE_THREADS="1 2 1" starts n1, n2 and n3 with --threads 1, 2 and 1
# (default: each as many scheduler threads as the machine has cores).
# samples/s is reported twice: the trainers' own rates summed (their final
# log lines, as bench/train_fmnist/run.sh) and the job's samples over its
# wall time (the run's summary, data loading included).
# Starts exactly three nodes and always stops them (SIGTERM, SIGKILL after
# 10 s) on exit, whatever the exit.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
template=$root/bench/train_fmnist/actorflow_mlp.pbtxt.in
rounds=${1:-3}
epochs=${2:-3}
build=${3:-$root/build/release}
prefetch=${4:-false}
wire=${WIRE:-f32}
data_socket=${DATA_SOCKET:-auto}
data_shm=${DATA_SHM:-64}
read -r -a node_threads <<<"${NODE_THREADS:-}"
bin=$build/bin/actorflow
[ -x "$bin" ] || { echo "no $bin: build the actorflow target first" >&2; exit 2; }
data=$(dirname "$(dpkg -L dataset-fashion-mnist | grep train-images-idx3)")
work=$(mktemp -d)

# KEEP_LOGS=DIR: the last round's outputs and the nodes' logs are copied there.
cleanup() {
  stop_nodes
  [ -n "${KEEP_LOGS:-}" ] && mkdir -p "$KEEP_LOGS" && cp "$work"/*.out "$work"/*.err "$work"/*.pbtxt "$KEEP_LOGS"/ 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
# shellcheck source=nodes.sh
source "$root/bench/multi_process/nodes.sh"

single=$work/single.pbtxt
multi=$work/multi.pbtxt
sed -e "s|@TRAINERS@|2|" -e "s|@PS@|shards: 2 wire: \"$wire\"|" -e "s|@EPOCHS@|$epochs|" \
    -e "s|@PREFETCH@|$prefetch|" -e "s|@DATA@|$data|g" "$template" >"$single"

i=0
for n in n1 n2 n3; do
  threads=()
  [ -n "${node_threads[$i]:-}" ] && threads=(--threads "${node_threads[$i]}")
  start_node $n --data-socket "$data_socket" --data-shm "$data_shm" "${threads[@]}"
  i=$((i + 1))
done
sed -e "s|@PS@|shards: 2 hosts: [\"n3\"] wire: \"$wire\"|" \
    -e 's|name: "read" type: "idx_source"|& hosts: ["n1"]|' \
    -e 's|name: "cache" type: "cache"|& hosts: ["n1"]|' \
    -e 's|name: "shuffle" type: "shuffle"|& hosts: ["n1"]|' \
    -e 's|name: "batch" type: "batcher"|& hosts: ["n1"]|' \
    -e 's|name: "train" type: "trainer"|& hosts: ["n2"]|' \
    -e "s|@TRAINERS@|2|" -e "s|@EPOCHS@|$epochs|" \
    -e "s|@PREFETCH@|$prefetch|" -e "s|@DATA@|$data|g" "$template" >"$multi"
for n in n1 n2 n3; do
  echo "host { name: \"$n\" address: \"127.0.0.1:${port[$n]}\" }" >>"$multi"
done
[ "$(grep -v '^#' "$multi" | grep -c 'hosts: \["n[123]"\]')" -eq 6 ] || { echo "placement edit failed" >&2; exit 1; }

# measure OUT TRAINER_LOG: "trainers-samples/s job-samples/s accuracy".
measure() {
  python3 - "$1" "$2" <<'PY'
import re, sys
out = open(sys.argv[1]).read()
log = open(sys.argv[2]).read()
rate = sum(float(m) for m in re.findall(
    r"train\[\d+\]: \d+ steps, \d+ samples, loss [0-9.]+, (\d+) samples/s", log))
m = re.search(r"training: \d+ steps, (\d+) samples, (\d+) samples/s", out)
a = re.search(r"accuracy ([0-9.]+)", out[out.find("test (step"):]) if "test (step" in out else None
if not m or rate == 0:
    sys.exit("no training summary in " + sys.argv[1])
print("%.0f %s %s" % (rate, m.group(2), a.group(1) if a else "-"))
PY
}

rows=()
for ((r = 1; r <= rounds; ++r)); do
  echo "round $r/$rounds" >&2
  timeout -k 5 600 "$bin" run "$single" --no-progress >"$work/s.out" 2>"$work/s.err" </dev/null \
    || { tail -n 30 "$work/s.err" >&2; exit 1; }
  s=$(cat "$work/s.out" "$work/s.err" >"$work/s.all"; measure "$work/s.out" "$work/s.all")
  before=$(wc -c <"$work/n2.err")
  timeout -k 5 600 "$bin" run "$multi" --no-progress >"$work/m.out" 2>"$work/m.err" </dev/null \
    || { tail -n 30 "$work/m.err" >&2; tail -n 30 "$work/n2.err" >&2; exit 1; }
  # The trainers log on n2; their final lines may trail the run's end.
  for ((i = 0; i < 50; ++i)); do
    [ "$(tail -c +$((before + 1)) "$work/n2.err" | grep -c 'train\[[0-9]\]: [0-9]* steps')" -ge 2 ] && break
    sleep 0.1
  done
  tail -c +$((before + 1)) "$work/n2.err" >"$work/m.log"
  m=$(measure "$work/m.out" "$work/m.log")
  echo "  one process: $s | 3 nodes: $m" >&2
  rows+=("$s $m")
done

python3 - "$epochs" "$prefetch" "$wire" "$data_socket" "${rows[@]}" <<'PY'
import statistics, sys
epochs, prefetch, wire, data_socket = sys.argv[1:5]
rows = [list(map(lambda x: float(x) if x != "-" else float("nan"), r.split())) for r in sys.argv[5:]]
med = statistics.median
print(f"MLP 784-256-128-10 (bench/train_fmnist), 2 trainers, unbounded staleness, "
      f"prefetch {prefetch}, wire {wire}, data socket {data_socket}, {epochs} epochs; median of {len(rows)} alternating rounds; ratio = median "
      f"of per-round 3-node / one-process.")
print()
print("| placement | trainers' samples/s | job samples/s (wall) | final accuracy |")
print("|---|---|---|---|")
print(f"| one process | {med(r[0] for r in rows):,.0f} | {med(r[1] for r in rows):,.0f} | {med(r[2] for r in rows):.4f} |")
print(f"| 3 nodes (input / trainers / shards) | {med(r[3] for r in rows):,.0f} | {med(r[4] for r in rows):,.0f} | {med(r[5] for r in rows):.4f} |")
print(f"| ratio 3 nodes / one process | {med(r[3] / r[0] for r in rows):.2f} | {med(r[4] / r[1] for r in rows):.2f} | |")
PY
