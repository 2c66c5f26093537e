"""The Python examples (apps/python) at small size."""

import json
import os
import subprocess
import sys

APPS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "apps", "python")


def run_example(name, *args):
    out = subprocess.run([sys.executable, os.path.join(APPS, name), *args],
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_pytorch_fmnist(tmp_path):
    # 100 steps of 64 records: well past chance (0.10) on the 10,000 test images.
    r = run_example("pytorch_fmnist.py", "--epochs", "1", "--train-limit", "6400",
                    "--data", str(tmp_path / "fmnist"))
    assert r["train_images"] == 6400
    assert r["test_records"] == 10000
    assert r["test_accuracy"] >= 0.65


def test_pytorch_imagenet_like(tmp_path):
    images = tmp_path / "images"
    r = run_example("pytorch_imagenet_like.py", "--images", str(images), "--make", "48",
                    "--epochs", "2", "--batch-size", "16")
    assert r["images"] == 96
    assert r["last_loss"] == r["last_loss"]  # a number, not NaN
