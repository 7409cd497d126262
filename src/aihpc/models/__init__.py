"""The model zoo: plain-PyTorch image classifiers and sequence models behind a name registry.

``create(name)`` builds a freshly initialised ``nn.Module``; ``info(name)``
describes its defaults without building it; ``names()`` lists what exists.
Two kinds of input (``ModelInfo.input_kind``):

* ``"image"``: images ``(N, C, H, W)`` (float32) -> logits ``(N, num_classes)``;
  ``input_shape`` is ``(C, H, W)``.
* ``"tokens"``: token ids ``(N, T)`` (int64, in ``[0, num_classes)``) ->
  next-token logits at every position, ``(N * T, num_classes)``;
  ``input_shape`` is ``(T,)`` and ``num_classes`` is the vocabulary size.

So every zoo model returns 2-D logits ``(rows, num_classes)`` and a training
target is ``torch.randint(num_classes, (rows,))``; :func:`example_input`
builds a matching random input batch.

The ImageNet models (``resnet18/34/50``, ``vgg11/16``, ``mobilenet_v2``,
``alexnet``) reproduce torchvision's architectures and parameter counts
exactly.  The small ones (``resnet20``, ``vgg_small``, ``mobilenet_v2_small``
for 3x32x32 and ``digits_cnn`` for 1x8x8) suit CPU-sized benchmarks.
``in_channels`` changes the first layer only; ``num_classes`` the last only
(for a tokens model, the vocabulary: embedding and output layer).  The
sequence models are ``lstm_lm`` (PyTorch's word-language-model example,
"small") and ``transformer_small`` (a 4-layer GPT-style decoder).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from aihpc.base.checks import integer
from aihpc.base.errors import ModelError
from aihpc.models.alexnet import alexnet
from aihpc.models.lstm import lstm_lm
from aihpc.models.mobilenet import mobilenet_v2, mobilenet_v2_small
from aihpc.models.resnet import resnet18, resnet20, resnet34, resnet50
from aihpc.models.small import digits_cnn
from aihpc.models.transformer import transformer_small
from aihpc.models.vgg import vgg11, vgg16, vgg_small

__all__ = [
    "INPUT_KINDS",
    "ModelInfo",
    "create",
    "example_input",
    "info",
    "names",
    "num_parameters",
    "parameter_count",
]

#: What a model takes: images (N, C, H, W) float32, or token ids (N, T) int64.
INPUT_KINDS = ("image", "tokens")


@dataclass(frozen=True)
class ModelInfo:
    """Metadata of a registered model.

    ``input_shape`` is the default input of one sample (the batch dimension
    is not included): ``(C, H, W)`` for ``input_kind == "image"``, ``(T,)``
    (sequence length) for ``"tokens"``; ``num_classes`` the default number of
    output logits per row (a tokens model's vocabulary size).
    """

    name: str
    family: str
    input_shape: tuple[int, ...]
    num_classes: int
    description: str
    input_kind: str = "image"

    def __post_init__(self) -> None:
        if self.input_kind not in INPUT_KINDS:
            raise ValueError(f"input_kind must be one of {INPUT_KINDS}, got {self.input_kind!r}")


# image models: (num_classes, in_channels) -> model; tokens models: (num_classes) -> model
Builder = Callable[..., nn.Module]

_IMAGENET = (3, 224, 224)
_CIFAR = (3, 32, 32)

_MODELS: list[tuple[ModelInfo, Builder]] = [
    (
        ModelInfo("resnet18", "resnet", _IMAGENET, 1000, "ResNet-18 (torchvision layout)"),
        resnet18,
    ),
    (
        ModelInfo("resnet34", "resnet", _IMAGENET, 1000, "ResNet-34 (torchvision layout)"),
        resnet34,
    ),
    (
        ModelInfo("resnet50", "resnet", _IMAGENET, 1000, "ResNet-50 v1.5 (torchvision layout)"),
        resnet50,
    ),
    (ModelInfo("vgg11", "vgg", _IMAGENET, 1000, "VGG-11, no BN (torchvision layout)"), vgg11),
    (ModelInfo("vgg16", "vgg", _IMAGENET, 1000, "VGG-16, no BN (torchvision layout)"), vgg16),
    (
        ModelInfo(
            "mobilenet_v2", "mobilenet", _IMAGENET, 1000, "MobileNetV2 1.0 (torchvision layout)"
        ),
        mobilenet_v2,
    ),
    (ModelInfo("alexnet", "alexnet", _IMAGENET, 1000, "AlexNet (torchvision layout)"), alexnet),
    (ModelInfo("resnet20", "resnet", _CIFAR, 10, "CIFAR ResNet-20 of He et al."), resnet20),
    (ModelInfo("vgg_small", "vgg", _CIFAR, 10, "Small BN VGG for 32x32"), vgg_small),
    (
        ModelInfo("mobilenet_v2_small", "mobilenet", _CIFAR, 10, "MobileNetV2 0.5 for 32x32"),
        mobilenet_v2_small,
    ),
    (ModelInfo("digits_cnn", "cnn", (1, 8, 8), 10, "Tiny CNN for 8x8 digits"), digits_cnn),
    (
        ModelInfo("lstm_lm", "lstm", (35,), 10_000, "2-layer LSTM language model", "tokens"),
        lstm_lm,
    ),
    (
        ModelInfo(
            "transformer_small",
            "transformer",
            (128,),
            10_000,
            "4-layer causal Transformer LM",
            "tokens",
        ),
        transformer_small,
    ),
]
_REGISTRY: dict[str, tuple[ModelInfo, Builder]] = {m.name: (m, b) for m, b in _MODELS}


def names() -> list[str]:
    """Registered model names, in registration order (big ones first)."""
    return list(_REGISTRY)


def info(name: str) -> ModelInfo:
    """Metadata of model ``name``; raises :class:`ModelError` if unknown."""
    try:
        return _REGISTRY[name][0]
    except KeyError:
        raise ModelError(f"unknown model {name!r}; valid names: {', '.join(names())}") from None


def create(name: str, num_classes: int | None = None, in_channels: int | None = None) -> nn.Module:
    """Build model ``name`` with fresh (torchvision-style) initialisation.

    ``num_classes`` (a tokens model's vocabulary) and ``in_channels`` default
    to the model's :class:`ModelInfo`; both must be integers >= 1, else
    :class:`ModelError`.  A tokens model has no channels: ``in_channels``
    other than None is a :class:`ModelError`.  The model is returned in
    training mode on the CPU in float32.
    """
    meta = info(name)
    classes = meta.num_classes if num_classes is None else num_classes
    if meta.input_kind == "tokens":
        if in_channels is not None:
            raise ModelError(
                f"in_channels does not apply to {name!r}, whose input is token ids "
                f"(N, T), got in_channels={in_channels!r}"
            )
        integer("num_classes", classes, error=ModelError)
        return _REGISTRY[name][1](classes)
    channels = meta.input_shape[0] if in_channels is None else in_channels
    for label, value in (("num_classes", classes), ("in_channels", channels)):
        integer(label, value, error=ModelError)
    return _REGISTRY[name][1](classes, channels)


def num_parameters(model: nn.Module, trainable_only: bool = False) -> int:
    """Number of parameter elements in ``model`` (shared tensors counted once)."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad or not trainable_only)


def parameter_count(
    name: str, num_classes: int | None = None, in_channels: int | None = None
) -> int:
    """Parameter count of model ``name`` as :func:`create` would build it.

    The model is built on PyTorch's ``meta`` device (no memory is allocated
    and no weights are initialised), so this is cheap even for VGG-16.
    """
    with torch.device("meta"):
        model = create(name, num_classes=num_classes, in_channels=in_channels)
    return num_parameters(model)


def example_input(
    name: str,
    batch_size: int,
    shape: tuple[int, ...] | None = None,
    device: str | torch.device = "cpu",
    *,
    num_classes: int | None = None,
) -> torch.Tensor:
    """A random input batch for model ``name``, batch first.

    Image models: ``(batch_size, C, H, W)`` float32 standard normal values.
    Tokens models: ``(batch_size, T)`` int64 token ids uniform in
    ``[0, num_classes)`` (``num_classes`` defaults to the model's vocabulary;
    pass the one the model was created with).  ``shape`` (one sample)
    defaults to the model's ``input_shape``; a tokens model's is ``(T,)``.
    Every zoo model maps its input to 2-D logits ``(rows, num_classes)``
    (rows = N for images, N * T for tokens), so a training target is
    ``torch.randint(num_classes, (rows,))`` whatever the model.
    Raises :class:`ModelError` for an unknown name, a bad batch size or a
    shape of the wrong rank for a tokens model.
    """
    meta = info(name)
    shape = tuple(meta.input_shape) if shape is None else tuple(shape)
    integer("batch_size", batch_size, error=ModelError)
    if meta.input_kind == "image":
        return torch.randn((batch_size, *shape), device=device)
    if len(shape) != 1:
        raise ModelError(
            f"{name!r} takes token ids: its shape is (sequence length,), got {shape!r}"
        )
    vocab = meta.num_classes if num_classes is None else num_classes
    integer("num_classes", vocab, error=ModelError)
    return torch.randint(vocab, (batch_size, *shape), dtype=torch.int64, device=device)
