#!/usr/bin/env bash
# bench/paired_builds.sh: two builds of ActorFlow, A and B (say, the build
# before a change and the one after it), on the four benchmarks of
# docs/benchmarks.md, paired round by round, as a markdown table: per
# figure the median of A, the median of B, and the median, min and max of
# the per-round B/A ratios. The machine is shared and noisy: A and B of
# one benchmark run back to back, so a slow spell hits both; read the
# ratios.
#   bench/paired_builds.sh BEFORE_BIN_DIR AFTER_BIN_DIR [ROUNDS]
# BIN_DIR: a Release build's bin/ (actorflow, stream_overhead and
# ps_throughput). They are copied first, so that rebuilding a tree during
# the run changes nothing.
#
# One round runs, for A and B in turn (A first in odd rounds, B first in
# even ones: an even ROUNDS balances the order):
#   1. stream overhead: `stream_overhead --items 50000 --reps 3`; its
#      chain / plain send ratio for 64-byte items at windows 8 and 64;
#   2. PS throughput: `ps_throughput --reps 1` (defaults otherwise: a 16 MiB
#      dense variable); PS push+pull as % of the plain TCP copy, in parts
#      and in one message;
#   3. input pipeline: `actorflow run` of
#      bench/input_pipeline/actorflow_images.pbtxt.in (2 decode replicas,
#      2 epochs of the 2,000 images of make_dataset.py: 4,000 images); the
#      run summary's records/s. ActorFlow only, no peers;
#   4. training: `actorflow run` of bench/train_fmnist/actorflow_mlp.pbtxt.in
#      (2 trainers, 2 shards, unbounded staleness, no prefetch, 3 epochs);
#      the trainers' own samples/s summed, as bench/train_fmnist/run.sh.
# Every run gets its own empty working and temporary directory (checkpoint
# formats differ between builds: nothing is shared between runs).
#
# Sizes: chosen so that ROUNDS=3 stays under 12 minutes on the 2 shared
# cores of the development machine (data preparation aside). One round
# (all four, A and B) took 55 s at a load average of 3.5 from other
# engineers' builds; at 12-14, a round with 1 epoch each of images and
# training took 1.6 minutes, so with these sizes about 3. Single runs this
# short are noisy: take more rounds to narrow the ratios. Env overrides:
# AF_PAIRED_STREAM_ITEMS, AF_PAIRED_IMAGE_EPOCHS, AF_PAIRED_TRAIN_EPOCHS.
#
# Data: the image folder of bench/input_pipeline/make_dataset.py in
# $AF_BENCH_IMAGES (default /tmp/af_bench_images, made if missing, as
# run.sh does) and its TFRecord shards: run.sh's in $AF_BENCH_TFR (default
# /tmp/af_bench_tfr) when they are newer than the folder, else written by
# A's `actorflow convert images` into $AF_PAIRED_TFR (default
# /tmp/af_paired_tfr). Fashion-MNIST from Debian's dataset-fashion-mnist.
# Needs the Debian packages lomiri-wallpapers-16.04, python3-pil,
# python3-numpy and dataset-fashion-mnist (bench/input_pipeline/README.md).
set -euo pipefail
if [ $# -lt 2 ] || [ $# -gt 3 ]; then
  echo "usage: bench/paired_builds.sh BEFORE_BIN_DIR AFTER_BIN_DIR [ROUNDS]" >&2
  exit 2
fi
root=$(cd "$(dirname "$0")/.." && pwd)
rounds=${3:-3}
[[ $rounds =~ ^[1-9][0-9]*$ ]] || { echo "paired_builds.sh: ROUNDS must be a positive integer" >&2; exit 2; }
stream_items=${AF_PAIRED_STREAM_ITEMS:-50000}
image_epochs=${AF_PAIRED_IMAGE_EPOCHS:-2}
train_epochs=${AF_PAIRED_TRAIN_EPOCHS:-3}
images=${AF_BENCH_IMAGES:-/tmp/af_bench_images}
tfr=${AF_BENCH_TFR:-/tmp/af_bench_tfr}

for p in lomiri-wallpapers-16.04 python3-pil python3-numpy dataset-fashion-mnist; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || {
    echo "paired_builds.sh: needs Debian's $p (apt-get install --no-install-recommends $p)" >&2
    exit 2
  }
done

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
trap 'exit 130' INT TERM

# The binaries, copied: $work/A and $work/B.
declare -A from=([A]=$1 [B]=$2)
for side in A B; do
  mkdir "$work/$side"
  for b in actorflow stream_overhead ps_throughput; do
    [ -x "${from[$side]}/$b" ] || { echo "paired_builds.sh: no ${from[$side]}/$b (build it)" >&2; exit 2; }
    cp "${from[$side]}/$b" "$work/$side/"
  done
done

# The images (and their shards), the same bytes for both builds.
/usr/bin/python3 "$root/bench/input_pipeline/make_dataset.py" --out "$images" --count 2000 --seed 0 >&2
if [ ! -f "$tfr/train-00003-of-00004.tfrecord" ] ||
   [ "$images/MANIFEST.json" -nt "$tfr/train-00003-of-00004.tfrecord" ]; then
  tfr=${AF_PAIRED_TFR:-/tmp/af_paired_tfr}
  if [ ! -f "$tfr/train-00003-of-00004.tfrecord" ] ||
     [ "$images/MANIFEST.json" -nt "$tfr/train-00003-of-00004.tfrecord" ]; then
    rm -rf "$tfr"
    mkdir -p "$tfr"
    "$work/A/actorflow" convert images "$images" --out "$tfr/train" --shards 4 >&2
  fi
fi
fmnist=$(dirname "$(dpkg -L dataset-fashion-mnist | grep train-images-idx3)")
sed -e "s|@FILES@|$tfr/*.tfrecord|" -e "s|@DECODERS@|2|" -e "s|@DECODE_OPTIONS@||" -e "s|@EPOCHS@|$image_epochs|" \
  "$root/bench/input_pipeline/actorflow_images.pbtxt.in" > "$work/images.pbtxt"
sed -e "s|@TRAINERS@|2|" -e "s|@PS@|shards: 2|" -e "s|@EPOCHS@|$train_epochs|" \
  -e "s|@PREFETCH@|false|" -e "s|@DATA@|$fmnist|g" \
  "$root/bench/train_fmnist/actorflow_mlp.pbtxt.in" > "$work/train.pbtxt"

# measure BENCH SIDE: runs BENCH with SIDE's binaries in a fresh directory
# (also its TMPDIR) and prints its figures, one "KEY VALUE" per line.
measure() {
  local bench=$1 bin=$work/$2 dir
  dir=$(mktemp -d "$work/run.XXXXXX")
  (
    cd "$dir"
    export TMPDIR=$dir
    case $bench in
      stream)
        timeout -k 5 300 "$bin/stream_overhead" --items "$stream_items" --reps 3 > out 2>&1
        sed -n 's/^| 64 B | \(8\|64\) | [0-9]* | [0-9]* | \([0-9.]*\)% |$/stream_w\1 \2/p' out ;;
      ps)
        timeout -k 5 300 "$bin/ps_throughput" --reps 1 > out 2>&1
        sed -n -e 's/^| ps push+pull, parts of .* | [0-9]* | \([0-9.]*\)% |$/ps_parts \1/p' \
               -e 's/^| ps push+pull, one message per shard | [0-9]* | \([0-9.]*\)% |$/ps_one \1/p' out ;;
      input)
        timeout -k 5 600 "$bin/actorflow" run "$work/images.pbtxt" --no-progress > out 2>&1
        sed -n 's/.*throughput: \([0-9]*\) records\/s.*/input \1/p' out | tail -1 ;;
      train)
        timeout -k 5 600 "$bin/actorflow" run "$work/train.pbtxt" --no-progress > out 2>&1
        python3 - out <<'PY' ;;
import re, sys
rates = re.findall(r"train\[\d+\]: \d+ steps, \d+ samples, loss [0-9.]+, (\d+) samples/s",
                   open(sys.argv[1]).read())
if rates:
    print("train %.0f" % sum(map(float, rates)))
PY
    esac
  ) > "$dir/figures" || { echo "paired_builds.sh: $bench ($2) failed:" >&2; tail -n 20 "$dir/out" >&2; exit 1; }
  local want
  case $bench in stream | ps) want=2 ;; *) want=1 ;; esac
  if [ "$(grep -cE '^[a-z_0-9]+ [0-9.]+$' "$dir/figures")" -ne $want ]; then
    echo "paired_builds.sh: $bench ($2) gave no figures:" >&2
    tail -n 20 "$dir/out" >&2
    exit 1
  fi
  cat "$dir/figures"
  rm -rf "$dir"
}

start=$(date +%s)
: > "$work/results"
for ((r = 1; r <= rounds; ++r)); do
  order="A B"
  ((r % 2)) || order="B A"
  for bench in stream ps input train; do
    for side in $order; do
      echo "paired_builds.sh: round $r/$rounds: $bench $side (load $(cut -d' ' -f1 /proc/loadavg))" >&2
      measure $bench $side | while read -r key value; do
        echo "$r $key $side $value" >> "$work/results"
        echo "  $key $value" >&2
      done
    done
  done
done
elapsed=$(($(date +%s) - start))

python3 - "$work/results" "$rounds" "$1" "$2" "$elapsed" \
  "$stream_items" "$image_epochs" "$train_epochs" <<'PY'
import collections, statistics, sys
path, rounds, before, after, elapsed, items, image_epochs, train_epochs = sys.argv[1:]
v = collections.defaultdict(dict)  # key -> (round, side) -> value
for line in open(path):
    r, key, side, value = line.split()
    v[key][(int(r), side)] = float(value)
rows = [
    ("stream_w8", "stream overhead: chain / plain, 64 B, window 8", "%"),
    ("stream_w64", "stream overhead: chain / plain, 64 B, window 64", "%"),
    ("ps_parts", "PS push+pull in parts, vs TCP", "%"),
    ("ps_one", "PS push+pull in one message, vs TCP", "%"),
    ("input", "input pipeline (actorflow_images), records/s", ""),
    ("train", "training (actorflow_mlp, 2 trainers), samples/s", ""),
]
print(f"A = {before}, B = {after}; {rounds} round(s) (A first in odd rounds, B first in "
      f"even ones), {int(elapsed) / 60:.1f} min. stream_overhead --items {items} --reps 3; "
      f"ps_throughput --reps 1; images: {image_epochs} epochs of 2,000; "
      f"training: {train_epochs} epochs. Medians; B/A = median of the per-round ratios.")
print()
print("| benchmark | A (median) | B (median) | B/A (median) | B/A min | B/A max |")
print("|---|---|---|---|---|---|")
for key, label, unit in rows:
    cells = v[key]
    rs = sorted({r for r, _ in cells})
    a = [cells[(r, "A")] for r in rs]
    b = [cells[(r, "B")] for r in rs]
    ratios = [y / x for x, y in zip(a, b)]
    fmt = (lambda x: f"{x:.1f}%") if unit == "%" else (lambda x: f"{x:,.0f}")
    print(f"| {label} | {fmt(statistics.median(a))} | {fmt(statistics.median(b))} | "
          f"{statistics.median(ratios):.2f} | {min(ratios):.2f} | {max(ratios):.2f} |")
PY
