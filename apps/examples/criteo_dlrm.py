#!/usr/bin/env python3
"""Scripts the model of apps/examples/criteo_dlrm.pbtxt: DLRM's dense part
(bottom MLP, dot interaction, top MLP) as a TorchScript file, for the case
study's click logs. The 26 embedding tables are not in it: they are the
engine's (training.model.table), held by the parameter servers, and each
C_j reaches forward as its looked-up rows (docs/training.md, "Your own
model").

    /usr/bin/python3 apps/examples/criteo_dlrm.py [--out build/models/criteo_dlrm.pt]

forward(I1..I13, C1..C26, label): the 13 normalized numeric features (f32
[n] each), the 26 embeddings (f32 [n, 16] each) and the click label (i64
[n]); it returns (mean sigmoid cross-entropy, click probability [n]).
"""

import argparse
import os
from typing import List, Tuple

import torch
import torch.nn.functional as F
from torch import nn

NUMERIC = [f"I{k}" for k in range(1, 14)]
CATEGORICAL = [f"C{j}" for j in range(1, 27)]
DIM = 16  # training.model.embedding_dim


def mlp(sizes: List[int], last_relu: bool) -> nn.Sequential:
    layers: List[nn.Module] = []
    for i in range(len(sizes) - 1):
        layers.append(nn.Linear(sizes[i], sizes[i + 1]))
        if i < len(sizes) - 2 or last_relu:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


class DLRM(nn.Module):
    """Bottom MLP 13-64-16, pairwise dot products of the 27 vectors (the
    dense one and the 26 embeddings), top MLP (16 + 351)-256-128-1."""

    def __init__(self):
        super().__init__()
        self.bottom = mlp([len(NUMERIC), 64, DIM], last_relu=True)
        vectors = len(CATEGORICAL) + 1
        pairs = vectors * (vectors - 1) // 2
        self.top = mlp([DIM + pairs, 256, 128, 1], last_relu=False)
        rows, cols = torch.triu_indices(vectors, vectors, offset=1)
        self.register_buffer("rows", rows, persistent=False)
        self.register_buffer("cols", cols, persistent=False)

    def score(self, dense: torch.Tensor, embedded: List[torch.Tensor]) -> torch.Tensor:
        x = self.bottom(dense)
        t = torch.stack([x] + embedded, dim=1)  # [n, 27, DIM]
        z = torch.bmm(t, t.transpose(1, 2))  # [n, 27, 27]
        pairs = z[:, self.rows, self.cols]  # the upper triangle
        return self.top(torch.cat([x, pairs], dim=1)).squeeze(1)


# forward takes the fields one by one, named as they are (the contract).
# Its source is generated rather than 40 names typed by hand, into a file:
# TorchScript compiles from source files.
FORWARD = """import torch
import torch.nn.functional as F
from typing import Tuple

from criteo_dlrm import DLRM


class Train(DLRM):
    def forward(self, {args}, label: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        dense = torch.stack([{numeric}], dim=1)
        z = self.score(dense, [{categorical}])
        return F.binary_cross_entropy_with_logits(z, label.float()), torch.sigmoid(z)
""".format(
    args=", ".join(f"{n}: torch.Tensor" for n in NUMERIC + CATEGORICAL),
    numeric=", ".join(NUMERIC),
    categorical=", ".join(CATEGORICAL),
)


def make_class(where: str):
    import importlib
    import sys

    with open(os.path.join(where, "criteo_dlrm_train.py"), "w") as f:
        f.write(FORWARD)
    sys.path[:0] = [where, os.path.dirname(os.path.abspath(__file__))]
    return importlib.import_module("criteo_dlrm_train").Train


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="build/models/criteo_dlrm.pt")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    torch.manual_seed(args.seed)
    import tempfile

    with tempfile.TemporaryDirectory(prefix="criteo_dlrm-") as where:
        module = torch.jit.script(make_class(where)())
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    module.save(args.out)
    params = sum(p.numel() for p in module.parameters())
    print(f"wrote {args.out}: {params} parameters (the tables are the engine's)")


if __name__ == "__main__":
    main()
