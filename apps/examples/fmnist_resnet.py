#!/usr/bin/env python3
"""Scripts the model of apps/examples/fmnist_resnet.pbtxt: a small residual
CNN with batch norm for Fashion-MNIST, as a TorchScript file that ActorFlow's
trainers run (docs/training.md, "Your own model").

    /usr/bin/python3 apps/examples/fmnist_resnet.py [--out build/models/fmnist_resnet.pt]

Debian's python3-torch (1.13) scripts it; the file loads in the libtorch the
engine is built with. The contract: forward takes the topology's
training.model.inputs in their order (here the batch fields "image", f32
[n, 28, 28] standardized, or [n, 28, 28, 1] from image_decode, and "label",
i64 [n]) and returns
(mean loss, predictions); the evaluator takes the predictions' argmax. In
eval mode the predictions average the image's and its mirror image's.
"""

import argparse
import os
from typing import Tuple

import torch
import torch.nn.functional as F
from torch import nn


class Block(nn.Module):
    """Two 3x3 convolutions with batch norm and a skip connection (a 1x1
    convolution when the shape changes)."""

    def __init__(self, cin: int, cout: int, stride: int):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        if stride != 1 or cin != cout:
            self.skip = nn.Sequential(
                nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout)
            )
        else:
            self.skip = nn.Sequential()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return F.relu(y + self.skip(x))


class ResNet(nn.Module):
    """conv 3x3x16 - BN - relu - block(16) - block(32, /2) - block(64, /2) -
    global average pool - dense 10."""

    def __init__(self, classes: int = 10):
        super().__init__()
        self.stem = nn.Conv2d(1, 16, 3, 1, 1, bias=False)
        self.bn = nn.BatchNorm2d(16)
        self.layer1 = Block(16, 16, 1)
        self.layer2 = Block(16, 32, 2)
        self.layer3 = Block(32, 64, 2)
        self.fc = nn.Linear(64, classes)

    def logits(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu(self.bn(self.stem(x)))
        x = self.layer3(self.layer2(self.layer1(x)))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


class Train(nn.Module):
    """What ActorFlow runs: the batch's fields in, (loss, predictions) out."""

    def __init__(self):
        super().__init__()
        self.net = ResNet()

    def forward(
        self, image: torch.Tensor, label: torch.Tensor
    ) -> Tuple[torch.Tensor, torch.Tensor]:
        # image_decode gives [n, height, width, channels] (idx_source [n,
        # height, width]); convolutions take [n, channels, height, width].
        if image.dim() == 3:
            image = image.unsqueeze(3)
        x = image.permute(0, 3, 1, 2)
        if self.training:
            # Half of the images flipped left to right (Fashion-MNIST's
            # classes do not change under it), drawn anew for every batch.
            flip = torch.rand(x.size(0), 1, 1, 1) < 0.5
            x = torch.where(flip, x.flip(3), x)
            logits = self.net.logits(x)
        else:
            # The predictions average the logits of each image and its
            # mirror image, the invariance the flips above teach (test-time
            # augmentation): measured on one trained checkpoint, 0.9237
            # test accuracy against 0.9203 for the image alone
            # (docs/training.md, "Measured").
            logits = 0.5 * (self.net.logits(x) + self.net.logits(x.flip(3)))
        return F.cross_entropy(logits, label), logits


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="build/models/fmnist_resnet.pt")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    torch.manual_seed(args.seed)
    module = torch.jit.script(Train())
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    module.save(args.out)
    params = sum(p.numel() for p in module.parameters())
    print(f"wrote {args.out}: {params} parameters")


if __name__ == "__main__":
    main()
