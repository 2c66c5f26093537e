#!/usr/bin/env bash
# TensorFlow reads files that `actorflow convert` wrote (Fashion-MNIST as
# JPEG and raw, plain and gzip; a CSV) and must see the features that
# `actorflow inspect` reports; so do files that a job's tfrecord_sink wrote,
# which must hold exactly the records the job read. Usage: read_ours.sh ACTORFLOW
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
# tfrecord_sink (tf.data's save): a job reads the JPEG shard and the CSV
# file, parses every feature and writes it out again, GZIP.
for src in jpeg-00001-of-00002 csv-00000-of-00001; do
  if [ "$src" = csv-00000-of-00001 ]; then
    features='feature { name: "id" type: "int64" }
              feature { name: "name" type: "bytes" }
              feature { name: "score" type: "float" }'
  else
    features='feature { name: "image" type: "bytes" }
              feature { name: "label" type: "int64" }
              feature { name: "height" type: "int64" }
              feature { name: "width" type: "int64" }
              feature { name: "channels" type: "int64" }'
  fi
  cat > "$tmp/save-$src.pbtxt" <<EOF
stage { name: "read" type: "tfrecord_source"
        tfrecord_source { files: "$tmp/$src.tfrecord" } }
stage { name: "parse" type: "example_parse" input { stage: "read" }
        example_parse { $features } }
stage { name: "save" type: "tfrecord_sink" input { stage: "parse" }
        tfrecord_sink { path: "$tmp/saved-$src" compression: "gzip" } }
EOF
  "$bin" run "$tmp/save-$src.pbtxt" >/dev/null 2>"$tmp/run.log" || { cat "$tmp/run.log"; exit 1; }
done
# One TensorFlow process per call (its import takes seconds): the files
# convert wrote, then those the jobs wrote (gzip named explicitly).
py "$here/tf_interop.py" --actorflow "$bin" --case read_ours \
  --file "$tmp/jpeg-00001-of-00002.tfrecord" --file "$tmp/raw-00000-of-00001.tfrecord" \
  --file "$tmp/csv-00000-of-00001.tfrecord"
py "$here/tf_interop.py" --actorflow "$bin" --case read_ours --compression gzip \
  --file "$tmp/saved-jpeg-00001-of-00002-00000-00000.tfrecord.gz" \
  --file "$tmp/saved-csv-00000-of-00001-00000-00000.tfrecord.gz"
for src in jpeg-00001-of-00002 csv-00000-of-00001; do
  saved="$tmp/saved-$src-00000-00000.tfrecord.gz"
  # ... and holds exactly the records it read, in order.
  "$bin" inspect "$tmp/$src.tfrecord" --json --show all > "$tmp/in.json"
  "$bin" inspect "$saved" --compression gzip --json --show all > "$tmp/out.json"
  python3 - "$tmp/in.json" "$tmp/out.json" <<'EOF'
import json, sys
def features(path):
    return [json.loads(line)["features"] for line in open(path) if line.strip()]
a, b = features(sys.argv[1]), features(sys.argv[2])
if a != b:
    bad = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    print(f"FAIL: tfrecord_sink wrote {len(b)} records for {len(a)}; first difference at record {bad}")
    sys.exit(1)
print(f"tfrecord_sink: {len(a)} records read back exactly")
EOF
done
