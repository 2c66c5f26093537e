#!/usr/bin/env python3
"""Trains a PyTorch model on ActorFlow's Fashion-MNIST JPEG pipeline.

ActorFlow reads the JPEG tf.Examples, shuffles, parses, decodes and
normalizes them on its own threads, and hands batches to this PyTorch loop
without copying them (docs/python.md). The data: Debian's
dataset-fashion-mnist, converted once into JPEG TFRecord shards with the
package's own `actorflow convert idx`.

    python3 apps/python/pytorch_fmnist.py [--epochs 3] [--data DIR]
        [--train-limit N] [--threads 2] [--torch-threads 1]

It prints one line per epoch and, at the end, a JSON line with the test
accuracy and the training images/s.
"""

import argparse
import glob
import json
import os
import subprocess
import sys
import time

import torch

import actorflow
from actorflow._run import binary

PIPELINE = """
name: "pytorch-fmnist-{split}"
runtime {{ seed: 1 }}
stage {{ name: "read" type: "tfrecord_source"
        tfrecord_source {{ files: "{files}" records_per_item: 64 epochs: {epochs} }} }}
{shuffle}
stage {{ name: "parse" type: "example_parse" input {{ stage: "{parse_input}" }}
        example_parse {{ feature {{ name: "image" type: "bytes" }}
                        feature {{ name: "label" type: "int64" }} }} }}
stage {{ name: "decode" type: "image_decode" replicas: 2 input {{ stage: "parse" }}
        image_decode {{ channels: 1 height: 28 width: 28 mean: 0.2860 std: 0.3530 }} }}
{take}
stage {{ name: "batch" type: "batcher" input {{ stage: "{batch_input}" }}
        batcher {{ batch_size: {batch_size} }} }}
stage {{ name: "out" type: "outlet" input {{ stage: "batch" }} outlet {{ in_flight: 4 }} }}
"""


def pipeline(files, epochs, batch_size, shuffle, limit):
    return actorflow.Pipeline.from_text(
        PIPELINE.format(
            split="train" if shuffle else "test",
            files=files,
            epochs=epochs,
            shuffle=(
                'stage { name: "shuffle" type: "shuffle" input { stage: "read" } '
                "shuffle { buffer_size: 10000 } }"
                if shuffle
                else ""
            ),
            parse_input="shuffle" if shuffle else "read",
            take=(
                f'stage {{ name: "take" type: "take" input {{ stage: "decode" }} '
                f"take {{ count: {limit} }} }}"
                if limit
                else ""
            ),
            batch_input="take" if limit else "decode",
            batch_size=batch_size,
        ),
        name=f"pytorch_fmnist ({'train' if shuffle else 'test'})",
    )


def shards(data_dir):
    """JPEG TFRecord shards of Fashion-MNIST in data_dir (made once)."""
    idx = subprocess.run(["dpkg", "-L", "dataset-fashion-mnist"], capture_output=True, text=True).stdout.split()
    for split, name in (("train", "train"), ("test", "t10k")):
        if glob.glob(os.path.join(data_dir, f"{split}-*.tfrecord")):
            continue
        images = next(p for p in idx if p.endswith(f"{name}-images-idx3-ubyte.gz"))
        os.makedirs(data_dir, exist_ok=True)
        subprocess.run(
            [binary(), "convert", "idx", "--images", images,
             "--labels", images.replace("images-idx3", "labels-idx1"),
             "--out", os.path.join(data_dir, split), "--shards", "2"],
            check=True,
        )
    return os.path.join(data_dir, "train-*.tfrecord"), os.path.join(data_dir, "test-*.tfrecord")


def model():
    return torch.nn.Sequential(
        torch.nn.Flatten(),
        torch.nn.Linear(784, 256), torch.nn.ReLU(),
        torch.nn.Linear(256, 128), torch.nn.ReLU(),
        torch.nn.Linear(128, 10),
    )


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--data", default=os.path.join("build", "data", "fmnist-python"),
                    help="where the TFRecord shards are (made there when missing)")
    ap.add_argument("--train-limit", type=int, default=0, help="train on the first N records the pipeline makes only (over all epochs)")
    ap.add_argument("--threads", type=int, default=2, help="ActorFlow's scheduler threads")
    ap.add_argument("--torch-threads", type=int, default=1)
    args = ap.parse_args()
    actorflow.set_log_level("warn")
    torch.manual_seed(0)
    torch.set_num_threads(args.torch_threads)
    train_files, test_files = shards(args.data)

    net = model()
    opt = torch.optim.Adam(net.parameters(), lr=1e-3)
    loss_fn = torch.nn.CrossEntropyLoss()
    images = 0
    start = time.perf_counter()
    train = pipeline(train_files, args.epochs, args.batch_size, True, args.train_limit)
    with train.iterate(threads=args.threads) as it:
        epoch, loss_sum, steps = 0, 0.0, 0
        for batch in it:
            if it.epoch != epoch:
                print(f"epoch {epoch}: loss {loss_sum / max(steps, 1):.4f}", flush=True)
                epoch, loss_sum, steps = it.epoch, 0.0, 0
            x = torch.from_dlpack(batch["image"])  # [n, 28, 28, 1] float32, no copy
            y = torch.from_dlpack(batch["label"])  # [n] int64
            opt.zero_grad()
            loss = loss_fn(net(x), y)
            loss.backward()
            opt.step()
            loss_sum += loss.item()
            steps += 1
            images += x.shape[0]
        print(f"epoch {epoch}: loss {loss_sum / max(steps, 1):.4f}", flush=True)
    seconds = time.perf_counter() - start

    correct = total = 0
    net.eval()
    with torch.no_grad():
        for batch in pipeline(test_files, 1, 1000, False, 0).iterate(threads=args.threads):
            pred = net(torch.from_dlpack(batch["image"])).argmax(1)
            correct += int((pred == torch.from_dlpack(batch["label"])).sum())
            total += pred.shape[0]
    print(json.dumps({"test_accuracy": correct / total, "test_records": total,
                      "train_images": images, "train_seconds": round(seconds, 2),
                      "images_per_s": round(images / seconds, 1)}))


if __name__ == "__main__":
    sys.exit(main())
