#!/usr/bin/env python3
"""One PyTorch training loop, fed either by ActorFlow's Python iterator or by
PyTorch's DataLoader, on the same image folder with the same work per image
(random resized crop 224, flip, ImageNet normalization, batches of 64) and
the same model (apps/python/pytorch_imagenet_like.py's small CNN).

    python train_loop.py --loader actorflow|dataloader --data DIR
        [--epochs 2] [--workers 2] [--pin-memory] [--threads 2]

ActorFlow: 2 scheduler threads, 2 decode replicas. DataLoader: --workers
processes with torchvision's transforms (PIL), persistent workers,
prefetch_factor 2, shuffle, 1 torch thread per worker. The loop itself
runs with 1 torch thread in both. The first --warmup batches are not
timed (workers starting, caches filling). Prints one JSON line.
"""

import argparse
import json
import os
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "apps", "python"))
sys.path.insert(0, os.path.join(HERE, "..", "input_pipeline"))
import pytorch_imagenet_like as example  # noqa: E402


def worker_init(_):
    torch.set_num_threads(1)


def dataloader_batches(args):
    import torchvision
    from torch_peer import train_transform  # the input-pipeline benchmark's peer

    dataset = torchvision.datasets.ImageFolder(args.data, transform=train_transform())
    kwargs = dict(batch_size=args.batch_size, shuffle=True, num_workers=args.workers,
                  pin_memory=args.pin_memory, generator=torch.Generator().manual_seed(0))
    if args.workers > 0:
        kwargs.update(persistent_workers=True, prefetch_factor=2, worker_init_fn=worker_init)
    loader = torch.utils.data.DataLoader(dataset, **kwargs)
    for _ in range(args.epochs):
        for x, y in loader:
            yield x, y


def timed(batches, warmup):
    """Passes the batches on; the clock (started[0]) starts after `warmup`."""
    started = [None]

    def gen():
        for i, b in enumerate(batches):
            if i == warmup:
                started[0] = time.perf_counter()
            if i >= warmup:
                yield b
    return gen(), started


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--loader", choices=["actorflow", "dataloader"], required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--pin-memory", action="store_true")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--warmup", type=int, default=4)
    args = ap.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    net = example.small_cnn(len(example.classes_of(args.data)))
    opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
    wall = time.perf_counter()
    if args.loader == "actorflow":
        import actorflow

        actorflow.set_log_level("warn")
        it = example.pipeline(args.data, args.epochs, args.batch_size, args.threads).iterate(threads=args.threads)
        batches, started = timed(example.actorflow_batches(it), args.warmup)
        with it:
            images, _, loss = example.train(batches, net, opt, example.nhwc_to_nchw)
    else:
        batches, started = timed(dataloader_batches(args), args.warmup)
        images, _, loss = example.train(batches, net, opt, lambda x: x)
    end = time.perf_counter()
    if started[0] is None:
        sys.exit(f"train_loop: no batch after the {args.warmup} warm-up batches: more images or epochs")
    seconds = end - started[0]
    print(json.dumps({"loader": args.loader, "pin_memory": args.pin_memory, "images": images,
                      "seconds": round(seconds, 3), "images_per_s": round(images / seconds, 1),
                      "wall_s": round(end - wall, 3), "last_loss": round(loss, 4)}), flush=True)


if __name__ == "__main__":
    sys.exit(main())
