"""A tiny CNN for 8x8 grey-scale digits (scikit-learn's ``load_digits``).

Input ``(N, C, H, W)`` with H, W >= 2 (1x8x8 by default), output
``(N, num_classes)`` logits.
"""

from __future__ import annotations

import torch
from torch import nn

from aihpc.models.vgg import init_vgg_style


class DigitsCNN(nn.Module):
    """Two BN-conv layers (16, 32 filters) at full resolution, a 2x2 max pool,
    a third BN-conv (64 filters), 2x2 adaptive average pool, dropout, linear."""

    def __init__(self, num_classes: int = 10, in_channels: int = 1, dropout: float = 0.2) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(in_channels, 16, 3, padding=1, bias=False),
            nn.BatchNorm2d(16),
            nn.ReLU(inplace=True),
            nn.Conv2d(16, 32, 3, padding=1, bias=False),
            nn.BatchNorm2d(32),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(2),
            nn.Conv2d(32, 64, 3, padding=1, bias=False),
            nn.BatchNorm2d(64),
            nn.ReLU(inplace=True),
        )
        self.avgpool = nn.AdaptiveAvgPool2d((2, 2))
        self.classifier = nn.Sequential(nn.Dropout(p=dropout), nn.Linear(64 * 4, num_classes))
        init_vgg_style(self)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.avgpool(self.features(x))
        out: torch.Tensor = self.classifier(torch.flatten(x, 1))
        return out


def digits_cnn(num_classes: int = 10, in_channels: int = 1) -> DigitsCNN:
    """Tiny CNN for 1x8x8 digits (about 26k parameters at 10 classes)."""
    return DigitsCNN(num_classes, in_channels)
