#!/usr/bin/python3
"""PyTorch peer of the ActorFlow input-pipeline benchmark.

Reads the image folder made by make_dataset.py with torchvision's ImageFolder
(PIL decodes the JPEG files) and the usual ImageNet training transforms:
RandomResizedCrop(224), RandomHorizontalFlip, ToTensor, Normalize(ImageNet
mean/std), batches of 64, shuffled, through a DataLoader with --workers
worker processes. Prints one JSON line:

  {"peer": "pytorch", "workers": N, "images_per_s": X, "images": M, "seconds": S}

Debian packages: python3-torch, python3-torchvision, python3-pil,
libopenblas0-pthread. Run with Debian's Python:

  /usr/bin/python3 bench/input_pipeline/torch_peer.py --data /tmp/af_bench_images --workers 2
"""

import argparse
import json
import sys
import time

try:
    import torch
    import torchvision
    from torchvision import transforms
except ImportError as e:
    print("torch_peer: %s; install the Debian packages python3-torch python3-torchvision "
          "libopenblas0-pthread and run with /usr/bin/python3" % e, file=sys.stderr)
    sys.exit(2)

IMAGENET_MEAN = [0.485, 0.456, 0.406]
IMAGENET_STD = [0.229, 0.224, 0.225]


def train_transform():
    """torchvision's usual ImageNet training transforms (also used by
    bench/python/train_loop.py)."""
    return transforms.Compose([
        transforms.RandomResizedCrop(224),
        transforms.RandomHorizontalFlip(),
        transforms.ToTensor(),
        transforms.Normalize(IMAGENET_MEAN, IMAGENET_STD),
    ])


def worker_init(_worker_id):
    # Each worker decodes and transforms one image at a time; more intra-op
    # threads only contend for the same cores.
    torch.set_num_threads(1)


def main():
    ap = argparse.ArgumentParser(description="PyTorch DataLoader peer of the input-pipeline benchmark")
    ap.add_argument("--data", required=True, help="image folder DIR/<class>/<n>.jpg (make_dataset.py --out)")
    ap.add_argument("--workers", type=int, default=0, help="DataLoader worker processes (0, 1, 2)")
    ap.add_argument("--epochs", type=int, default=2, help="timed epochs (default 2)")
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--warmup", type=int, default=4,
                    help="batches read before timing starts: starts the workers and fills the caches (default 4)")
    ap.add_argument("--limit", type=int, default=0, help="use only the first N images (0: all)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    if args.workers < 0 or args.epochs < 1 or args.batch_size < 1:
        ap.error("--workers must be >= 0, --epochs and --batch-size >= 1")

    torch.set_num_threads(1)
    torch.manual_seed(args.seed)

    dataset = torchvision.datasets.ImageFolder(args.data, transform=train_transform())
    if args.limit > 0:
        dataset = torch.utils.data.Subset(dataset, range(min(args.limit, len(dataset))))
    if len(dataset) == 0:
        print("torch_peer: no images under %s" % args.data, file=sys.stderr)
        return 2

    loader_kwargs = dict(
        batch_size=args.batch_size,
        shuffle=True,
        num_workers=args.workers,
        pin_memory=False,  # CPU only: pinning costs a copy and helps nothing
        drop_last=False,
        generator=torch.Generator().manual_seed(args.seed),
    )
    if args.workers > 0:
        loader_kwargs.update(
            persistent_workers=True,  # no worker restart between epochs
            prefetch_factor=2,
            worker_init_fn=worker_init,
        )
    loader = torch.utils.data.DataLoader(dataset, **loader_kwargs)

    # Warm-up: start the workers and read a few batches, outside the timing.
    it = iter(loader)
    for _ in range(min(args.warmup, len(loader))):
        next(it)
    del it

    images = 0
    start = time.perf_counter()
    for _ in range(args.epochs):
        for batch, labels in loader:
            images += batch.shape[0]
    seconds = time.perf_counter() - start

    print(json.dumps({
        "peer": "pytorch",
        "workers": args.workers,
        "images_per_s": round(images / seconds, 1),
        "images": images,
        "seconds": round(seconds, 3),
    }), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
