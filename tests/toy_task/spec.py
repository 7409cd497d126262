"""The toy task's architecture: a multi-layer perceptron's widths."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from aihpc.base.errors import SpecError
from aihpc.tasks.base import canonical

KIND = "blobs"


@dataclass(frozen=True)
class MLPSpec:
    """``in_dim`` inputs, ``hidden`` layers of those widths (ReLU after each), ``classes``
    outputs."""

    in_dim: int
    classes: int
    hidden: tuple[int, ...]

    def __post_init__(self) -> None:
        widths = (self.in_dim, self.classes, *self.hidden)
        if not self.hidden or any(not isinstance(w, int) or w < 1 for w in widths):
            raise SpecError(f"an MLP needs hidden layers and widths >= 1, got {self.to_dict()}")

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": KIND,
            "in_dim": self.in_dim,
            "classes": self.classes,
            "hidden": list(self.hidden),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> MLPSpec:
        if data.get("kind") != KIND:
            raise SpecError(f"not a {KIND} architecture: {dict(data)!r}")
        try:
            return cls(int(data["in_dim"]), int(data["classes"]), tuple(data["hidden"]))
        except (KeyError, TypeError, ValueError) as exc:
            raise SpecError(f"bad {KIND} architecture {dict(data)!r}: {exc}") from None

    def content_hash(self) -> str:
        return hashlib.sha256(canonical(self.to_dict()).encode("ascii")).hexdigest()

    def widths(self) -> tuple[int, ...]:
        """Every layer's width, the input's first and the output's last."""
        return (self.in_dim, *self.hidden, self.classes)

    def num_params(self) -> int:
        w = self.widths()
        return sum(a * b + b for a, b in zip(w, w[1:], strict=False))
