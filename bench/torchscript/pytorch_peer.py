#!/usr/bin/python3
"""PyTorch peer of the TorchScript benchmark: trains the residual CNN of
apps/examples/fmnist_resnet.py (its Train module, imported from there, not
copied: the one that script turns into the TorchScript file ActorFlow's
trainers run) on Fashion-MNIST with PyTorch's own two recipes for
data-parallel training on 2 CPU cores.

- `--mode hogwild`: the model's parameters and batch-norm buffers in shared
  memory (`model.share_memory()`), 2 processes started with
  `torch.multiprocessing`, each with its own Adam over the shared parameters
  and no locks (PyTorch's `mnist_hogwild` example and its multiprocessing
  notes). Each process takes its half of every epoch's permutation.
- `--mode ddp`: 2 processes, `torch.distributed` with gloo on 127.0.0.1,
  `DistributedDataParallel` (gradients averaged every step), a
  `DistributedSampler` and plain BatchNorm (per-process batch statistics,
  rank 0's running statistics broadcast before every forward, DDP's default).

Both: batch 64 per process, Adam lr 1e-3, `--threads-per-proc` threads per
process (default 1), data from Debian's dataset-fashion-mnist normalized as
ActorFlow's image_decode does (pixel / 255, then (x - 0.2860) / 0.3530, f32
[n, 28, 28, 1]), preloaded as tensors in shared memory. The time is the
parent's, from the moment every process has finished its setup to the end of
the last epoch (process start, data loading and evaluation left out). The
final model is then evaluated in eval mode on the 10,000 test images.
Progress goes to stderr, one line per epoch; stdout gets one JSON line:

  {"peer": "pytorch-hogwild", "epochs": 3, "samples": 180000, "seconds": S,
   "samples_per_s": X, "test_accuracy": A, "test_loss": L}

Debian packages: python3-torch, python3-numpy, libopenblas0-pthread,
dataset-fashion-mnist. Run with Debian's Python:

  /usr/bin/python3 bench/torchscript/pytorch_peer.py --mode hogwild
  /usr/bin/python3 bench/torchscript/pytorch_peer.py --mode ddp --epochs 1 --train-limit 512

Exit status: 0 on success, 1 when training or a process failed, 2 when
something it needs (torch, the dataset) is missing.
"""

import argparse
import gzip
import json
import os
import queue
import socket
import subprocess
import sys
import time
import traceback
import warnings

if __name__ == "__main__":
    # Debian's torch does part of its math in OpenBLAS (libopenblas0-pthread),
    # whose thread pool torch.set_num_threads does not size: left alone every
    # process starts a thread per core, and 2 processes x "1 thread" would run
    # 4 threads on 2 cores (bench/train_fmnist/torch_peer.py has the same
    # note). OpenBLAS reads the variables when it loads, so they are set
    # before torch is imported; the spawned processes inherit them. A value
    # already in the environment wins. Only when run as a script: a script
    # that imports this one for its data loader keeps its own environment.
    _pre = argparse.ArgumentParser(add_help=False)
    _pre.add_argument("--threads-per-proc", type=int, default=1)
    _threads = str(max(1, _pre.parse_known_args()[0].threads_per_proc))
    os.environ.setdefault("OPENBLAS_NUM_THREADS", _threads)
    os.environ.setdefault("OMP_NUM_THREADS", _threads)

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# The model is imported from its one definition; this also runs in the
# spawned processes, which import this file again as __mp_main__.
sys.path.insert(0, os.path.join(ROOT, "apps", "examples"))

try:
    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp
    from torch.nn.parallel import DistributedDataParallel
    from torch.utils.data.distributed import DistributedSampler

    from fmnist_resnet import Train
except ImportError as e:
    # Kept importable without torch, for its data loader; main() reports it.
    torch = None
    TORCH_MISSING = e

# Fashion-MNIST's pixel mean and standard deviation, as in ActorFlow's
# pipelines (image_decode's mean/std in apps/examples/fmnist_*.pbtxt).
FMNIST_MEAN = 0.2860
FMNIST_STD = 0.3530
FMNIST_PACKAGE = "dataset-fashion-mnist"
PROCESSES = 2  # one per core of the benchmark machine
BATCH = 64  # per process
LR = 1e-3
# ActorFlow's Adam epsilon (docs/training.md; TensorFlow's too). PyTorch's
# default is 1e-8; the peer takes ActorFlow's so that both run one optimizer.
ADAM_EPS = 1e-7


class DatasetMissing(RuntimeError):
    pass


def fashion_mnist_dir():
    """The folder where Debian's dataset-fashion-mnist put its idx files."""
    try:
        out = subprocess.run(["dpkg", "-L", FMNIST_PACKAGE], capture_output=True,
                             text=True, check=False)
    except OSError as e:  # no dpkg: not Debian
        raise DatasetMissing("cannot run dpkg (%s); this needs Debian's %s package"
                             % (e, FMNIST_PACKAGE)) from None
    for path in out.stdout.split():
        if os.path.basename(path).startswith("train-images-idx3-ubyte") and os.path.isfile(path):
            return os.path.dirname(path)
    raise DatasetMissing("Fashion-MNIST not found: install it with "
                         "`sudo apt-get install -y %s`" % FMNIST_PACKAGE)


def read_idx(path):
    """An idx file (gzip'd or not) as a uint8 array of its own shape."""
    with open(path, "rb") as f:
        data = f.read()
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    if len(data) < 4 or data[:2] != b"\0\0" or data[2] != 0x08:
        raise DatasetMissing("%s: not an idx file of unsigned bytes" % path)
    dims = data[3]
    shape = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(dims)]
    offset = 4 + 4 * dims
    if len(data) - offset != int(np.prod(shape)):
        raise DatasetMissing("%s: %d bytes of data for shape %s"
                             % (path, len(data) - offset, shape))
    return np.frombuffer(data, dtype=np.uint8, offset=offset).reshape(shape)


def load_fashion_mnist(split, limit=0, folder=None):
    """Fashion-MNIST's "train" or "test" split as ActorFlow's pipeline hands
    it to a model: images f32 [n, 28, 28, 1], (pixel / 255 - 0.2860) / 0.3530,
    and labels i64 [n]. limit > 0 keeps the first `limit` examples."""
    prefix = {"train": "train", "test": "t10k"}[split]
    folder = folder or fashion_mnist_dir()

    def find(kind):
        for name in ("%s-%s-ubyte.gz" % (prefix, kind), "%s-%s-ubyte" % (prefix, kind)):
            if os.path.isfile(os.path.join(folder, name)):
                return os.path.join(folder, name)
        raise DatasetMissing("no %s-%s-ubyte[.gz] in %s (reinstall %s)"
                             % (prefix, kind, folder, FMNIST_PACKAGE))

    images = read_idx(find("images-idx3"))
    labels = read_idx(find("labels-idx1"))
    if limit > 0:
        images, labels = images[:limit], labels[:limit]
    # In float32 step by step, as image_decode computes it: v / 255 first,
    # then (v - mean) / std.
    x = images.astype(np.float32) / np.float32(255)
    x = (x - np.float32(FMNIST_MEAN)) / np.float32(FMNIST_STD)
    return x.reshape(-1, 28, 28, 1), labels.astype(np.int64)


def free_port():
    """A TCP port free on 127.0.0.1 now. Rank 0 binds it a moment later; the
    race with another program taking it in between is accepted."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def worker(rank, a, port, model, x, y, go, msgs):
    """One training process. Messages to the parent, in order: ("ready", rank)
    once set up, ("epoch", rank, epoch, loss_sum, samples) after each epoch,
    ("done", rank, state) at the end, or ("error", rank, traceback)."""
    try:
        torch.set_num_threads(a.threads_per_proc)
        if a.mode == "ddp":
            dist.init_process_group("gloo", init_method="tcp://127.0.0.1:%d" % port,
                                    rank=rank, world_size=PROCESSES)
            # Same seed as the parent: every rank builds the same initial
            # weights (DDP would broadcast rank 0's anyway), and the same as
            # the Hogwild run's.
            torch.manual_seed(a.seed)
            model = Train()
            # The model permutes its NHWC input, so oneDNN runs channels-last
            # and hands back the 1x1 skip convolutions' weight gradients
            # ([cout, cin, 1, 1]) with channels-last strides: for a 1x1 kernel
            # the same memory layout as DDP's bucket, so the copy costs the
            # same, and the warning is noise.
            warnings.filterwarnings("ignore", message="Grad strides do not match bucket view strides")
            net = DistributedDataParallel(model)
        else:
            net = model  # the parent's, in shared memory
        opt = torch.optim.Adam(model.parameters(), lr=LR, eps=ADAM_EPS)
        # Both modes split each epoch the same way: one permutation drawn
        # from (seed, epoch), this process's every PROCESSES-th index of it.
        sampler = DistributedSampler(range(x.shape[0]), num_replicas=PROCESSES, rank=rank,
                                     shuffle=True, seed=a.seed)
        net.train()
        if a.mode == "ddp":
            dist.barrier()
        msgs.put(("ready", rank))
        if not go.wait(timeout=a.timeout):
            raise TimeoutError("the parent did not start training")
        for epoch in range(a.epochs):
            sampler.set_epoch(epoch)
            # Batches by slicing the preloaded tensors: a DataLoader would
            # fetch and collate 64 single samples per step in this process.
            order = torch.tensor(list(sampler), dtype=torch.int64)
            loss_sum, samples = 0.0, 0
            for i in range(0, order.shape[0], BATCH):
                idx = order[i:i + BATCH]
                opt.zero_grad(set_to_none=True)
                loss, _ = net(x[idx], y[idx])
                loss.backward()
                opt.step()
                loss_sum += loss.item() * idx.shape[0]
                samples += idx.shape[0]
            msgs.put(("epoch", rank, epoch, loss_sum, samples))
        state = None
        if a.mode == "ddp" and rank == 0:
            # As numpy arrays, which pickle by value: tensors would go by
            # shared-memory handle, which the parent may open only after this
            # process has exited.
            state = {k: v.detach().numpy().copy() for k, v in model.state_dict().items()}
        msgs.put(("done", rank, state))
        if a.mode == "ddp":
            dist.destroy_process_group()
    except BaseException:
        msgs.put(("error", rank, traceback.format_exc()))
        sys.exit(1)


class Failed(RuntimeError):
    pass


def receive(msgs, procs, deadline):
    """The next message, watching the processes: one that died without a word
    (killed, out of memory) or a deadline passed fails the run."""
    while True:
        try:
            msg = msgs.get(timeout=0.5)
        except queue.Empty:
            dead = [(r, p.exitcode) for r, p in enumerate(procs)
                    if p.exitcode is not None and p.exitcode != 0]
            if dead:
                raise Failed("process %d exited with status %s" % dead[0])
            if time.monotonic() > deadline:
                raise Failed("timed out (--timeout)")
            continue
        if msg[0] == "error":
            raise Failed("process %d failed:\n%s" % (msg[1], msg[2]))
        return msg


def stop(procs, grace):
    """Every process ends: joined, else terminated, else killed."""
    for p in procs:
        p.join(timeout=grace)
    for p in procs:
        if p.is_alive():
            p.terminate()
            p.join(timeout=5)
        if p.is_alive():
            p.kill()
            p.join(timeout=5)


def train(a, x, y):
    """Runs the training processes; returns (model, samples, seconds)."""
    torch.manual_seed(a.seed)
    model = Train()
    port = 0
    if a.mode == "hogwild":
        model.share_memory()
    else:
        port = free_port()
    for t in (x, y):
        t.share_memory_()
    # spawn, not fork: a forked child of a process whose OpenMP pool has
    # started can hang in its first parallel region.
    ctx = mp.get_context("spawn")
    go, msgs = ctx.Event(), ctx.Queue()
    shared = model if a.mode == "hogwild" else None
    procs = [ctx.Process(target=worker, args=(r, a, port, shared, x, y, go, msgs),
                         daemon=True) for r in range(PROCESSES)]
    ok = False
    try:
        for p in procs:
            p.start()
        deadline = time.monotonic() + a.timeout
        for _ in procs:  # the barrier: every process set up
            receive(msgs, procs, deadline)
        start = time.perf_counter()
        go.set()
        per_epoch = [[0.0, 0, 0] for _ in range(a.epochs)]  # loss sum, samples, reports
        state, done, end = None, 0, start
        while done < len(procs):
            msg = receive(msgs, procs, deadline)
            if msg[0] == "epoch":
                e = per_epoch[msg[2]]
                e[0] += msg[3]
                e[1] += msg[4]
                e[2] += 1
                if e[2] == len(procs):
                    end = time.perf_counter()
                    print("epoch %d/%d: train loss %.4f, %d samples, %.1f s"
                          % (msg[2] + 1, a.epochs, e[0] / max(e[1], 1), e[1], end - start),
                          file=sys.stderr, flush=True)
            elif msg[0] == "done":
                done += 1
                state = msg[2] if msg[2] is not None else state
        ok = True
    finally:
        # On failure a short grace: the process at fault may still be
        # ending on its own; a DDP peer blocked in an all-reduce will not.
        stop(procs, 60 if ok else 2)
        if not ok:
            print("pytorch_peer: exit statuses %s (negative: the signal that ended it)"
                  % ", ".join("%d: %s" % (r, p.exitcode) for r, p in enumerate(procs)),
                  file=sys.stderr)
    bad = [(r, p.exitcode) for r, p in enumerate(procs) if p.exitcode != 0]
    if bad:
        raise Failed("process %d exited with status %s" % bad[0])
    if state is not None:
        model.load_state_dict({k: torch.from_numpy(v) for k, v in state.items()})
    return model, sum(e[1] for e in per_epoch), end - start


def evaluate(model, x, y):
    """(accuracy, mean loss) of the model in eval mode."""
    model.eval()
    correct, loss_sum = 0, 0.0
    with torch.no_grad():
        for i in range(0, x.shape[0], 1000):
            loss, logits = model(x[i:i + 1000], y[i:i + 1000])
            loss_sum += loss.item() * logits.shape[0]
            correct += int((logits.argmax(1) == y[i:i + 1000]).sum())
    return correct / x.shape[0], loss_sum / x.shape[0]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mode", choices=("hogwild", "ddp"), required=True,
                    help="hogwild: shared model, no locks; ddp: DistributedDataParallel over gloo")
    ap.add_argument("--epochs", type=int, default=3, help="default 3")
    ap.add_argument("--train-limit", type=int, default=0,
                    help="train on the first N training images only (0: all 60,000)")
    ap.add_argument("--seed", type=int, default=1,
                    help="initial weights and the epochs' permutations (default 1)")
    ap.add_argument("--threads-per-proc", type=int, default=1,
                    help="torch (and OpenBLAS) threads in each of the 2 processes (default 1)")
    ap.add_argument("--timeout", type=float, default=0,
                    help="seconds for set-up and training before giving up "
                         "(default: 600 + 1800 per epoch)")
    a = ap.parse_args()
    if a.epochs < 1 or a.threads_per_proc < 1 or a.train_limit < 0:
        ap.error("--epochs and --threads-per-proc must be >= 1, --train-limit >= 0")
    if torch is None:
        print("pytorch_peer: %s; install the Debian packages python3-torch "
              "libopenblas0-pthread and run with /usr/bin/python3" % TORCH_MISSING,
              file=sys.stderr)
        return 2
    a.timeout = a.timeout or 600 + 1800 * a.epochs
    torch.set_num_threads(a.threads_per_proc)

    try:
        x, y = load_fashion_mnist("train", a.train_limit)
        tx, ty = load_fashion_mnist("test")
    except DatasetMissing as e:
        print("pytorch_peer: %s" % e, file=sys.stderr)
        return 2
    if x.shape[0] < PROCESSES:
        print("pytorch_peer: %d training images for %d processes" % (x.shape[0], PROCESSES),
              file=sys.stderr)
        return 2

    try:
        model, samples, seconds = train(a, torch.from_numpy(x), torch.from_numpy(y))
    except Failed as e:
        print("pytorch_peer: %s" % e, file=sys.stderr)
        return 1
    # Untimed: as many threads as the training used in all.
    torch.set_num_threads(a.threads_per_proc * PROCESSES)
    accuracy, loss = evaluate(model, torch.from_numpy(tx), torch.from_numpy(ty))
    print(json.dumps({
        "peer": "pytorch-" + a.mode,
        "epochs": a.epochs,
        "samples": samples,
        "seconds": round(seconds, 3),
        "samples_per_s": round(samples / seconds, 1),
        "test_accuracy": round(accuracy, 4),
        "test_loss": round(loss, 4),
    }), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
