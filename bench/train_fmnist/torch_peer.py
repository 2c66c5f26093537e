#!/usr/bin/python3
"""PyTorch peer for bench/train_fmnist: the same MLP (784-256-128-10, ReLU),
batch size, optimizer and data (Fashion-MNIST from Debian's
dataset-fashion-mnist, pixels / 255) as the ActorFlow runs, trained on the CPU
with PyTorch's recommended settings for 2 cores (torch.set_num_threads(1),
data preloaded as tensors, no DataLoader workers).

Prints one JSON line: samples/s over the whole run, wall time until the test
accuracy first reached the target (checked every `--eval-every` steps, with
the evaluation time excluded as it is for ActorFlow's evaluator... no: the
evaluation time is included, as ActorFlow's evaluator shares the cores too),
and the final test accuracy.
"""
import argparse
import gzip
import json
import sys
import time

import numpy as np
import torch


def idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    dims = data[3]
    shape = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(dims)]
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * dims).reshape(shape)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--lr", type=float, default=0.001)
    ap.add_argument("--optimizer", default="adam")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--target", type=float, default=0.88)
    ap.add_argument("--eval-every", type=int, default=500)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()

    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    x = torch.from_numpy(idx(f"{a.data}/train-images-idx3-ubyte.gz").reshape(-1, 784).astype(np.float32) / 255)
    y = torch.from_numpy(idx(f"{a.data}/train-labels-idx1-ubyte.gz").astype(np.int64))
    tx = torch.from_numpy(idx(f"{a.data}/t10k-images-idx3-ubyte.gz").reshape(-1, 784).astype(np.float32) / 255)
    ty = torch.from_numpy(idx(f"{a.data}/t10k-labels-idx1-ubyte.gz").astype(np.int64))

    model = torch.nn.Sequential(
        torch.nn.Linear(784, 256), torch.nn.ReLU(),
        torch.nn.Linear(256, 128), torch.nn.ReLU(),
        torch.nn.Linear(128, 10))
    if a.optimizer == "adam":
        opt = torch.optim.Adam(model.parameters(), lr=a.lr, eps=1e-7)
    elif a.optimizer == "momentum":
        opt = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=0.9)
    else:
        opt = torch.optim.SGD(model.parameters(), lr=a.lr)
    loss_fn = torch.nn.CrossEntropyLoss()

    def accuracy():
        with torch.no_grad():
            return (model(tx).argmax(1) == ty).float().mean().item()

    n = x.shape[0]
    step = 0
    t_target = None
    eval_s = 0.0
    begin = time.perf_counter()
    for epoch in range(a.epochs):
        perm = torch.randperm(n)
        for i in range(0, n, a.batch):
            idx_ = perm[i:i + a.batch]
            opt.zero_grad(set_to_none=True)
            loss = loss_fn(model(x[idx_]), y[idx_])
            loss.backward()
            opt.step()
            step += 1
            if t_target is None and step % a.eval_every == 0:
                e0 = time.perf_counter()
                if accuracy() >= a.target:
                    t_target = time.perf_counter() - begin
                eval_s += time.perf_counter() - e0
    wall = time.perf_counter() - begin
    final = accuracy()
    print(json.dumps({
        "engine": "pytorch", "threads": a.threads, "batch": a.batch,
        "epochs": a.epochs, "samples": n * a.epochs,
        "samples_per_s": n * a.epochs / (wall - eval_s),
        "wall_s": wall, "time_to_target_s": t_target,
        "target": a.target, "final_accuracy": final,
        "torch": torch.__version__}))


if __name__ == "__main__":
    sys.exit(main())
