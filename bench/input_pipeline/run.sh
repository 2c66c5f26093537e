#!/usr/bin/env bash
# The input-pipeline benchmark, every contender in one run, as a markdown
# table (docs/benchmarks.md shows one). Needs a Release build
# (scripts/setup && cmake --build build/release) and the packages that
# bench/input_pipeline/README.md lists; installs the Debian ones if missing.
#   bench/input_pipeline/run.sh [EPOCHS]
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
here=$root/bench/input_pipeline
bin=$root/build/release/bin
epochs=${1:-3}
images=${AF_BENCH_IMAGES:-/tmp/af_bench_images}
tfr=${AF_BENCH_TFR:-/tmp/af_bench_tfr}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

need=()
for p in lomiri-wallpapers-16.04 python3-pil python3-torch python3-torchvision libopenblas0-pthread dataset-fashion-mnist; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || need+=("$p")
done
if [ ${#need[@]} -gt 0 ]; then
  sudo=""; [ "$(id -u)" -eq 0 ] || sudo=sudo
  $sudo apt-get install -y -q --no-install-recommends "${need[@]}" >&2
fi
cmake --build "$root/build/release" --target actorflow input_plain_loop >&2

/usr/bin/python3 "$here/make_dataset.py" --out "$images" --count 2000 --seed 0 >&2
if [ ! -f "$tfr/train-00003-of-00004.tfrecord" ]; then
  mkdir -p "$tfr"
  python3 "$here/tfdata_peer.py" --write-from-folder "$images" --out "$tfr/train" --shards 4 >&2
fi

json_field() { python3 -c 'import json,sys; print(round(json.loads(sys.stdin.readlines()[-1])[sys.argv[1]]))' "$1"; }
actorflow_rate() {  # topology -> records/s from the summary
  "$bin/actorflow" run "$1" --no-progress 2>/dev/null | sed -n 's/.*throughput: \([0-9]*\) records\/s.*/\1/p'
}

declare -A rate
for t in 1 2; do
  rate[plain$t]=$("$bin/input_plain_loop" --files "$tfr/*.tfrecord" --threads $t --epochs "$epochs" | json_field images_per_s)
  sed -e "s|@FILES@|$tfr/*.tfrecord|" -e "s|@DECODERS@|$t|" -e "s|@EPOCHS@|$epochs|" \
    "$here/actorflow_images.pbtxt.in" > "$work/af$t.pbtxt"
  rate[af$t]=$(actorflow_rate "$work/af$t.pbtxt")
  rate[tf$t]=$(python3 "$here/tfdata_peer.py" --files "$tfr/*.tfrecord" --threads $t --epochs "$epochs" 2>/dev/null | json_field images_per_s)
done
for w in 0 1 2; do
  rate[torch$w]=$(/usr/bin/python3 "$here/torch_peer.py" --data "$images" --workers $w --epochs "$epochs" 2>/dev/null | json_field images_per_s)
done

# Fashion-MNIST JPEG records to batches (the main job's pipeline).
fm=$root/build/data/fmnist
if [ ! -f "$fm/complete" ]; then
  img=$(dpkg -L dataset-fashion-mnist | grep train-images-idx3)
  mkdir -p "$fm"
  "$bin/actorflow" convert idx --images "$img" --labels "${img/images-idx3/labels-idx1}" --out "$fm/train" --shards 4 >&2
  touch "$fm/complete"
fi
fm_epochs=10  # 600,000 images: long enough that start-up does not count
rate[fmplain]=$("$bin/input_plain_loop" --files "$fm/train-*.tfrecord" --threads 2 --epochs $fm_epochs --size 28 --channels 1 --op resize --norm fmnist | json_field images_per_s)
sed -e "s|@FILES@|$fm/train-*.tfrecord|" -e "s|@EPOCHS@|$fm_epochs|" "$here/actorflow_fmnist.pbtxt.in" > "$work/fm.pbtxt"
rate[fmaf]=$(actorflow_rate "$work/fm.pbtxt")

pct() { python3 -c "print(f'{100*$1/$2:.0f}%')"; }
echo "| pipeline | threads / workers | images/s | vs plain loop, same threads |"
echo "|---|---|---|---|"
for t in 1 2; do
  echo "| plain C++ loop (TurboJPEG, preloaded bytes) | $t | ${rate[plain$t]} | 100% |"
  echo "| ActorFlow (decode replicas = $t) | $t | ${rate[af$t]} | $(pct ${rate[af$t]} ${rate[plain$t]}) |"
  echo "| tf.data (AUTOTUNE, $t threads) | $t | ${rate[tf$t]} | $(pct ${rate[tf$t]} ${rate[plain$t]}) |"
done
for w in 0 1 2; do
  ref=${rate[plain$(( w == 0 ? 1 : w ))]}
  echo "| PyTorch DataLoader + torchvision | $w workers | ${rate[torch$w]} | $(pct ${rate[torch$w]} $ref) |"
done
echo
echo "| Fashion-MNIST JPEG records to batches | threads | images/s | vs plain loop |"
echo "|---|---|---|---|"
echo "| plain C++ loop | 2 | ${rate[fmplain]} | 100% |"
echo "| ActorFlow read, parse, decode x2, batch (actorflow_fmnist.pbtxt.in) | 2 | ${rate[fmaf]} | $(pct ${rate[fmaf]} ${rate[fmplain]}) |"
