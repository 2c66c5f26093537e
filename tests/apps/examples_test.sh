#!/usr/bin/env bash
# Runs one of apps/examples/ end to end and checks the target the training
# issue set for it (docs/training.md, "Measured"):
#   fmnist_mlp     test accuracy >= 0.89 after 10 epochs
#   fmnist_cnn     test accuracy >= 0.91
#   fmnist_resnet  test accuracy >= 0.92 (a TorchScript model, scripted by
#                  apps/examples/fmnist_resnet.py first)
#   ctr_embedding  AUC within 0.01 of the planted model's AUC
#   criteo_like    the same (docs/case-study.md), on 2 M generated click
#                  logs (bench/seed_case/prepare.sh writes them into
#                  DATA_DIR once)
#   text_classification  test accuracy >= 0.97 (the best is 1.0: the data
#                  has a known answer, apps/examples/text/make_data.py,
#                  which writes it into DATA_DIR)
# Fashion-MNIST comes from Debian's dataset-fashion-mnist, converted once
# into DATA_DIR (JPEG TFRecords, as scripts/demo does); the example's paths
# are pointed there.
# An example with a `checkpoint` section (fmnist_mlp, the main job) is run
# as `scripts/demo --resume` is meant to be used: its checkpoints go to a
# temporary directory, every 2000 steps (instead of its once a minute: the
# whole job takes less here), the run is SIGKILLed once the first
# checkpoint is complete, and `actorflow run --resume` finishes it; the
# target is checked on the resumed run, which must say it resumed.
# With PRECISION (fp32, tf32 or bf16) the trainers and the evaluator run
# on the GPU (device "cuda"; the trainers with that precision), the same
# targets apply, and the summary must hold the step-time breakdown. Without
# a GPU that prints "SKIP: no GPU: <why>" (CTest: skipped).
# PRECISION_nvjpeg (fmnist_cnn only) also decodes the training images on
# the GPU (image_decode device "cuda"), after the batcher, so that each
# batch goes to the trainer in GPU memory; the summary must say that every
# batch was read there. Without nvJPEG in the build that is a skip too.
#   examples_test.sh ACTORFLOW EXAMPLE_DIR NAME DATA_DIR [PRECISION[_nvjpeg]]
set -euo pipefail
bin=$1 examples=$2 name=$3 data=$4 precision=${5:-}
nvjpeg=
if [[ $precision == *_nvjpeg ]]; then
  precision=${precision%_nvjpeg} nvjpeg=1
fi
work=$(mktemp -d)
killed=
trap '[ -z "$killed" ] || kill -9 "$killed" 2>/dev/null; rm -rf "$work"' EXIT

if [[ $name == fmnist_* ]]; then
  mkdir -p "$data"
  exec 9> "$data/.lock"
  flock 9
  if [ ! -f "$data/complete" ]; then
    for split in train t10k; do
      img=$(dpkg -L dataset-fashion-mnist | grep "$split-images-idx3")
      out=$data/train shards=4
      [ $split = train ] || { out=$data/test; shards=1; }
      "$bin" convert idx --images "$img" --labels "${img/images-idx3/labels-idx1}" \
        --out "$out" --shards $shards --format jpeg --quality 90 > /dev/null
    done
    touch "$data/complete"
  fi
  flock -u 9
fi
if [[ $name == text_* ]]; then
  python3 "$examples/text/make_data.py" "$data" > /dev/null
fi
if [[ $name == criteo_* ]]; then
  mkdir -p "$data"
  exec 9> "$data/.lock"
  flock 9
  AF_BIN=$bin "$examples/../../bench/seed_case/prepare.sh" "$data" > /dev/null
  flock -u 9
fi
# A TorchScript model (fmnist_resnet) is scripted by its companion script
# (Debian's python3-torch) into the temporary directory.
sed_module=()
if grep -q '^ *torchscript { file: "build/models/' "$examples/$name.pbtxt"; then
  /usr/bin/python3 "$examples/$name.py" --out "$work/$name.pt" > /dev/null
  sed_module=(-e "s|build/models/$name.pt|$work/$name.pt|")
fi
sed "${sed_module[@]}" -e "s|build/data/fmnist/|$data/|" -e "s|build/data/text/|$data/|g" \
    -e "s|build/data/criteo_like/|$data/|g" \
    -e "s|^\(  dir: \)\"[^\"]*\"|\1\"$work/ckpt\"|" \
    -e "s|^  every_seconds: .*|  every_steps: 2000|" \
    "$examples/$name.pbtxt" > "$work/job.pbtxt"
# skip_without_gpu ERR: a GPU run that failed for want of a GPU is skipped.
skip_without_gpu() {
  local why
  if [ -n "$precision" ] && why=$(grep -o -m1 'CUDA is not available: .*\|this build has no CUDA device.*\|no nvJPEG decoder.*' "$1"); then
    echo "SKIP: no GPU: $why"; exit 0
  fi
}
if [ -n "$precision" ]; then
  sed -i -e "s|trainer { device: \"cpu\"|trainer { device: \"cuda\" precision: \"$precision\"|" \
         -e "s|evaluator { |evaluator { device: \"cuda\" |" "$work/job.pbtxt"
  grep -q "precision: \"$precision\"" "$work/job.pbtxt" && grep -q 'evaluator { device: "cuda"' "$work/job.pbtxt" || {
    echo "FAIL: could not put $name's trainers and evaluator on the GPU"; exit 1; }
fi
if [ -n "$nvjpeg" ]; then
  bash "$(dirname "$0")/decode_on_gpu.sh" "$work/job.pbtxt" || {
    echo "FAIL: could not move $name's decoding after the batcher, onto the GPU"; exit 1; }
fi
resume=()
if grep -q '^checkpoint {' "$work/job.pbtxt"; then
  grep -q "dir: \"$work/ckpt\"" "$work/job.pbtxt" && grep -q '^  every_steps: 2000' "$work/job.pbtxt" || {
    echo "FAIL: could not point the checkpoints of $name to $work/ckpt, every 2000 steps"; exit 1; }
  "$bin" run "$work/job.pbtxt" --no-progress > "$work/out1" 2> "$work/err1" &
  killed=$!
  start=$SECONDS
  until compgen -G "$work/ckpt/ckpt-*/MANIFEST" > /dev/null; do
    if ! kill -0 "$killed" 2>/dev/null; then
      skip_without_gpu "$work/err1"
      cat "$work/out1" "$work/err1"
      echo "FAIL: $name ended before its first checkpoint"; exit 1
    fi
    [ $((SECONDS - start)) -lt 600 ] || { echo "FAIL: no checkpoint of $name within 600 s"; exit 1; }
    sleep 0.2
  done
  kill -9 "$killed"
  wait "$killed" 2>/dev/null || true
  killed=
  echo "SIGKILLed $name after $((SECONDS - start)) s, once $(basename "$(dirname "$(compgen -G "$work/ckpt/ckpt-*/MANIFEST" | tail -1)")") was complete"
  resume=(--resume)
fi
"$bin" run "$work/job.pbtxt" --no-progress "${resume[@]}" > "$work/out" 2> "$work/err" || {
  skip_without_gpu "$work/err"
  cat "$work/out" "$work/err"; echo "FAIL: $name did not finish"; exit 1; }
cat "$work/out"
if [ -n "$precision" ]; then
  grep -q '^  step time of train (.* steps timed), ms: .*device busy [0-9]*%$' "$work/out" || {
    echo "FAIL: no step-time breakdown in the summary"; exit 1; }
fi
if [ -n "$nvjpeg" ]; then
  grep -q '^  step time of train .*input read in GPU memory 100%; ' "$work/out" || {
    echo "FAIL: the trainers did not read every batch in GPU memory"; exit 1; }
fi
if [ ${#resume[@]} -gt 0 ]; then
  grep -q '^  resumed from .*(step [1-9]' "$work/out" || {
    cat "$work/err"; echo "FAIL: the second run of $name did not resume from a checkpoint"; exit 1; }
fi
line=$(grep '^  test (step' "$work/out") || { echo "FAIL: no test line"; exit 1; }
# number WHAT VALUE: VALUE is one number in [0, 1] (an accuracy, an AUC),
# or the test fails: a summary that does not parse must not pass.
number() {
  [[ $2 =~ ^(0(\.[0-9]+)?|1(\.0+)?)$ ]] || {
    echo "FAIL: cannot read the $1 (a number in [0, 1]) from the summary's test line: '$line' (got '$2')"
    exit 1; }
}
case $name in
  fmnist_mlp) want=0.89 ;;
  fmnist_cnn) want=0.91 ;;
  fmnist_resnet) want=0.92 ;;
  text_classification) want=0.97 ;;
esac
if [ $name = ctr_embedding ] || [ $name = criteo_like ]; then
  auc=$(sed -n 's/.*AUC \([0-9.]*\) (planted.*/\1/p' <<< "$line")
  best=$(sed -n "s/.*planted model's AUC \([0-9.]*\)).*/\1/p" <<< "$line")
  number AUC "$auc"; number "planted model's AUC" "$best"
  awk -v a="$auc" -v b="$best" 'BEGIN { exit !(b - a <= 0.01) }' || {
    echo "FAIL: AUC $auc is more than 0.01 below the planted $best"; exit 1; }
  echo "ok: AUC $auc, planted $best"
else
  acc=$(sed -n 's/.*accuracy \([0-9.]*\).*/\1/p' <<< "$line")
  number accuracy "$acc"
  awk -v a="$acc" -v w="$want" 'BEGIN { exit !(a >= w) }' || {
    echo "FAIL: test accuracy $acc < $want"; exit 1; }
  echo "ok: test accuracy $acc >= $want"
fi
