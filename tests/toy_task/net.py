"""The toy task's network and its one growth step.

Deepening appends a hidden layer of the last one's width whose weight is the
identity and bias zero: its input is a ReLU's output, never negative, so
``relu(I h + 0) = h`` and the network computes what its parent did.  Every
parent tensor is copied under its own name (its optimizer state with it);
the new layer's tensors start with no optimizer state.
"""

from __future__ import annotations

import random
from collections.abc import Mapping

import torch
from torch import nn

from aihpc.base.errors import MorphError
from aihpc.nas.moments import Growth, ParamStates, copy_states
from toy_task.spec import MLPSpec


class MLP(nn.Module):
    """The network of an :class:`MLPSpec`: ``hidden.<i>`` layers, then ``out``."""

    def __init__(self, spec: MLPSpec) -> None:
        super().__init__()
        w = (spec.in_dim, *spec.hidden)
        self.hidden = nn.ModuleList(nn.Linear(a, b) for a, b in zip(w, w[1:], strict=False))
        self.dropout = nn.Dropout(0.0)
        self.out = nn.Linear(w[-1], spec.classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.hidden:
            x = torch.relu(layer(x))
        out: torch.Tensor = self.out(self.dropout(x))
        return out


def deepen(
    spec: MLPSpec, rng: random.Random, max_params: int | None
) -> tuple[MLPSpec, Growth, str]:
    """The spec with an identity hidden layer appended (``rng`` draws nothing: there is one
    step); MorphError where the child would pass ``max_params``."""
    width = spec.hidden[-1]
    child = MLPSpec(spec.in_dim, spec.classes, (*spec.hidden, width))
    if max_params is not None and child.num_params() > max_params:
        raise MorphError(f"deepening to {child.num_params()} parameters passes {max_params}")
    new = f"hidden.{len(spec.hidden)}"

    def weights(parent: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        like = parent["out.weight"]
        eye = torch.eye(width, dtype=like.dtype, device=like.device)
        zero = torch.zeros(width, dtype=like.dtype, device=like.device)
        return {
            **{k: v.clone() for k, v in parent.items()},
            f"{new}.weight": eye,
            f"{new}.bias": zero,
        }

    def moments(states: Mapping[str, Mapping[str, object]]) -> ParamStates:
        return copy_states(states)

    return child, Growth(weights, moments), f"deepen: identity layer {new} of width {width}"
