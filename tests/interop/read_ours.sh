#!/usr/bin/env bash
# TensorFlow reads files that `actorflow convert` wrote (Fashion-MNIST as
# JPEG and raw, plain and gzip; a CSV) and must see the features that
# `actorflow inspect` reports. Usage: read_ours.sh ACTORFLOW
set -eu
bin=$1
here=$(cd "$(dirname "$0")" && pwd)
py() { bash "$here/python.sh" "$@"; }
# shellcheck source=../support/skip.sh
source "$here/../support/skip.sh"
# Without TensorFlow python.sh says SKIP (exit 0), or FAIL where CI is set.
check=$(py -c 'import tensorflow') || { echo "$check"; exit 1; }
if grep -q '^SKIP:' <<<"$check"; then echo "$check"; exit 0; fi
images=$(dpkg -L dataset-fashion-mnist 2>/dev/null | grep 't10k-images') || true
[ -n "$images" ] || skip_missing "dataset-fashion-mnist is not installed"
labels=${images/images-idx3/labels-idx1}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$bin" convert idx --images "$images" --labels "$labels" --out "$tmp/jpeg" --shards 2 >/dev/null
"$bin" convert idx --images "$images" --labels "$labels" --out "$tmp/raw" --format raw --compression gzip >/dev/null
printf 'id,name,score\n1,a,0.5\n2,"b, c",-1e-3\n3,,nan\n' > "$tmp/t.csv"
"$bin" convert csv "$tmp/t.csv" --column id:int64 --column name:string --column score:float --out "$tmp/csv" >/dev/null
for f in "$tmp/jpeg-00001-of-00002.tfrecord" "$tmp/raw-00000-of-00001.tfrecord" "$tmp/csv-00000-of-00001.tfrecord"; do
  py "$here/tf_interop.py" --actorflow "$bin" --case read_ours --file "$f"
done
