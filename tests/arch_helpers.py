"""Shared helpers for the aihpc.nas tests (imported as a plain module)."""

from __future__ import annotations

import math
from collections.abc import Mapping

import torch

from aihpc.tasks.image.build import SpecNet
from aihpc.tasks.image.layer import Layer
from aihpc.tasks.image.spec import ArchSpec
from aihpc.tasks.language.net import LMNet
from aihpc.tasks.language.spec import Block, LMSpec


def tiny_spec() -> ArchSpec:
    """A small fixed spec using most layer types (input 2x6x6, 3 classes)."""
    return ArchSpec(
        input_shape=(2, 6, 6),
        num_classes=3,
        output="fc",
        layers=(
            Layer("c1", "conv", ("input",), out_channels=4, kernel_size=3, padding=1, bias=False),
            Layer("b1", "bn", ("c1",)),
            Layer("r1", "relu", ("b1",)),
            Layer("c2", "conv", ("r1",), out_channels=4, kernel_size=3, padding=1),
            Layer("a1", "add", ("c2", "r1")),
            Layer("r2", "relu", ("a1",)),
            Layer("p1", "maxpool", ("r2",), kernel_size=2),
            Layer("c3", "conv", ("p1",), out_channels=2, kernel_size=1),
            Layer("cat", "concat", ("p1", "c3")),
            Layer("ap", "avgpool", ("cat",), kernel_size=3, stride=1, padding=1),
            Layer("g", "global_avgpool", ("ap",)),
            Layer("d", "dropout", ("g",), p=0.25),
            Layer("fc", "dense", ("d",), out_features=3),
        ),
    )


def randomize(model: SpecNet, seed: int) -> None:
    """Overwrite every parameter and BN buffer with random, well-conditioned
    values (running_var in [0.5, 2], BN weight in [0.5, 1.5]) so that
    identity-like initialisations cannot hide bugs."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for key, value in model.state_dict().items():
            if not value.is_floating_point():
                continue
            shape, dtype = value.shape, value.dtype
            if key.endswith("running_var"):
                new = torch.rand(shape, generator=g, dtype=dtype) * 1.5 + 0.5
            elif key.endswith("running_mean"):
                new = torch.randn(shape, generator=g, dtype=dtype) * 0.3
            elif key.endswith(".weight") and value.dim() == 1:  # BN scale
                new = torch.rand(shape, generator=g, dtype=dtype) + 0.5
            elif key.endswith(".bias"):
                new = torch.randn(shape, generator=g, dtype=dtype) * 0.1
            else:  # conv / dense weight, fan-in scaled
                fan_in = max(1, value[0].numel())
                new = torch.randn(shape, generator=g, dtype=dtype) * (1.5 / fan_in**0.5)
            value.copy_(new)


def model_of(
    spec: ArchSpec, state: dict[str, torch.Tensor] | None = None, seed: int | None = None
) -> SpecNet:
    """Built float64 eval-mode model, loaded with ``state`` (strict) or randomised."""
    model = SpecNet(spec).double().eval()
    if state is not None:
        model.load_state_dict(state, strict=True)
    elif seed is not None:
        randomize(model, seed)
    return model


def inputs_for(spec: ArchSpec, n: int = 3, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, *spec.input_shape, generator=g, dtype=torch.float64)


def run(model: SpecNet, x: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return model(x)


def mixed_spec() -> LMSpec:
    """A language model whose blocks differ in shape, its width unrelated to heads * head_dim."""
    return LMSpec(
        vocab_size=29,
        context=12,
        width=20,
        head_dim=6,
        blocks=(Block(3, 40), Block(1, 16), Block(2, 24)),
        norm_eps=1e-6,
    )


def perturbed(
    spec: LMSpec, seed: int, state: Mapping[str, torch.Tensor] | None = None
) -> dict[str, torch.Tensor]:
    """Random float64 weights of ``spec``'s shapes (those of ``state`` if given)."""
    if state is None:
        state = LMNet(spec, device="meta").state_dict()
    g = torch.Generator().manual_seed(seed)
    out: dict[str, torch.Tensor] = {}
    for key, value in state.items():
        if key.endswith("norm.weight"):
            out[key] = torch.rand(value.shape, generator=g, dtype=torch.float64) + 0.5
        else:
            scale = 1 / math.sqrt(value.shape[-1])
            out[key] = torch.randn(value.shape, generator=g, dtype=torch.float64) * scale
    return out


def tokens_for(spec: LMSpec, seed: int, batch: int = 2, length: int | None = None) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, spec.vocab_size, (batch, length or spec.context), generator=g)
