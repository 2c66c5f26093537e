#!/usr/bin/env bash
# The input-pipeline benchmark: every contender on the same data with the
# same 2 cores, ROUNDS times interleaved (round 1: A, B, C, ...; round 2:
# A, B, C, ...), as a markdown table of medians and per-round ratios against
# the plain TurboJPEG loop of the same round, which decodes whole images
# (docs/benchmarks.md shows one). The plain loop and ActorFlow run twice:
# decoding only each crop's window (the default) and whole images.
# The machine is shared and noisy: a slow spell hits neighbouring runs
# alike, so read the paired ratios. Needs a Release build (scripts/setup &&
# cmake --build build/release), the Debian packages that
# bench/input_pipeline/README.md lists (installed here if missing) and
# TensorFlow in build/venv (scripts/setup) or in python3.
#   bench/input_pipeline/run.sh [ROUNDS] [EPOCHS] [all|fmnist]
# fmnist: only the Fashion-MNIST rows (the plain loop, ActorFlow reading
# and parsing every epoch, and ActorFlow with a cache after parse, which
# reads and parses once, as the plain loop does).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
here=$root/bench/input_pipeline
bin=$root/build/release/bin
rounds=${1:-3}
epochs=${2:-3}
set_=${3:-all}
case $set_ in all | fmnist) ;; *) echo "run.sh: the third argument is all or fmnist, not '$set_'" >&2; exit 2 ;; esac
threads=2  # the cores of the development machine; every contender gets them
images=${AF_BENCH_IMAGES:-/tmp/af_bench_images}
tfr=${AF_BENCH_TFR:-/tmp/af_bench_tfr}
count=2000
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

tfpy=python3
[ -x "$root/build/venv/bin/python" ] && tfpy=$root/build/venv/bin/python
"$tfpy" -c 'import tensorflow' 2>/dev/null || {
  echo "run.sh: $tfpy cannot import tensorflow: run scripts/setup (or pip install tensorflow-cpu)" >&2
  exit 2
}

need=()
for p in lomiri-wallpapers-16.04 python3-pil python3-torch python3-torchvision libopenblas0-pthread dataset-fashion-mnist; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || need+=("$p")
done
if [ ${#need[@]} -gt 0 ]; then
  sudo=""; [ "$(id -u)" -eq 0 ] || sudo=sudo
  $sudo apt-get install -y -q --no-install-recommends "${need[@]}" >&2
fi
# AF_BUILD_LOCK=FILE: build under flock FILE (others build in the same tree).
${AF_BUILD_LOCK:+flock "$AF_BUILD_LOCK"} cmake --build "$root/build/release" --target actorflow input_plain_loop >&2
# Copies, so that every round runs the same binaries even when the tree is
# rebuilt during the benchmark.
mkdir "$work/bin"
cp "$bin/actorflow" "$bin/input_plain_loop" "$work/bin/"
bin=$work/bin

# The images, and the same bytes as TFRecord shards (rewritten when the
# folder is newer than them).
/usr/bin/python3 "$here/make_dataset.py" --out "$images" --count $count --seed 0 >&2
if [ ! -f "$tfr/train-00003-of-00004.tfrecord" ] ||
   [ "$images/MANIFEST.json" -nt "$tfr/train-00003-of-00004.tfrecord" ]; then
  rm -rf "$tfr"
  mkdir -p "$tfr"
  "$tfpy" "$here/tfdata_peer.py" --write-from-folder "$images" --out "$tfr/train" --shards 4 >&2
fi
data_line=$(/usr/bin/python3 - "$images" <<'PY'
import glob, os, sys
sizes = [os.path.getsize(p) for p in glob.glob(os.path.join(sys.argv[1], "*", "*.jpg"))]
print("%d JPEGs, mean %.1f KiB (min %.1f, max %.1f), %.1f MB in all"
      % (len(sizes), sum(sizes) / len(sizes) / 1024, min(sizes) / 1024,
         max(sizes) / 1024, sum(sizes) / 1e6))
PY
)
echo "run.sh: data: $data_line" >&2

# Fashion-MNIST JPEG records (the main job's input).
fm=$root/build/data/fmnist
if [ ! -f "$fm/complete" ]; then
  img=$(dpkg -L dataset-fashion-mnist | grep train-images-idx3)
  mkdir -p "$fm"
  "$bin/actorflow" convert idx --images "$img" --labels "${img/images-idx3/labels-idx1}" --out "$fm/train" --shards 4 >&2
  touch "$fm/complete"
fi
fm_epochs=10  # 600,000 images: long enough that start-up does not count

sed -e "s|@FILES@|$tfr/*.tfrecord|" -e "s|@DECODERS@|$threads|" -e "s|@EPOCHS@|$epochs|" \
  -e "s|@DECODE_OPTIONS@||" "$here/actorflow_images.pbtxt.in" > "$work/af.pbtxt"
sed -e "s|@FILES@|$tfr/*.tfrecord|" -e "s|@DECODERS@|$threads|" -e "s|@EPOCHS@|$epochs|" \
  -e "s|@DECODE_OPTIONS@|full_decode: true|" "$here/actorflow_images.pbtxt.in" > "$work/af_full.pbtxt"
sed -e "s|@FILES@|$fm/train-*.tfrecord|" -e "s|@EPOCHS@|$fm_epochs|" \
  "$here/actorflow_fmnist.pbtxt.in" > "$work/fm.pbtxt"
sed -e "s|@FILES@|$fm/train-*.tfrecord|" -e "s|@EPOCHS@|$fm_epochs|" \
  "$here/actorflow_fmnist_cached.pbtxt.in" > "$work/fm_cached.pbtxt"

# Every contender prints images/s on stdout; a run that gives none fails
# the benchmark (no empty cells).
json_rate() { "$tfpy" -c 'import json,sys; print(round(json.loads(sys.stdin.readlines()[-1])["images_per_s"]))'; }
af_rate() {
  "$bin/actorflow" run "$1" --no-progress 2>&1 | sed -n 's/.*throughput: \([0-9]*\) records\/s.*/\1/p' | tail -1
}
run_contender() {
  case $1 in
    plain) "$bin/input_plain_loop" --files "$tfr/*.tfrecord" --threads $threads --epochs "$epochs" | json_rate ;;
    plain_window) "$bin/input_plain_loop" --files "$tfr/*.tfrecord" --threads $threads --epochs "$epochs" --decode window | json_rate ;;
    actorflow) af_rate "$work/af.pbtxt" ;;
    actorflow_full) af_rate "$work/af_full.pbtxt" ;;
    tfdata) "$tfpy" "$here/tfdata_peer.py" --files "$tfr/*.tfrecord" --threads $threads --epochs "$epochs" 2>/dev/null | json_rate ;;
    tfdata_crop) "$tfpy" "$here/tfdata_peer.py" --files "$tfr/*.tfrecord" --threads $threads --epochs "$epochs" --decode-and-crop 2>/dev/null | json_rate ;;
    torch) /usr/bin/python3 "$here/torch_peer.py" --data "$images" --workers $threads --epochs "$epochs" 2>/dev/null | json_rate ;;
    fmplain) "$bin/input_plain_loop" --files "$fm/train-*.tfrecord" --threads $threads --epochs $fm_epochs --size 28 --channels 1 --op resize --norm fmnist | json_rate ;;
    fmaf) af_rate "$work/fm.pbtxt" ;;
    fmaf_cached) af_rate "$work/fm_cached.pbtxt" ;;
  esac
}

contenders=()
if [ "$set_" = all ]; then
  contenders=(plain plain_window actorflow actorflow_full tfdata tfdata_crop)
  if /usr/bin/python3 -c 'import torch, torchvision' 2>/dev/null; then
    contenders+=(torch)
  else
    echo "run.sh: no torch/torchvision for /usr/bin/python3: the DataLoader row is left out" >&2
  fi
fi
contenders+=(fmplain fmaf fmaf_cached)
: > "$work/results"
for ((r = 1; r <= rounds; ++r)); do
  for c in "${contenders[@]}"; do
    echo "run.sh: round $r/$rounds: $c (load $(cut -d' ' -f1 /proc/loadavg))" >&2
    rate=$(run_contender "$c" || true)
    if ! [[ $rate =~ ^[0-9]+$ ]]; then
      echo "run.sh: $c gave no images/s in round $r" >&2
      exit 1
    fi
    echo "$r $c $rate" >> "$work/results"
  done
done

/usr/bin/python3 - "$work/results" "$rounds" "$epochs" "$count" "$data_line" <<'PY'
import collections, statistics, sys
path, rounds, epochs, count, data_line = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
rate = collections.defaultdict(dict)
for line in open(path):
    r, c, v = line.split()
    rate[c][int(r)] = float(v)
names = {
    "plain": "plain C++ loop, whole image decoded (TurboJPEG, preloaded bytes, 2 threads)",
    "plain_window": "plain C++ loop, crop window decoded (libjpeg, --decode window)",
    "actorflow": "ActorFlow, crop window decoded (actorflow_images.pbtxt.in, decode replicas = 2)",
    "actorflow_full": "ActorFlow, whole image decoded (full_decode: true)",
    "tfdata": "tf.data (AUTOTUNE, deterministic=False, 2 threads)",
    "tfdata_crop": "tf.data + decode_and_crop_jpeg (AUTOTUNE, deterministic=False, 2 threads)",
    "torch": "PyTorch DataLoader + torchvision (2 workers)",
    "fmplain": "plain C++ loop (2 threads)",
    "fmaf": "ActorFlow read, parse, decode x2, batch (actorflow_fmnist.pbtxt.in)",
    "fmaf_cached": "ActorFlow as above, cache after parse (actorflow_fmnist_cached.pbtxt.in)",
}
def table(rows, base, title):
    print(f"| {title} | images/s (median) | vs plain loop (median of rounds) | per round |")
    print("|---|---|---|---|")
    for c in rows:
        if c not in rate:
            continue
        ratios = [rate[c][r] / rate[base][r] for r in sorted(rate[c])]
        per_round = ", ".join("%.2f" % x for x in ratios)
        print(f"| {names[c]} | {statistics.median(rate[c].values()):,.0f} | "
              f"{statistics.median(ratios):.2f} | {per_round} |")
if "plain" in rate:
    print(f"Images: {data_line}; {epochs} epochs timed ({count * epochs:,} images) per run. "
          f"{rounds} rounds, interleaved; medians, ratios against the plain loop of the same round.")
    print()
    table(["plain", "plain_window", "actorflow", "actorflow_full", "tfdata", "tfdata_crop", "torch"],
          "plain", "pipeline, 2 cores")
    print()
table(["fmplain", "fmaf", "fmaf_cached"], "fmplain", "Fashion-MNIST JPEG records to batches")
PY
