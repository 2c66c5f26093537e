#!/usr/bin/env bash
# `actorflow export` end to end: a job trains tests/torchscript's "fmnist"
# module (a convolution with batch norm) on 6,000 Fashion-MNIST images with
# 2 trainers against 2 shards and checkpoints at its end; export writes the
# checkpoint's parameters and buffers into the module; PyTorch loads the
# result and evaluates it on the 10,000 test images, batch by batch as the
# evaluator does. Each record's predictions must equal those the evaluator
# wrote (evaluator.predictions) within 1e-5, its test loss the evaluator's
# within 1e-5 and its accuracy exactly, and a
# module that is not the one trained must be refused naming the variable.
# First: the backend plugin (actors/training/torchscript_plugin.hpp) missing, or a
# library that is not it, is refused at validate, naming the file.
#   export_test.sh ACTORFLOW MODULE_DIR
set -euo pipefail
bin=$1 modules=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
images=$(dpkg -L dataset-fashion-mnist | grep 'train-images-idx3')
test_images=$(dpkg -L dataset-fashion-mnist | grep 't10k-images-idx3')
cat > "$work/job.pbtxt" <<JOB
name: "export"
runtime { seed: 3 }
training {
  model {
    torchscript { file: "$modules/fmnist.pt" }
    inputs { field: "image" }
    inputs { field: "label" }
  }
  optimizer { type: "adam" learning_rate: 0.002 }
  ps { shards: 2 }
}
checkpoint { dir: "$work/ckpt" }
stage { name: "read" type: "idx_source"
  idx_source { images: "$images" labels: "${images/images-idx3/labels-idx1}"
               records_per_item: 64 } }
stage { name: "first" type: "take" input { stage: "read" } take { count: 6016 } }
stage { name: "train" type: "trainer" replicas: 2 input { stage: "first" } }
stage { name: "test" type: "idx_source"
  idx_source { images: "$test_images"
               labels: "${test_images/images-idx3/labels-idx1}"
               records_per_item: 500 } }
stage { name: "evaluate" type: "evaluator" input { stage: "test" }
  evaluator { predictions: "$work/predictions.txt" } }
JOB
# refused PLUGIN EXPECTED: validate with ACTORFLOW_TORCHSCRIPT_PLUGIN set
# must fail with EXPECTED in its error.
refused() {
  if ACTORFLOW_TORCHSCRIPT_PLUGIN=$1 "$bin" validate "$work/job.pbtxt" \
       > "$work/plugin.out" 2>&1; then
    echo "FAIL: validate accepted the job with the plugin '$1'"; exit 1
  fi
  grep -qF -- "$2" "$work/plugin.out" || {
    cat "$work/plugin.out"; echo "FAIL: the refusal does not say: $2"; exit 1; }
}
refused "$work/none.so" "its backend libactorflow_torchscript.so is in none of: $work/none.so"
not_ours=$(/sbin/ldconfig -p | awk '/libz\.so\.1 .*x86-64/ { p = $NF } END { print p }')
refused "$not_ours" "'$not_ours' is not ActorFlow's TorchScript backend"
"$bin" validate "$work/job.pbtxt" > /dev/null

"$bin" run "$work/job.pbtxt" --no-progress --report-json "$work/report.json" \
  > "$work/out" 2> "$work/err" || { cat "$work/out" "$work/err"; echo "FAIL: the job failed"; exit 1; }
"$bin" export --checkpoint "$work/ckpt" --module "$modules/fmnist.pt" \
  --out "$work/trained.pt"
# Another module's variables are refused, naming what does not fit.
if "$bin" export --checkpoint "$work/ckpt" --module "$modules/linear.pt" \
     --out "$work/wrong.pt" 2> "$work/wrong.err"; then
  echo "FAIL: export wrote a module that the job did not train"; exit 1
fi
grep -q "the checkpoint has no variable 'fc.weight'\|variable 'fc.weight' has" "$work/wrong.err" || {
  cat "$work/wrong.err"; echo "FAIL: the refusal does not name the variable"; exit 1; }
[ ! -e "$work/wrong.pt" ] || { echo "FAIL: a refused export left a file"; exit 1; }
/usr/bin/python3 - "$work/trained.pt" "$test_images" "$work/report.json" \
    "$work/predictions.txt" <<'PY'
import gzip, json, sys
import numpy as np
import torch

trained, images, report, predictions = sys.argv[1:]

def idx(path):
    data = (gzip.open if path.endswith(".gz") else open)(path, "rb").read()
    dims = data[3]
    shape = [int.from_bytes(data[4 + 4 * i: 8 + 4 * i], "big") for i in range(dims)]
    return np.frombuffer(data, np.uint8, offset=4 + 4 * dims).reshape(shape)

x = torch.from_numpy(idx(images).copy())
y = torch.from_numpy(idx(images.replace("images-idx3", "labels-idx1")).astype(np.int64))
m = torch.jit.load(trained)
m.eval()
loss, correct, ours = 0.0, 0, []
with torch.no_grad():
    for i in range(0, len(y), 500):
        l, logits = m(x[i:i + 500], y[i:i + 500])
        loss += float(l) * len(logits)
        correct += int((logits.argmax(1) == y[i:i + 500]).sum())
        ours.append(logits)
loss /= len(y)
# Each record's predictions (its 10 scores) against the evaluator's.
ours = torch.cat(ours).numpy()
theirs = np.loadtxt(predictions, dtype=np.float64)
assert theirs.shape == ours.shape, f"predictions {theirs.shape}, exported module {ours.shape}"
worst = float(np.abs(theirs - ours).max())
print(f"predictions of {len(ours)} records: largest difference {worst:.3g}")
assert worst <= 1e-5, "a prediction differs by more than 1e-5"
accuracy = correct / len(y)
ev = json.load(open(report))["metrics"]["evaluate[0]"]
print(f"exported module: test loss {loss:.7f}, accuracy {accuracy:.4f}; "
      f"evaluator: {ev['test_loss']:.7f}, {ev['test_accuracy']:.4f}")
assert accuracy > 0.7, "the trained module did not learn"
assert abs(loss - ev["test_loss"]) <= 1e-5, "test loss differs"
assert accuracy == ev["test_accuracy"], "accuracy differs"
PY
echo "PASS"
