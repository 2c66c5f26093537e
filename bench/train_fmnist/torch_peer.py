#!/usr/bin/python3
"""PyTorch peer for bench/train_fmnist: the same MLP (784-256-128-10, ReLU),
batch size, optimizer and data (Fashion-MNIST from Debian's
dataset-fashion-mnist, pixels / 255) as the ActorFlow runs, trained on the CPU.

Two modes, both PyTorch's own recipes for a small CPU model:

- `--processes 1` (default): one process, `torch.set_num_threads(--threads)`,
  data preloaded as tensors, `randperm` per epoch, no DataLoader workers.
- `--processes N` (N > 1): Hogwild, as PyTorch's `mnist_hogwild` example and
  its multiprocessing notes describe it: the model's parameters in shared
  memory (`model.share_memory()`), N processes started with
  `torch.multiprocessing`, each with `--threads` threads and its own Adam,
  all updating the shared parameters without locks. Each epoch's permutation
  is dealt out batch by batch (batch i goes to process i mod N), so the N
  processes together make the same number of steps over the same samples as
  one process, or as ActorFlow's trainers sharing one stream.

Every `--eval-every` steps (counted over all processes; process 0 checks
after each `--eval-every / N` of its own) the test accuracy is computed
until it first reaches `--target`. samples/s is each process's samples over
its own training time with its evaluations left out, summed over the
processes (as ActorFlow sums its trainers' rates). "time_to_target_s" is
wall time from the common start to that evaluation.

Prints one JSON line with samples/s, time to target, and the final test
accuracy of the (shared) model after all processes have finished.
"""
import argparse
import gzip
import json
import os
import sys
import time

if __name__ == "__main__":
    # Debian's torch does its matrix products in OpenBLAS
    # (libopenblas0-pthread), whose own thread pool torch.set_num_threads
    # does not size: left alone it starts a thread per core in every
    # process, so "1 thread" would use both cores and 2 Hogwild processes
    # would run 4 threads on 2 cores (docs/benchmarks.md has a paired check).
    # OpenBLAS reads the variable when it loads, so set it before torch is
    # imported; spawned Hogwild processes inherit it. A value already in the
    # environment wins.
    _pre = argparse.ArgumentParser(add_help=False)
    _pre.add_argument("--threads", type=int, default=1)
    _threads = str(max(1, _pre.parse_known_args()[0].threads))
    os.environ.setdefault("OPENBLAS_NUM_THREADS", _threads)
    os.environ.setdefault("OMP_NUM_THREADS", _threads)

import numpy as np
import torch
import torch.multiprocessing as mp


def idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    dims = data[3]
    shape = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(dims)]
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * dims).reshape(shape)


def make_model():
    return torch.nn.Sequential(
        torch.nn.Linear(784, 256), torch.nn.ReLU(),
        torch.nn.Linear(256, 128), torch.nn.ReLU(),
        torch.nn.Linear(128, 10))


def make_optimizer(a, model):
    if a.optimizer == "adam":
        return torch.optim.Adam(model.parameters(), lr=a.lr, eps=1e-7)
    if a.optimizer == "momentum":
        return torch.optim.SGD(model.parameters(), lr=a.lr, momentum=0.9)
    return torch.optim.SGD(model.parameters(), lr=a.lr)


def accuracy(model, tx, ty):
    with torch.no_grad():
        return (model(tx).argmax(1) == ty).float().mean().item()


def train(rank, a, model, x, y, tx, ty, start, results):
    """One trainer: batches rank, rank + N, ... of each epoch's permutation."""
    torch.set_num_threads(a.threads)
    opt = make_optimizer(a, model)
    loss_fn = torch.nn.CrossEntropyLoss()
    n = x.shape[0]
    # Every process draws the same permutations (same seed) and takes its
    # share of the batches.
    gen = torch.Generator().manual_seed(a.seed)
    every = max(1, a.eval_every // a.processes)
    step = 0
    samples = 0
    t_target = None
    eval_s = 0.0
    if start is not None:
        start.wait()
    begin = time.perf_counter()
    for epoch in range(a.epochs):
        perm = torch.randperm(n, generator=gen)
        for b, i in enumerate(range(0, n, a.batch)):
            if b % a.processes != rank:
                continue
            idx_ = perm[i:i + a.batch]
            opt.zero_grad(set_to_none=True)
            loss = loss_fn(model(x[idx_]), y[idx_])
            loss.backward()
            opt.step()
            step += 1
            samples += idx_.shape[0]
            if rank == 0 and t_target is None and step % every == 0:
                e0 = time.perf_counter()
                if accuracy(model, tx, ty) >= a.target:
                    t_target = time.perf_counter() - begin
                eval_s += time.perf_counter() - e0
    wall = time.perf_counter() - begin
    result = {"rank": rank, "samples": samples, "train_s": wall - eval_s,
              "wall_s": wall, "time_to_target_s": t_target}
    if results is None:
        return result
    results.put(result)
    return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--lr", type=float, default=0.001)
    ap.add_argument("--optimizer", default="adam")
    ap.add_argument("--threads", type=int, default=1, help="threads per process")
    ap.add_argument("--processes", type=int, default=1,
                    help="Hogwild processes sharing the model (1: plain single-process training)")
    ap.add_argument("--target", type=float, default=0.88)
    ap.add_argument("--eval-every", type=int, default=500)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    if a.processes < 1 or a.threads < 1:
        ap.error("--processes and --threads must be >= 1")

    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    x = torch.from_numpy(idx(f"{a.data}/train-images-idx3-ubyte.gz").reshape(-1, 784).astype(np.float32) / 255)
    y = torch.from_numpy(idx(f"{a.data}/train-labels-idx1-ubyte.gz").astype(np.int64))
    tx = torch.from_numpy(idx(f"{a.data}/t10k-images-idx3-ubyte.gz").reshape(-1, 784).astype(np.float32) / 255)
    ty = torch.from_numpy(idx(f"{a.data}/t10k-labels-idx1-ubyte.gz").astype(np.int64))
    model = make_model()

    if a.processes == 1:
        rows = [train(0, a, model, x, y, tx, ty, None, None)]
    else:
        model.share_memory()
        for t in (x, y, tx, ty):
            t.share_memory_()
        # spawn, not fork: a forked child of a process whose OpenMP pool has
        # started can hang in its first parallel region.
        ctx = mp.get_context("spawn")
        start = ctx.Barrier(a.processes)
        results = ctx.Queue()
        procs = [ctx.Process(target=train, args=(r, a, model, x, y, tx, ty, start, results))
                 for r in range(a.processes)]
        for p in procs:
            p.start()
        rows = []
        for _ in procs:
            # Bounded: 10 epochs take seconds; a dead child must not hang us.
            rows.append(results.get(timeout=600))
        for p in procs:
            p.join(timeout=60)
        bad = [p.exitcode for p in procs if p.exitcode != 0]
        if bad:
            print("torch_peer: a Hogwild process exited with %s" % bad, file=sys.stderr)
            return 1
    rows.sort(key=lambda r: r["rank"])
    final = accuracy(model, tx, ty)
    n = x.shape[0]
    done = sum(r["samples"] for r in rows)
    if done != n * a.epochs:
        print("torch_peer: trained %d samples, expected %d" % (done, n * a.epochs), file=sys.stderr)
        return 1
    print(json.dumps({
        "engine": "pytorch", "processes": a.processes, "threads": a.threads,
        "batch": a.batch, "epochs": a.epochs, "samples": done,
        "samples_per_s": sum(r["samples"] / r["train_s"] for r in rows),
        "wall_s": max(r["wall_s"] for r in rows),
        "time_to_target_s": rows[0]["time_to_target_s"],
        "target": a.target, "final_accuracy": final,
        "torch": torch.__version__}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
