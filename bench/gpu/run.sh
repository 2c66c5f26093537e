#!/usr/bin/env bash
# The GPU benchmark (issue 19): one call on the lent machine (16 cores, one
# H200, no network), at most 8 minutes. Prepare here with bench/gpu/pack.sh,
# then run there from the repository root:
#   bash bench/gpu/run.sh build/gpu-pack          (files also go to $OUT)
# It prints one table, and writes it to $OUT/table.txt (or
# /tmp/af-gpu-out/), beside results.tar.gz: every run's topology, summary,
# report JSON, log and GPU samples (the device tool returns 8 files at most).
# Every run is cut so that it ends (its summary and a 30 s grace
# included) within 470 s of the start; a run with under 15 s left is
# skipped (its row says so). The table and the archive are rewritten after
# every run, so a call cut short still returns what ran.
# AF_GPU_BENCH_LIMIT_S=N caps every run at N seconds (a quick rehearsal).
#   - the CUDA agreement tests (cuda_device_test);
#   - fmnist_mlp and fmnist_cnn (apps/examples, 10 epochs) on the GPU in
#     fp32, tf32 and bf16, trainers and evaluator on "cuda": samples/s, test
#     accuracy, the step-time breakdown of the summary, and the GPU's busy
#     share (nvidia-smi's utilization.gpu sampled every 200 ms, the mean
#     over the run);
#   - the same examples on the machine's CPU: MLP with 2 trainers and with
#     one per 2 cores; CNN for 40 s each with 2 trainers, with one per 2
#     cores, with OPENBLAS_NUM_THREADS=1 and with OPENBLAS_CORETYPE=Haswell
#     (the 16-core slowdown of issue 19: which kernels OpenBLAS picked, and
#     whether its threads matter); each run's log has OpenBLAS's kernel
#     set.
#   - JPEG decoding (issue 19 item 5) of the packed ImageNet-sized
#     photographs to 224x224 crops: nvJPEG (image_decode device "cuda",
#     2 replicas) against libjpeg-turbo with one decoder per core, 25 s
#     each, records/s from the summary's throughput line; and fmnist_cnn
#     with its images decoded by nvJPEG after the batcher, so that batches
#     reach the trainers in GPU memory.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
pack=${1:?usage: run.sh PACK_DIR (from bench/gpu/pack.sh)}
out=${OUT:-/tmp/af-gpu-out}
mkdir -p "$out"
work=$(mktemp -d /tmp/af-gpu.XXXXXX)
res=$work/results
mkdir -p "$res"
budget=470 # seconds: every run ends before then
cap=${AF_GPU_BENCH_LIMIT_S:-0}
smi_pid=
trap '[ -z "$smi_pid" ] || kill "$smi_pid" 2>/dev/null; rm -rf "$work"' EXIT
started=$SECONDS
log() { echo "[$((SECONDS - started)) s] $*" >&2; }

mkdir -p "$work/pack"
tar -C "$work/pack" -xJf "$pack/actorflow.tar.xz" || exit 1
# cuBLAS and cuDNN come from the machine: the CUDA toolkit, a system
# library directory, or a Python package's (nvidia-cudnn-cu13).
libs=$work/pack/lib
for want in libcublas.so.13 libcublasLt.so.13 libcudnn.so.9; do
  dir=$(ldconfig -p 2>/dev/null | awk -v w="$want" '$1 == w { print $NF; exit }')
  [ -n "$dir" ] || dir=$(find /usr/local/cuda*/ /usr/lib /usr/local/lib /opt \
                          -name "$want" 2>/dev/null | head -1)
  [ -n "$dir" ] || { echo "run.sh: $want not found on this machine" >&2; exit 1; }
  case ":$libs:" in
    *":$(dirname "$dir"):"*) ;;
    *) libs=$libs:$(dirname "$dir") ;;
  esac
done
export LD_LIBRARY_PATH=$libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
bin=$work/pack/bin/actorflow
if ldd "$bin" | grep -q 'not found'; then
  ldd "$bin" | grep 'not found' >&2
  exit 1
fi

cores=$(nproc)
{
  echo "date: $(date -u '+%Y-%m-%d %H:%M UTC')"
  echo "actorflow: $("$bin" --version 2>&1 | head -1)"
  echo "cores: $cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'))"
  echo "gpu: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | head -1)"
  echo "libraries: $LD_LIBRARY_PATH"
} | tee "$res/machine.txt"

log "converting Fashion-MNIST"
data=$work/data
mkdir -p "$data"
"$bin" convert idx --images "$pack/fmnist/train-images-idx3-ubyte.gz" \
  --labels "$pack/fmnist/train-labels-idx1-ubyte.gz" --out "$data/train" \
  --shards 4 --format jpeg --quality 90 > /dev/null || exit 1
"$bin" convert idx --images "$pack/fmnist/t10k-images-idx3-ubyte.gz" \
  --labels "$pack/fmnist/t10k-labels-idx1-ubyte.gz" --out "$data/test" \
  --shards 1 --format jpeg --quality 90 > /dev/null || exit 1

log "cuda_device_test"
timeout 60 "$work/pack/bin/cuda_device_test" -d yes > "$res/cuda_device_test.txt" 2>&1
agree=$(grep -E '^(All tests passed|test cases:)' "$res/cuda_device_test.txt" | head -1)
skips=$(grep -c '^SKIP' "$res/cuda_device_test.txt")
[ "$skips" -eq 0 ] || agree="$agree; $skips cases printed SKIP (no GPU)"
log "gpu_stages_test (nvJPEG against libjpeg-turbo)"
timeout 60 "$work/pack/bin/gpu_stages_test" -d yes > "$res/gpu_stages_test.txt" 2>&1
nvjpeg_agree=$(grep -E '^(All tests passed|test cases:)|^SKIP' "$res/gpu_stages_test.txt" | head -1)

# job NAME EXAMPLE DEVICE PRECISION TRAINERS: the example's topology with
# the data here and its trainers (and, on cuda, evaluator) on DEVICE.
job() {
  local name=$1 example=$2 device=$3 precision=$4 trainers=$5
  sed -e "s|build/data/fmnist/|$data/|" \
      -e "s|trainer { device: \"cpu\"|trainer { device: \"$device\" precision: \"$precision\"|" \
      -e '/^checkpoint {/,/^}/d' \
      "$root/apps/examples/$example.pbtxt" > "$res/$name.pbtxt"
  # The trainer stage's replicas.
  awk -v n="$trainers" '/name: "train"/ { t = 1 } t && /replicas:/ { sub(/replicas: [0-9]+/, "replicas: " n); t = 0 } { print }' \
    "$res/$name.pbtxt" > "$work/$name.tmp" && mv "$work/$name.tmp" "$res/$name.pbtxt"
  if [ "$device" = cuda ]; then
    sed -i 's|evaluator { |evaluator { device: "cuda" |' "$res/$name.pbtxt"
  fi
}

# The table so far, to $OUT with the archive of every run's files.
table() {
  {
    cat "$res/machine.txt"
    echo
    echo "CUDA agreement tests: ${agree:-see cuda_device_test.txt}"
    echo "nvJPEG agreement tests: ${nvjpeg_agree:-see gpu_stages_test.txt}"
    grep 'mean |diff|' "$res/gpu_stages_test.txt" 2>/dev/null | sed 's/^/  /'
    echo
    printf '%-22s | %6s | %9s | %8s | %5s | %-44s | %s\n' run rc samples/s \
      accuracy "GPU%" "step time (summary)" "OpenBLAS"
    for r in "${rows[@]}"; do echo "$r"; done
    echo
    echo
    printf '%-22s | %6s | %9s\n' "decoding run" rc "images/s"
    for r in "${decode_rows[@]}"; do echo "$r"; done
    echo "rc 124: stopped by its time limit (SIGINT; the summary is of the run so far)"
    echo "total: $((SECONDS - started)) s"
  } > "$res/table.txt"
  cp "$res/table.txt" "$out/table.txt"
  tar -C "$work" -czf "$out/results.tar.gz" results
}

rows=()
decode_rows=()
# run NAME LIMIT_S [ENV...]: runs $res/NAME.pbtxt (stopped with SIGINT
# after LIMIT_S), samples the GPU, adds a row.
run() {
  local name=$1 limit=$2
  shift 2
  local fmt='%-22s | %6s | %9s | %8s | %5s | %-44s | %s'
  local left=$((budget - (SECONDS - started) - 35))
  if [ "$left" -lt 15 ]; then
    rows+=("$(printf "$fmt" "$name" skip - - - "not run: the $budget s are spent" "")")
    table
    return
  fi
  [ "$left" -lt "$limit" ] && limit=$left
  [ "$cap" -gt 0 ] && [ "$cap" -lt "$limit" ] && limit=$cap
  log "run $name (at most $limit s) $*"
  : > "$res/$name.smi"
  if [[ $name == gpu* ]] && command -v nvidia-smi > /dev/null; then
    nvidia-smi --query-gpu=utilization.gpu --format=csv,noheader,nounits \
      -lms 200 > "$res/$name.smi" 2>/dev/null &
    smi_pid=$!
  fi
  # SIGINT stops the job, which still evaluates and prints its summary;
  # SIGKILL 30 s later if it does not.
  env "$@" timeout -k 30 -s INT "$limit" "$bin" run "$res/$name.pbtxt" \
    --no-progress --report-json "$res/$name.json" > "$res/$name.txt" \
    2> "$res/$name.log"
  local rc=$?
  if [ -n "$smi_pid" ]; then
    kill "$smi_pid" 2>/dev/null
    wait "$smi_pid" 2>/dev/null
    smi_pid=
  fi
  local util
  util=$(awk '$1 ~ /^[0-9]+$/ { s += $1; n++ } END { if (n) printf "%.0f%%", s / n; else print "-" }' "$res/$name.smi")
  local rate acc steptime blas
  rate=$(sed -n 's/^  training: .* \([0-9]*\) samples\/s, .*/\1/p' "$res/$name.txt")
  acc=$(sed -n 's/^  test (step [0-9]*): .*accuracy \([0-9.]*\).*/\1/p' "$res/$name.txt")
  steptime=$(sed -n 's/^  step time of train (\([0-9]*\) steps timed), ms: \([0-9.]*\) = .*compute \([0-9.]*\) (host.*device busy \([0-9]*%\)$/step \2 ms, compute \3 ms, busy \4/p' "$res/$name.txt")
  blas=$(grep -o -m1 'on the cpu: OpenBLAS [^,]*, [0-9]* threads\?' "$res/$name.log" | sed 's/on the cpu: //')
  rows+=("$(printf "$fmt" "$name" "${rc}" "${rate:--}" "${acc:--}" "$util" "${steptime:--}" "${blas:-}")")
  table
}

# decode NAME DEVICE DECODERS LIMIT_S: bench/gpu/decode.pbtxt.in's pipeline
# over the packed photographs; a row with the summary's records/s.
decode() {
  local name=$1 device=$2 decoders=$3 limit=$4
  local fmt='%-22s | %6s | %9s'
  local left=$((budget - (SECONDS - started) - 35))
  if [ ! -d "$pack/images" ] || [ "$left" -lt 15 ]; then
    decode_rows+=("$(printf "$fmt" "$name" skip "not run: no images in the pack, or the $budget s are spent")")
    table
    return
  fi
  [ "$left" -lt "$limit" ] && limit=$left
  [ "$cap" -gt 0 ] && [ "$cap" -lt "$limit" ] && limit=$cap
  log "decode $name (at most $limit s)"
  sed -e "s|@DIR@|$pack/images|" -e "s|@DECODERS@|$decoders|" \
      -e "s|@DEVICE@|$device|" "$root/bench/gpu/decode.pbtxt.in" \
      > "$res/$name.pbtxt"
  timeout -k 30 -s INT "$limit" "$bin" run "$res/$name.pbtxt" --no-progress \
    --report-json "$res/$name.json" > "$res/$name.txt" 2> "$res/$name.log"
  local rc=$?
  local rate
  rate=$(sed -n 's/^  throughput: \([0-9]*\) records\/s.*/\1/p' "$res/$name.txt")
  decode_rows+=("$(printf "$fmt" "$name" "$rc" "${rate:--}")")
  table
}

half=$((cores / 2))
[ "$half" -ge 1 ] || half=1
# fp32 on the GPU and the CPU's CNN first: if the GPU runs take their
# caps, the rows cut by the budget are the other precisions'.
job gpu-mlp-fp32 fmnist_mlp cuda fp32 2;         run gpu-mlp-fp32 45
job gpu-cnn-fp32 fmnist_cnn cuda fp32 2;         run gpu-cnn-fp32 60
job cpu-cnn-2 fmnist_cnn cpu fp32 2;             run cpu-cnn-2 40
job "cpu-cnn-$half" fmnist_cnn cpu fp32 "$half"; run "cpu-cnn-$half" 40
decode "decode-cpu-$cores" cpu "$cores" 25
decode decode-nvjpeg cuda 2 25
# fmnist_cnn with nvJPEG after the batcher (as tests/apps/examples_test.sh's
# PRECISION_nvjpeg variant; tests/apps/decode_on_gpu.sh): batches reach
# the trainers in GPU memory.
job gpu-cnn-fp32-nvjpeg fmnist_cnn cuda fp32 2
if bash "$root/tests/apps/decode_on_gpu.sh" "$res/gpu-cnn-fp32-nvjpeg.pbtxt"; then
  run gpu-cnn-fp32-nvjpeg 45
else
  rows+=("gpu-cnn-fp32-nvjpeg    |   skip | not run: decode_on_gpu.sh could not rewire the topology")
fi
for p in tf32 bf16; do
  job "gpu-cnn-$p" fmnist_cnn cuda "$p" 2;       run "gpu-cnn-$p" 60
done
for p in tf32 bf16; do
  job "gpu-mlp-$p" fmnist_mlp cuda "$p" 2;       run "gpu-mlp-$p" 45
done
job cpu-mlp-2 fmnist_mlp cpu fp32 2;             run cpu-mlp-2 45
job "cpu-mlp-$half" fmnist_mlp cpu fp32 "$half"; run "cpu-mlp-$half" 45
job cpu-cnn-2-blas1 fmnist_cnn cpu fp32 2;       run cpu-cnn-2-blas1 40 OPENBLAS_NUM_THREADS=1
job cpu-cnn-2-haswell fmnist_cnn cpu fp32 2;     run cpu-cnn-2-haswell 40 OPENBLAS_CORETYPE=Haswell

table
cat "$out/table.txt"
