#!/usr/bin/env python3
"""Feeds random-resized-crop batches from ActorFlow to a PyTorch training loop.

The images: a folder of ImageNet-sized photographs, one subfolder per class
(bench/input_pipeline/make_dataset.py makes one from the photographs of
Debian's lomiri-wallpapers-16.04; --make N does that here). ActorFlow reads
the files in a new order every epoch, decodes only each crop's window,
resizes it to 224x224, flips half of them, normalizes with ImageNet's mean
and standard deviation and batches them on its own threads; the loop gets
each batch without a copy (docs/python.md).

    python3 apps/python/pytorch_imagenet_like.py --images DIR [--epochs 1]
        [--batch-size 64] [--threads 2] [--torch-threads 1] [--make N]

It prints a JSON line at the end: images, seconds, images/s and the last
loss. bench/python/ runs the same loop against PyTorch's DataLoader.
"""

import argparse
import json
import os
import subprocess
import sys
import time

import torch

import actorflow

PIPELINE = """
name: "pytorch-imagenet-like"
runtime {{ seed: 1 }}
stage {{ name: "read" type: "image_folder_source"
        image_folder_source {{ dir: "{images}" epochs: {epochs} records_per_item: 16
                              shuffle_files: true }} }}
stage {{ name: "decode" type: "image_decode" replicas: {decoders} input {{ stage: "read" window: 4 }}
        image_decode {{ op: "random_resized_crop" height: 224 width: 224 random_flip: true
                       mean: [0.485, 0.456, 0.406] std: [0.229, 0.224, 0.225] }} }}
stage {{ name: "batch" type: "batcher" input {{ stage: "decode" window: 4 }}
        batcher {{ batch_size: {batch_size} }} }}
stage {{ name: "out" type: "outlet" input {{ stage: "batch" window: 2 }} outlet {{ in_flight: 2 }} }}
"""


def classes_of(images):
    return sorted(d for d in os.listdir(images) if os.path.isdir(os.path.join(images, d)))


def small_cnn(classes):
    """A small convolutional network: the loop's work per batch stays well
    below the input's, so the input's speed shows."""
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 16, kernel_size=8, stride=8), torch.nn.ReLU(),
        torch.nn.Conv2d(16, 32, kernel_size=4, stride=4), torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(),
        torch.nn.Linear(32, classes),
    )


def pipeline(images, epochs, batch_size, decoders):
    return actorflow.Pipeline.from_text(
        PIPELINE.format(images=images, epochs=epochs, batch_size=batch_size, decoders=decoders),
        name="pytorch_imagenet_like")


def train(batches, net, opt, to_nchw):
    """The training loop both this example and bench/python time: returns
    (images, seconds, last loss)."""
    loss_fn = torch.nn.CrossEntropyLoss()
    images, loss = 0, float("nan")
    start = time.perf_counter()
    for x, y in batches:
        x = to_nchw(x)
        opt.zero_grad()
        out = loss_fn(net(x), y)
        out.backward()
        opt.step()
        loss = out.item()
        images += x.shape[0]
    return images, time.perf_counter() - start, loss


def actorflow_batches(it):
    for batch in it:
        # image: [n, 224, 224, 3] float32 (NHWC) and label: [n] int64, no copy.
        yield torch.from_dlpack(batch["image"]), torch.from_dlpack(batch["label"])


def nhwc_to_nchw(x):
    # A view with NCHW strides (channels last in memory): no copy here.
    return x.permute(0, 3, 1, 2)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--images", required=True, help="folder with one subfolder of JPEGs per class")
    ap.add_argument("--make", type=int, default=0,
                    help="first make N photographs there with bench/input_pipeline/make_dataset.py")
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2, help="ActorFlow's scheduler threads")
    ap.add_argument("--decoders", type=int, default=2, help="image_decode replicas")
    ap.add_argument("--torch-threads", type=int, default=1)
    args = ap.parse_args()
    actorflow.set_log_level("warn")
    if args.make:
        maker = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                             "bench", "input_pipeline", "make_dataset.py")
        subprocess.run(["/usr/bin/python3", maker, "--out", args.images, "--count", str(args.make),
                        "--seed", "0"], check=True)
    torch.manual_seed(0)
    torch.set_num_threads(args.torch_threads)
    net = small_cnn(len(classes_of(args.images)))
    opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
    with pipeline(args.images, args.epochs, args.batch_size, args.decoders).iterate(threads=args.threads) as it:
        images, seconds, loss = train(actorflow_batches(it), net, opt, nhwc_to_nchw)
    print(json.dumps({"loader": "actorflow", "images": images, "seconds": round(seconds, 3),
                      "images_per_s": round(images / seconds, 1), "last_loss": round(loss, 4)}))


if __name__ == "__main__":
    sys.exit(main())
