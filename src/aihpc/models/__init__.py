"""The model zoo: plain-PyTorch image classifiers behind a name registry.

``create(name)`` builds a freshly initialised ``nn.Module`` mapping images
``(N, C, H, W)`` (float32) to logits ``(N, num_classes)``.  ``info(name)``
describes its defaults without building it; ``names()`` lists what exists.

The ImageNet models (``resnet18/34/50``, ``vgg11/16``, ``mobilenet_v2``,
``alexnet``) reproduce torchvision's architectures and parameter counts
exactly.  The small ones (``resnet20``, ``vgg_small``, ``mobilenet_v2_small``
for 3x32x32 and ``digits_cnn`` for 1x8x8) suit CPU-sized benchmarks.
``in_channels`` changes the first layer only; ``num_classes`` the last only.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from aihpc.errors import ModelError
from aihpc.models.alexnet import alexnet
from aihpc.models.mobilenet import mobilenet_v2, mobilenet_v2_small
from aihpc.models.resnet import resnet18, resnet20, resnet34, resnet50
from aihpc.models.small import digits_cnn
from aihpc.models.vgg import vgg11, vgg16, vgg_small

__all__ = ["ModelInfo", "create", "info", "names", "num_parameters", "parameter_count"]


@dataclass(frozen=True)
class ModelInfo:
    """Metadata of a registered model.

    ``input_shape`` is the default input ``(C, H, W)`` (the batch dimension is
    not included); ``num_classes`` the default number of output logits.
    """

    name: str
    family: str
    input_shape: tuple[int, int, int]
    num_classes: int
    description: str


Builder = Callable[[int, int], nn.Module]  # (num_classes, in_channels) -> model

_IMAGENET = (3, 224, 224)
_CIFAR = (3, 32, 32)

_REGISTRY: dict[str, tuple[ModelInfo, Builder]] = {
    m.name: (m, b)
    for m, b in [
        (ModelInfo("resnet18", "resnet", _IMAGENET, 1000,
                   "ResNet-18 (torchvision layout)"), resnet18),
        (ModelInfo("resnet34", "resnet", _IMAGENET, 1000,
                   "ResNet-34 (torchvision layout)"), resnet34),
        (ModelInfo("resnet50", "resnet", _IMAGENET, 1000,
                   "ResNet-50 v1.5 (torchvision layout)"), resnet50),
        (ModelInfo("vgg11", "vgg", _IMAGENET, 1000,
                   "VGG-11, no BN (torchvision layout)"), vgg11),
        (ModelInfo("vgg16", "vgg", _IMAGENET, 1000,
                   "VGG-16, no BN (torchvision layout)"), vgg16),
        (ModelInfo("mobilenet_v2", "mobilenet", _IMAGENET, 1000,
                   "MobileNetV2 1.0 (torchvision layout)"), mobilenet_v2),
        (ModelInfo("alexnet", "alexnet", _IMAGENET, 1000,
                   "AlexNet (torchvision layout)"), alexnet),
        (ModelInfo("resnet20", "resnet", _CIFAR, 10,
                   "CIFAR ResNet-20 of He et al."), resnet20),
        (ModelInfo("vgg_small", "vgg", _CIFAR, 10,
                   "Small BN VGG for 32x32"), vgg_small),
        (ModelInfo("mobilenet_v2_small", "mobilenet", _CIFAR, 10,
                   "MobileNetV2 0.5 for 32x32"),
         mobilenet_v2_small),
        (ModelInfo("digits_cnn", "cnn", (1, 8, 8), 10,
                   "Tiny CNN for 8x8 digits"), digits_cnn),
    ]
}


def names() -> list[str]:
    """Registered model names, in registration order (big ones first)."""
    return list(_REGISTRY)


def info(name: str) -> ModelInfo:
    """Metadata of model ``name``; raises :class:`ModelError` if unknown."""
    try:
        return _REGISTRY[name][0]
    except KeyError:
        raise ModelError(
            f"unknown model {name!r}; valid names: {', '.join(names())}"
        ) from None


def create(name: str, num_classes: int | None = None, in_channels: int | None = None) -> nn.Module:
    """Build model ``name`` with fresh (torchvision-style) initialisation.

    ``num_classes`` and ``in_channels`` default to the model's
    :class:`ModelInfo`; both must be integers >= 1, else :class:`ModelError`.
    The model is returned in training mode on the CPU in float32.
    """
    meta = info(name)
    classes = meta.num_classes if num_classes is None else num_classes
    channels = meta.input_shape[0] if in_channels is None else in_channels
    for label, value in (("num_classes", classes), ("in_channels", channels)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ModelError(f"{label} must be an integer >= 1, got {value!r}")
    return _REGISTRY[name][1](classes, channels)


def num_parameters(model: nn.Module, trainable_only: bool = False) -> int:
    """Number of parameter elements in ``model`` (shared tensors counted once)."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad or not trainable_only)


def parameter_count(name: str, num_classes: int | None = None, in_channels: int | None = None) -> int:
    """Parameter count of model ``name`` as :func:`create` would build it.

    The model is built on PyTorch's ``meta`` device (no memory is allocated
    and no weights are initialised), so this is cheap even for VGG-16.
    """
    with torch.device("meta"):
        model = create(name, num_classes=num_classes, in_channels=in_channels)
    return num_parameters(model)
