#!/usr/bin/env bash
# Rewires apps/examples/fmnist_cnn.pbtxt (a copy, in place) so that its
# training images are decoded on the GPU after the batcher:
#   read -> parse -> cache -> shuffle -> batch -> decode (cuda) -> train
# so that each batch reaches the trainers in GPU memory. Fails naming the
# file when the topology no longer has the shape this expects. Used by
# tests/apps/examples_test.sh and bench/gpu/run.sh.
#   decode_on_gpu.sh TOPOLOGY_FILE
set -euo pipefail
file=${1:?usage: decode_on_gpu.sh TOPOLOGY_FILE}
perl -0pi -e '
  s/(name: "decode"\n  type: "image_decode"\n  replicas: 2\n  input \{ stage: )"parse" \}\n  image_decode \{\n/$1"batch" }\n  image_decode {\n    device: "cuda"\n/;
  s/(name: "cache"\n  type: "cache"\n  input \{ stage: )"decode"/$1"parse"/;
  s/(name: "train"\n  type: "trainer"\n  replicas: 2\n  input \{ stage: )"batch"/$1"decode"/;
' "$file"
perl -0ne 'exit !(/input \{ stage: "batch" \}\n  image_decode \{\n    device: "cuda"\n/
                 && /type: "cache"\n  input \{ stage: "parse" \}/
                 && /type: "trainer"\n  replicas: 2\n  input \{ stage: "decode" /)' \
  "$file" || {
  echo "decode_on_gpu.sh: $file: could not move the decoding after the batcher, onto the GPU" >&2
  exit 1; }
