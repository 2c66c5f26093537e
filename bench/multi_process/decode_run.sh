#!/usr/bin/env bash
# bench/multi_process/decode_run.sh: disaggregated input. The photograph
# pipeline of bench/input_pipeline (ImageNet-sized JPEGs, ~110 KB: read,
# parse, image_decode with random_resized_crop to 224x224x3 f32, 2
# decoders; then batches of 64 into a sink that stands for the trainers)
# in one process, and split over two local `actorflow node` processes:
#   d1: read, parse and the decoders
#   d2: the batcher and the sink
# so every decoded image (602 KB of f32) crosses between processes on the
# data plane. Each round runs, alternating on the same nodes:
#   - one process;
#   - the two nodes as they connect by default (a Unix socket with the
#     tensors in shared memory, as processes of one machine do);
#   - two more nodes started with --data-socket tcp (loopback TCP, as
#     between machines).
# ROUNDS rounds; images/s from each run's summary ("throughput"), and the
# median of the per-round ratios to one process.
#   bench/multi_process/decode_run.sh [ROUNDS] [EPOCHS] [BUILD_DIR]
# (defaults: 3 rounds, 2 epochs of 2000 images, build/release). Makes the
# photographs once with bench/input_pipeline/make_dataset.py (Debian's
# python3 with Pillow: python3-pil, python3-numpy, lomiri-wallpapers-16.04)
# in AF_BENCH_IMAGES (/tmp/af_bench_images) and their TFRecords with
# `actorflow convert images` in AF_BENCH_DECODE_TFR (/tmp/af_bench_decode).
# Starts exactly four nodes and always stops them (SIGTERM, SIGKILL after
# 10 s) on exit, whatever the exit.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
template=$root/bench/input_pipeline/actorflow_images.pbtxt.in
rounds=${1:-3}
epochs=${2:-2}
build=${3:-$root/build/release}
bin=$build/bin/actorflow
[ -x "$bin" ] || { echo "no $bin: build the actorflow target first" >&2; exit 2; }
images=${AF_BENCH_IMAGES:-/tmp/af_bench_images}
tfr=${AF_BENCH_DECODE_TFR:-/tmp/af_bench_decode}
work=$(mktemp -d)

/usr/bin/python3 "$root/bench/input_pipeline/make_dataset.py" --out "$images" \
  --count 2000 --seed 0 >&2
if [ ! -f "$tfr/complete" ] || [ "$images/MANIFEST.json" -nt "$tfr/complete" ]; then
  rm -rf "$tfr"
  mkdir -p "$tfr"
  "$bin" convert images "$images" --out "$tfr/train" --shards 4 >&2
  touch "$tfr/complete"
fi

cleanup() {
  stop_nodes
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
# shellcheck source=nodes.sh
source "$root/bench/multi_process/nodes.sh"

single=$work/single.pbtxt
sed -e "s|@FILES@|$tfr/train-*.tfrecord|" -e "s|@DECODERS@|2|" -e "s|@DECODE_OPTIONS@||" \
    -e "s|@EPOCHS@|$epochs|" "$template" >"$single"

start_node d1; start_node d2
start_node t1 --data-socket tcp; start_node t2 --data-socket tcp
# split IN OUT A B: IN with read, parse and decode on host A, batch and
# train on host B.
split() {
  sed -e 's|name: "read" type: "tfrecord_source"|& hosts: ["a"]|' \
      -e 's|name: "parse" type: "example_parse"|& hosts: ["a"]|' \
      -e 's|name: "decode" type: "image_decode"|& hosts: ["a"]|' \
      -e 's|name: "batch" type: "batcher"|& hosts: ["b"]|' \
      -e 's|name: "train" type: "sink"|& hosts: ["b"]|' "$1" >"$2"
  [ "$(grep -c 'hosts: \["[ab]"\]' "$2")" -eq 5 ] || { echo "placement edit failed" >&2; exit 1; }
  echo "host { name: \"a\" address: \"127.0.0.1:${port[$3]}\" }" >>"$2"
  echo "host { name: \"b\" address: \"127.0.0.1:${port[$4]}\" }" >>"$2"
}
split "$single" "$work/unix.pbtxt" d1 d2
split "$single" "$work/tcp.pbtxt" t1 t2

# rate NAME TOPOLOGY: images/s of one run.
rate() {
  timeout -k 5 600 "$bin" run "$2" --no-progress >"$work/$1.out" 2>"$work/$1.err" </dev/null \
    || { tail -n 30 "$work/$1.err" >&2; exit 1; }
  local r
  r=$(sed -n 's/.*throughput: \([0-9]*\) records\/s.*/\1/p' "$work/$1.out" | tail -1)
  [ -n "$r" ] || { cat "$work/$1.out" >&2; echo "no throughput from $1" >&2; exit 1; }
  echo "$r"
}

rows=()
for ((r = 1; r <= rounds; ++r)); do
  s=$(rate single "$single")
  u=$(rate unix "$work/unix.pbtxt")
  t=$(rate tcp "$work/tcp.pbtxt")
  echo "round $r/$rounds: one process $s, 2 nodes (shared memory) $u, 2 nodes (TCP) $t images/s" >&2
  rows+=("$s $u $t")
done
grep -q "data plane: connected to a over a Unix socket with shared memory\|data plane: connected to b over a Unix socket with shared memory" "$work/unix.err" "$work"/d[12].err \
  || { echo "the default nodes did not connect over a Unix socket with shared memory" >&2; exit 1; }
! grep -q "Unix socket" "$work"/t[12].err "$work/tcp.err" \
  || { echo "the tcp nodes connected over a Unix socket" >&2; exit 1; }

python3 - "$epochs" "${rows[@]}" <<'PY'
import statistics, sys
epochs = sys.argv[1]
rows = [list(map(float, r.split())) for r in sys.argv[2:]]
med = statistics.median
print(f"Photographs (bench/input_pipeline's 2000 JPEGs), 2 decoders to 224x224x3, "
      f"batches of 64 into a sink, {epochs} epochs; median of {len(rows)} alternating rounds; "
      f"ratio = median of per-round ratios to one process.")
print()
print("| placement | images/s | vs one process |")
print("|---|---|---|")
print(f"| one process | {med(r[0] for r in rows):,.0f} | 1.00 |")
print(f"| decoders on d1, batcher and sink on d2 (shared memory beside a Unix socket) | {med(r[1] for r in rows):,.0f} | {med(r[1] / r[0] for r in rows):.2f} |")
print(f"| the same over loopback TCP | {med(r[2] for r in rows):,.0f} | {med(r[2] / r[0] for r in rows):.2f} |")
PY
