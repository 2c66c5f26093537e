"""Shared fixtures of the Python package's tests (docs/python.md): real data
from Debian's dataset-fashion-mnist, topologies written into tmp_path."""

import gzip
import os
import subprocess

import numpy as np
import pytest


def _fmnist_dir():
    out = subprocess.run(["dpkg", "-L", "dataset-fashion-mnist"], capture_output=True, text=True)
    for line in out.stdout.splitlines():
        if line.endswith("t10k-images-idx3-ubyte.gz"):
            return os.path.dirname(line)
    pytest.fail("dataset-fashion-mnist is not installed (scripts/setup installs it)")


@pytest.fixture(scope="session")
def fmnist():
    """Paths and contents of Fashion-MNIST's test split (10,000 images)."""
    d = _fmnist_dir()
    images = os.path.join(d, "t10k-images-idx3-ubyte.gz")
    labels = os.path.join(d, "t10k-labels-idx1-ubyte.gz")
    with gzip.open(images) as f:
        pixels = np.frombuffer(f.read(), np.uint8, offset=16).reshape(-1, 28, 28)
    with gzip.open(labels) as f:
        classes = np.frombuffer(f.read(), np.uint8, offset=8)
    return {"images": images, "labels": labels, "pixels": pixels, "classes": classes}


@pytest.fixture(scope="session")
def fmnist_train():
    """Paths of Fashion-MNIST's training split (60,000 images)."""
    d = _fmnist_dir()
    return {"images": os.path.join(d, "train-images-idx3-ubyte.gz"),
            "labels": os.path.join(d, "train-labels-idx1-ubyte.gz")}


@pytest.fixture(scope="session")
def fmnist_jpeg(fmnist, tmp_path_factory):
    """The test split as JPEG tf.Example shards, made by the package's own
    `actorflow convert idx`."""
    from actorflow._run import binary

    out = tmp_path_factory.mktemp("fmnist_jpeg") / "test"
    subprocess.run([binary(), "convert", "idx", "--images", fmnist["images"],
                    "--labels", fmnist["labels"], "--out", str(out), "--shards", "1"],
                   check=True, capture_output=True)
    return str(out) + "-*.tfrecord"


def idx_topology(fmnist, epochs=1, batch=100, outlet_options="", middle=""):
    """read (IDX) -> [middle stages] -> batch -> outlet "out"."""
    last = "read"
    stages = []
    for i, m in enumerate(filter(None, middle.split("\n"))):
        name = f"m{i}"
        stages.append(m.replace("@NAME@", name).replace("@IN@", last))
        last = name
    return f"""
name: "py-test"
runtime {{ seed: 1 metrics_interval_s: 0.1 }}
stage {{ name: "read" type: "idx_source"
        idx_source {{ images: "{fmnist['images']}" labels: "{fmnist['labels']}"
                     epochs: {epochs} records_per_item: {batch} }} }}
{os.linesep.join(stages)}
stage {{ name: "batch" type: "batcher" input {{ stage: "{last}" }}
        batcher {{ batch_size: {batch} }} }}
stage {{ name: "out" type: "outlet" input {{ stage: "batch" }} {outlet_options} }}
"""
