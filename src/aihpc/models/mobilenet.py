"""MobileNetV2 (Sandler et al. 2018) in torchvision's layout, plus a
half-width variant for 32x32 images.

Input ``(N, C, H, W)``, output ``(N, num_classes)`` logits.  The ImageNet
model downsamples by 32 (any H, W >= 1 runs; 224 is the default); the small
one downsamples by 8.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from aihpc.models.vgg import init_vgg_style

# (expansion t, output channels c, repeats n, first stride s), as in the paper's Table 2.
IMAGENET_SETTING: tuple[tuple[int, int, int, int], ...] = (
    (1, 16, 1, 1),
    (6, 24, 2, 2),
    (6, 32, 3, 2),
    (6, 64, 4, 2),
    (6, 96, 3, 1),
    (6, 160, 3, 2),
    (6, 320, 1, 1),
)
# CIFAR adaptation: the 24-channel stage keeps the resolution (and so does the stem).
CIFAR_SETTING: tuple[tuple[int, int, int, int], ...] = (
    (1, 16, 1, 1),
    (6, 24, 2, 1),
    (6, 32, 3, 2),
    (6, 64, 4, 2),
    (6, 96, 3, 1),
    (6, 160, 3, 2),
    (6, 320, 1, 1),
)


def make_divisible(value: float, divisor: int = 8) -> int:
    """Round ``value`` to the nearest multiple of ``divisor`` (at least
    ``divisor``), never going more than 10% below ``value``."""
    new = max(divisor, int(value + divisor / 2) // divisor * divisor)
    if new < 0.9 * value:
        new += divisor
    return new


class ConvBNReLU6(nn.Sequential):
    """Conv (no bias, 'same' padding for odd kernels) + BatchNorm + ReLU6."""

    def __init__(
        self, inp: int, oup: int, kernel_size: int = 3, stride: int = 1, groups: int = 1
    ) -> None:
        super().__init__(
            nn.Conv2d(
                inp, oup, kernel_size, stride, (kernel_size - 1) // 2, groups=groups, bias=False
            ),
            nn.BatchNorm2d(oup),
            nn.ReLU6(inplace=True),
        )


class InvertedResidual(nn.Module):
    """1x1 expand (skipped when t = 1), 3x3 depthwise, linear 1x1 project;
    residual connection when the stride is 1 and the channels match."""

    def __init__(self, inp: int, oup: int, stride: int, expand_ratio: int) -> None:
        super().__init__()
        hidden = int(round(inp * expand_ratio))
        self.use_res_connect = stride == 1 and inp == oup
        layers: list[nn.Module] = []
        if expand_ratio != 1:
            layers.append(ConvBNReLU6(inp, hidden, kernel_size=1))
        layers += [
            ConvBNReLU6(hidden, hidden, stride=stride, groups=hidden),
            nn.Conv2d(hidden, oup, 1, 1, 0, bias=False),
            nn.BatchNorm2d(oup),
        ]
        self.conv = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.conv(x)
        result: torch.Tensor = x + out if self.use_res_connect else out
        return result


class MobileNetV2(nn.Module):
    """MobileNetV2: stem conv, inverted-residual stages, 1x1 conv to
    ``last_channel``, global average pool, dropout, linear."""

    def __init__(
        self,
        num_classes: int = 1000,
        in_channels: int = 3,
        width_mult: float = 1.0,
        setting: Sequence[tuple[int, int, int, int]] = IMAGENET_SETTING,
        stem_stride: int = 2,
        last_channel: int = 1280,
        dropout: float = 0.2,
    ) -> None:
        super().__init__()
        channels = make_divisible(32 * width_mult)
        self.last_channel = make_divisible(last_channel * max(1.0, width_mult))
        layers: list[nn.Module] = [ConvBNReLU6(in_channels, channels, stride=stem_stride)]
        for t, c, n, s in setting:
            out = make_divisible(c * width_mult)
            for i in range(n):
                layers.append(InvertedResidual(channels, out, s if i == 0 else 1, t))
                channels = out
        layers.append(ConvBNReLU6(channels, self.last_channel, kernel_size=1))
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Sequential(
            nn.Dropout(p=dropout), nn.Linear(self.last_channel, num_classes)
        )
        init_vgg_style(self)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.adaptive_avg_pool2d(self.features(x), (1, 1))
        out: torch.Tensor = self.classifier(torch.flatten(x, 1))
        return out


def mobilenet_v2(num_classes: int = 1000, in_channels: int = 3) -> MobileNetV2:
    """MobileNetV2 1.0; 3,504,872 parameters at 1000 classes."""
    return MobileNetV2(num_classes, in_channels)


def mobilenet_v2_small(num_classes: int = 10, in_channels: int = 3) -> MobileNetV2:
    """MobileNetV2 at width 0.5 for 32x32 inputs: stride-1 stem and 24-channel
    stage, 640-channel head."""
    return MobileNetV2(
        num_classes,
        in_channels,
        width_mult=0.5,
        setting=CIFAR_SETTING,
        stem_stride=1,
        last_channel=640,
    )
