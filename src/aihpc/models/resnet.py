"""ResNets: the ImageNet family (He et al. 2016, torchvision layout) and the
CIFAR family (He et al. 2016, section 4.2).

ImageNet ResNets take ``(N, C, H, W)`` images (224x224 by default; any size
>= 32 works thanks to adaptive average pooling) and return ``(N, num_classes)``
logits.  Their layout matches torchvision's ``resnet18/34/50`` exactly
(ResNet v1.5: the stride of a bottleneck sits in its 3x3 convolution), so the
parameter counts are identical.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn


def conv3x3(in_planes: int, out_planes: int, stride: int = 1, groups: int = 1) -> nn.Conv2d:
    """3x3 convolution, padding 1, no bias (a BatchNorm follows)."""
    return nn.Conv2d(in_planes, out_planes, 3, stride=stride, padding=1, groups=groups, bias=False)


def conv1x1(in_planes: int, out_planes: int, stride: int = 1) -> nn.Conv2d:
    """1x1 convolution, no bias (a BatchNorm follows)."""
    return nn.Conv2d(in_planes, out_planes, 1, stride=stride, bias=False)


class BasicBlock(nn.Module):
    """Two 3x3 convolutions with an identity or projection shortcut."""

    expansion = 1

    def __init__(
        self, inplanes: int, planes: int, stride: int = 1, downsample: nn.Module | None = None
    ) -> None:
        super().__init__()
        self.conv1 = conv3x3(inplanes, planes, stride)
        self.bn1 = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = conv3x3(planes, planes)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = downsample

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        result: torch.Tensor = self.relu(out + identity)
        return result


class Bottleneck(nn.Module):
    """1x1 reduce, 3x3 (carries the stride), 1x1 expand by 4, plus shortcut."""

    expansion = 4

    def __init__(
        self, inplanes: int, planes: int, stride: int = 1, downsample: nn.Module | None = None
    ) -> None:
        super().__init__()
        self.conv1 = conv1x1(inplanes, planes)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = conv3x3(planes, planes, stride)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv3 = conv1x1(planes, planes * self.expansion)
        self.bn3 = nn.BatchNorm2d(planes * self.expansion)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = downsample

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        result: torch.Tensor = self.relu(out + identity)
        return result


class ResNet(nn.Module):
    """ImageNet-style ResNet: 7x7/2 stem, 3x3/2 max pool, four stages
    (64, 128, 256, 512 planes), global average pool, linear classifier."""

    def __init__(
        self,
        block: type[BasicBlock] | type[Bottleneck],
        layers: Sequence[int],
        num_classes: int = 1000,
        in_channels: int = 3,
    ) -> None:
        super().__init__()
        self.inplanes = 64
        self.conv1 = nn.Conv2d(in_channels, 64, 7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
        self.layer1 = self._make_layer(block, 64, layers[0])
        self.layer2 = self._make_layer(block, 128, layers[1], stride=2)
        self.layer3 = self._make_layer(block, 256, layers[2], stride=2)
        self.layer4 = self._make_layer(block, 512, layers[3], stride=2)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(512 * block.expansion, num_classes)
        init_conv_bn(self)

    def _make_layer(
        self, block: type[BasicBlock] | type[Bottleneck], planes: int, blocks: int, stride: int = 1
    ) -> nn.Sequential:
        downsample = None
        if stride != 1 or self.inplanes != planes * block.expansion:
            downsample = nn.Sequential(
                conv1x1(self.inplanes, planes * block.expansion, stride),
                nn.BatchNorm2d(planes * block.expansion),
            )
        layers: list[nn.Module] = [block(self.inplanes, planes, stride, downsample)]
        self.inplanes = planes * block.expansion
        layers += [block(self.inplanes, planes) for _ in range(1, blocks)]
        return nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        out: torch.Tensor = self.fc(torch.flatten(self.avgpool(x), 1))
        return out


def init_conv_bn(model: nn.Module) -> None:
    """torchvision's ResNet initialisation: Kaiming-normal (fan_out, ReLU) for
    convolutions, BatchNorm weight 1 / bias 0; linear layers keep PyTorch's
    default."""
    for m in model.modules():
        if isinstance(m, nn.Conv2d):
            nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, (nn.BatchNorm2d, nn.GroupNorm)):
            nn.init.ones_(m.weight)
            nn.init.zeros_(m.bias)


def resnet18(num_classes: int = 1000, in_channels: int = 3) -> ResNet:
    """ResNet-18: BasicBlocks (2, 2, 2, 2); 11,689,512 parameters at 1000 classes."""
    return ResNet(BasicBlock, (2, 2, 2, 2), num_classes, in_channels)


def resnet34(num_classes: int = 1000, in_channels: int = 3) -> ResNet:
    """ResNet-34: BasicBlocks (3, 4, 6, 3); 21,797,672 parameters at 1000 classes."""
    return ResNet(BasicBlock, (3, 4, 6, 3), num_classes, in_channels)


def resnet50(num_classes: int = 1000, in_channels: int = 3) -> ResNet:
    """ResNet-50: Bottlenecks (3, 4, 6, 3); 25,557,032 parameters at 1000 classes."""
    return ResNet(Bottleneck, (3, 4, 6, 3), num_classes, in_channels)


class CifarBlock(nn.Module):
    """CIFAR basic block with the paper's option-A shortcut: when the shape
    changes, the identity is subsampled by 2 and zero-padded in channels, so
    the shortcut has no parameters."""

    def __init__(self, inplanes: int, planes: int, stride: int = 1) -> None:
        super().__init__()
        self.conv1 = conv3x3(inplanes, planes, stride)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = conv3x3(planes, planes)
        self.bn2 = nn.BatchNorm2d(planes)
        self.stride = stride
        self.pad = planes - inplanes

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x
        if self.stride != 1:
            identity = identity[:, :, :: self.stride, :: self.stride]
        if self.pad > 0:
            # F.pad pads from the last dimension backwards: (W, W, H, H, C, C).
            identity = F.pad(identity, (0, 0, 0, 0, self.pad // 2, self.pad - self.pad // 2))
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + identity)


class CifarResNet(nn.Module):
    """CIFAR ResNet-(6n+2): 3x3 stem with 16 filters, three stages of ``n``
    blocks (16, 32, 64 planes; strides 1, 2, 2), global average pool, linear.

    Takes ``(N, C, H, W)`` with H, W >= 1 (32x32 by default)."""

    def __init__(self, n: int, num_classes: int = 10, in_channels: int = 3) -> None:
        super().__init__()
        self.conv1 = conv3x3(in_channels, 16)
        self.bn1 = nn.BatchNorm2d(16)
        stages: list[nn.Module] = []
        inplanes = 16
        for planes, stride in ((16, 1), (32, 2), (64, 2)):
            for i in range(n):
                stages.append(CifarBlock(inplanes, planes, stride if i == 0 else 1))
                inplanes = planes
        self.layers = nn.Sequential(*stages)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(64, num_classes)
        init_conv_bn(self)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.layers(F.relu(self.bn1(self.conv1(x))))
        out: torch.Tensor = self.fc(torch.flatten(self.avgpool(x), 1))
        return out


def resnet20(num_classes: int = 10, in_channels: int = 3) -> CifarResNet:
    """CIFAR ResNet-20 (n = 3); 269,722 parameters at 10 classes."""
    return CifarResNet(3, num_classes, in_channels)
