#!/usr/bin/env bash
# The case study's data (docs/case-study.md): Criteo-like click logs as CSV
# from `actorflow generate criteo`, converted to TFRecord shards by
# `actorflow convert csv` (a missing count reads as 0, a missing category as
# the empty string), as the seed's team converted its CSV logs.
#   bench/seed_case/prepare.sh [DIR] [ROWS] [TEST_ROWS] [SEED]
# DIR defaults to build/data/criteo_like (where apps/examples/criteo_like.pbtxt
# reads), ROWS to 2000000, TEST_ROWS to 100000, SEED (the generator's: the
# planted model and both splits; another seed is another data set) to 1. Writes DIR/train.csv,
# DIR/test.csv, DIR/planted.json, DIR/train-0000K-of-00012.tfrecord (12
# shards: a multiple of 6 workers) and DIR/test-0000K-of-00002.tfrecord.
# Needs the Release binary (scripts/setup). Does nothing when DIR/complete
# (written last) is there and DIR/planted.json says the same rows and seed.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
bin=${AF_BIN:-$root/build/release/bin/actorflow}
dir=${1:-$root/build/data/criteo_like}
rows=${2:-2000000}
test_rows=${3:-100000}
seed=${4:-1}
case $seed in ''|*[!0-9]*) echo "prepare.sh: SEED must be a non-negative integer, not '$seed'" >&2; exit 2;; esac
[ -x "$bin" ] || { echo "prepare.sh: $bin is missing; run scripts/setup first" >&2; exit 2; }
if [ -f "$dir/complete" ] && [ -f "$dir/planted.json" ] \
   && grep -q "\"rows\": $rows," "$dir/planted.json" \
   && grep -q "\"test_rows\": $test_rows," "$dir/planted.json" \
   && grep -q "\"seed\": $seed," "$dir/planted.json"; then
  echo "prepare.sh: $dir already holds $rows + $test_rows rows of seed $seed"
  exit 0
fi
mkdir -p "$dir"
rm -f "$dir/complete"
"$bin" generate criteo --out "$dir" --rows "$rows" --test-rows "$test_rows" --seed "$seed"
cols=(--column label:int64)
for k in $(seq 1 13); do cols+=(--column "I$k:float:0"); done
for j in $(seq 1 26); do cols+=(--column "C$j:string:"); done
cols+=(--column planted_logit:float)
"$bin" convert csv "$dir/train.csv" "${cols[@]}" --out "$dir/train" --shards 12
"$bin" convert csv "$dir/test.csv" "${cols[@]}" --out "$dir/test" --shards 2
touch "$dir/complete" # written last: an interrupted run starts again
