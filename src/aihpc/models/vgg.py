"""VGG networks (Simonyan & Zisserman 2015) in torchvision's layout, plus a
small batch-normalised VGG-style net for 32x32 images.

Input ``(N, C, H, W)``, output ``(N, num_classes)`` logits.  The ImageNet VGGs
have five 2x2 max pools, so H and W must be >= 32; adaptive average pooling to
7x7 keeps the classifier's size fixed for any such input.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from aihpc.models.resnet import init_conv_bn

# Layer configurations: an int is a 3x3 conv with that many filters, "M" a 2x2 max pool.
CFGS: dict[str, list[int | str]] = {
    "vgg11": [64, "M", 128, "M", 256, 256, "M", 512, 512, "M", 512, 512, "M"],
    "vgg16": [
        64,
        64,
        "M",
        128,
        128,
        "M",
        256,
        256,
        256,
        "M",
        512,
        512,
        512,
        "M",
        512,
        512,
        512,
        "M",
    ],
    "vgg_small": [32, 32, "M", 64, 64, "M", 128, 128, "M"],
}


def make_features(cfg: Sequence[int | str], in_channels: int, batch_norm: bool) -> nn.Sequential:
    """Convolutional trunk: 3x3 convs (padding 1, with bias), optional
    BatchNorm, ReLU; ``"M"`` entries are 2x2 max pools with stride 2."""
    layers: list[nn.Module] = []
    channels = in_channels
    for v in cfg:
        if v == "M":
            layers.append(nn.MaxPool2d(kernel_size=2, stride=2))
            continue
        out = int(v)
        layers.append(nn.Conv2d(channels, out, kernel_size=3, padding=1))
        if batch_norm:
            layers.append(nn.BatchNorm2d(out))
        layers.append(nn.ReLU(inplace=True))
        channels = out
    return nn.Sequential(*layers)


def init_vgg_style(model: nn.Module) -> None:
    """torchvision's VGG/MobileNet initialisation: convs Kaiming-normal
    (fan_out, ReLU) with zero bias, BatchNorm 1/0, linears N(0, 0.01) with
    zero bias."""
    init_conv_bn(model)
    for m in model.modules():
        if isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, 0.0, 0.01)
            nn.init.zeros_(m.bias)


class VGG(nn.Module):
    """torchvision's VGG: features, 7x7 adaptive average pool, and a
    4096-4096-classes classifier with ReLU and dropout 0.5."""

    def __init__(
        self,
        cfg: Sequence[int | str],
        num_classes: int = 1000,
        in_channels: int = 3,
        batch_norm: bool = False,
        dropout: float = 0.5,
    ) -> None:
        super().__init__()
        self.features = make_features(cfg, in_channels, batch_norm)
        self.avgpool = nn.AdaptiveAvgPool2d((7, 7))
        self.classifier = nn.Sequential(
            nn.Linear(512 * 7 * 7, 4096),
            nn.ReLU(inplace=True),
            nn.Dropout(p=dropout),
            nn.Linear(4096, 4096),
            nn.ReLU(inplace=True),
            nn.Dropout(p=dropout),
            nn.Linear(4096, num_classes),
        )
        init_vgg_style(self)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.avgpool(self.features(x))
        out: torch.Tensor = self.classifier(torch.flatten(x, 1))
        return out


class SmallVGG(nn.Module):
    """VGG-style net for 32x32 images: three stages of two BN-conv layers
    (32, 64, 128 filters) with 2x2 max pools, global average pool, dropout
    and one linear layer.  Needs H, W >= 8."""

    def __init__(self, num_classes: int = 10, in_channels: int = 3, dropout: float = 0.3) -> None:
        super().__init__()
        self.features = make_features(CFGS["vgg_small"], in_channels, batch_norm=True)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.classifier = nn.Sequential(nn.Dropout(p=dropout), nn.Linear(128, num_classes))
        init_vgg_style(self)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.avgpool(self.features(x))
        out: torch.Tensor = self.classifier(torch.flatten(x, 1))
        return out


def vgg11(num_classes: int = 1000, in_channels: int = 3) -> VGG:
    """VGG-11 (configuration A, no BN); 132,863,336 parameters at 1000 classes."""
    return VGG(CFGS["vgg11"], num_classes, in_channels)


def vgg16(num_classes: int = 1000, in_channels: int = 3) -> VGG:
    """VGG-16 (configuration D, no BN); 138,357,544 parameters at 1000 classes."""
    return VGG(CFGS["vgg16"], num_classes, in_channels)


def vgg_small(num_classes: int = 10, in_channels: int = 3) -> SmallVGG:
    """Small BN VGG for 32x32 inputs (about 0.29M parameters at 10 classes)."""
    return SmallVGG(num_classes, in_channels)
