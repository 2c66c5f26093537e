#!/usr/bin/env python3
"""Writes the TorchScript modules that tests/torchscript/torchscript_test.cpp
trains and refuses, and the values the test checks them against:

    /usr/bin/python3 tests/torchscript/make_modules.py OUT_DIR

Debian's python3-torch (1.13, as libtorch-dev) scripts them. Each module's
forward follows the contract of actors/training/torchscript_model.hpp.
"""

import json
import os
import sys
from typing import Tuple

import torch
import torch.nn.functional as F
from torch import nn


class Linear(nn.Module):
    """Least squares on x f32 [n, 3]: loss = mean((x w + b - y)^2)."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(3, 1)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        p = self.fc(x).squeeze(1)
        return ((p - y) ** 2).mean(), p


class Norm(nn.Module):
    """Batch norm over 2 features, then a sum: its running statistics are
    buffers."""

    def __init__(self):
        super().__init__()
        self.bn = nn.BatchNorm1d(2, momentum=0.25)
        self.w = nn.Parameter(torch.tensor([1.0, -2.0]))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (self.bn(x) * self.w).sum(1).mean()


class Embedded(nn.Module):
    """ids [n, 2] looked up by the engine: emb f32 [n, 2, 4]; loss =
    mean over records of sum(emb . w), so each looked-up row's gradient is
    w (times n: the engine pushes sums)."""

    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.tensor([0.5, -1.0, 2.0, 0.25]))

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return (ids * self.w).sum(2).sum(1).mean()


class Clicks(nn.Module):
    """A logistic model over ctr_source's ids, looked up in the engine's
    table (a DLRM without its dense part): (loss, probability)."""

    def __init__(self, features: int, dim: int):
        super().__init__()
        self.fc = nn.Linear(features * dim, 1)

    def forward(self, ids: torch.Tensor, label: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        z = self.fc(ids.flatten(1)).squeeze(1)
        return F.binary_cross_entropy_with_logits(z, label.float()), torch.sigmoid(z)


class Fmnist(nn.Module):
    """idx_source's u8 images [n, 28, 28] in, a convolution with batch norm
    and a linear layer: (loss, logits). The export test trains it."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 8, 5, 2)
        self.bn = nn.BatchNorm2d(8)
        self.fc = nn.Linear(8 * 12 * 12, 10)

    def forward(self, image: torch.Tensor, label: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        x = image.float().unsqueeze(1) / 255.0
        x = F.relu(self.bn(self.conv(x)))
        logits = self.fc(x.flatten(1))
        return F.cross_entropy(logits, label), logits


class Double(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.zeros(3, dtype=torch.float64))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x.double() * self.w).sum()


class NotScalar(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(3, 1)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return (self.fc(x).squeeze(1) - y) ** 2


class NaNLoss(nn.Module):
    """Over ctr_source's fields: a loss that is NaN."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(1, 1)

    def forward(self, logit: torch.Tensor, label: torch.Tensor) -> torch.Tensor:
        p = self.fc(logit.unsqueeze(1)).squeeze(1)
        return (p - label.float()).mean() * float("nan")


class Grows(nn.Module):
    """Shrinks its buffer in place in forward (replace=False), or puts a
    new tensor of the same shape in its place (replace=True)."""

    def __init__(self, replace: bool):
        super().__init__()
        self.replace = replace
        self.fc = nn.Linear(3, 1)
        self.register_buffer("seen", torch.zeros(4))

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        if self.replace:
            self.seen = self.seen + 1
        else:
            self.seen.resize_(2)
        return ((self.fc(x).squeeze(1) - y) ** 2).mean()


def main() -> None:
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    torch.manual_seed(3)
    modules = {
        "linear": Linear(),
        "norm": Norm(),
        "embedded": Embedded(),
        "clicks": Clicks(4, 4),
        "fmnist": Fmnist(),
        "double": Double(),
        "not_scalar": NotScalar(),
        "nan_loss": NaNLoss(),
        "grows": Grows(False),
        "replaces": Grows(True),
    }
    values = {}
    for name, m in modules.items():
        s = torch.jit.script(m)
        s.save(os.path.join(out, name + ".pt"))
        values[name] = {k: v.detach().double().flatten().tolist()
                        for k, v in list(m.named_parameters()) + list(m.named_buffers())}
    with open(os.path.join(out, "values.json"), "w") as f:
        json.dump(values, f)
    with open(os.path.join(out, "not_torchscript.pt"), "wb") as f:
        f.write(b"PK\x03\x04 this is no TorchScript archive")


if __name__ == "__main__":
    main()
