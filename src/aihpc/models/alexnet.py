"""AlexNet (Krizhevsky et al. 2012) in torchvision's single-tower layout.

Input ``(N, C, H, W)`` with H, W >= 63 (224 by default), output
``(N, num_classes)`` logits.  torchvision keeps PyTorch's default
initialisation for AlexNet, and so does this module.
"""

from __future__ import annotations

import torch
from torch import nn


class AlexNet(nn.Module):
    """Five convs (64, 192, 384, 256, 256 filters) with three 3x3/2 max pools,
    6x6 adaptive average pool, and a dropout-4096-4096-classes classifier."""

    def __init__(self, num_classes: int = 1000, in_channels: int = 3, dropout: float = 0.5) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(in_channels, 64, kernel_size=11, stride=4, padding=2),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(kernel_size=3, stride=2),
            nn.Conv2d(64, 192, kernel_size=5, padding=2),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(kernel_size=3, stride=2),
            nn.Conv2d(192, 384, kernel_size=3, padding=1),
            nn.ReLU(inplace=True),
            nn.Conv2d(384, 256, kernel_size=3, padding=1),
            nn.ReLU(inplace=True),
            nn.Conv2d(256, 256, kernel_size=3, padding=1),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(kernel_size=3, stride=2),
        )
        self.avgpool = nn.AdaptiveAvgPool2d((6, 6))
        self.classifier = nn.Sequential(
            nn.Dropout(p=dropout),
            nn.Linear(256 * 6 * 6, 4096),
            nn.ReLU(inplace=True),
            nn.Dropout(p=dropout),
            nn.Linear(4096, 4096),
            nn.ReLU(inplace=True),
            nn.Linear(4096, num_classes),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.avgpool(self.features(x))
        out: torch.Tensor = self.classifier(torch.flatten(x, 1))
        return out


def alexnet(num_classes: int = 1000, in_channels: int = 3) -> AlexNet:
    """AlexNet; 61,100,840 parameters at 1000 classes."""
    return AlexNet(num_classes, in_channels)
