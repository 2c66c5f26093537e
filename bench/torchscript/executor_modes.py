#!/usr/bin/python3
"""One training step of apps/examples/fmnist_resnet.py's model (forward and
backward on a batch of 64, one thread), timed three ways: eager PyTorch,
the TorchScript module with libtorch's graph-executor optimizations on (its
default), and with them off (what ActorFlow's trainers run: see
actors/training/detail/torchscript_model.cpp). Prints ms per step, the mean of 100 steps
after 10 to warm up, for each.

    /usr/bin/python3 bench/torchscript/executor_modes.py
"""

import os
import sys
import tempfile
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "..", "..", "apps", "examples"))

import torch  # noqa: E402

from fmnist_resnet import Train  # noqa: E402


def per_step(model) -> float:
    x = torch.randn(64, 28, 28)
    y = torch.randint(0, 10, (64,))
    model.train()
    for _ in range(10):
        loss, _ = model(x, y)
        loss.backward()
    start = time.perf_counter()
    for _ in range(100):
        for p in model.parameters():
            p.grad = None
        loss, _ = model(x, y)
        loss.backward()
    return (time.perf_counter() - start) * 1000 / 100


def main() -> None:
    torch.set_num_threads(1)
    torch.manual_seed(1)
    print(f"eager PyTorch: {per_step(Train()):.1f} ms per step")
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "m.pt")
        torch.jit.script(Train()).save(path)
        print(f"TorchScript, optimizations on: {per_step(torch.jit.load(path)):.1f} ms per step")
        torch._C._set_graph_executor_optimize(False)
        print(f"TorchScript, optimizations off: {per_step(torch.jit.load(path)):.1f} ms per step")


if __name__ == "__main__":
    main()
