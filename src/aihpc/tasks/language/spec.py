"""Language-model specs: a decoder-only transformer described as a small JSON value.

An :class:`LMSpec` is a frozen value, validated on construction (SpecError
naming the rule and the value), versioned and content-hashed like
:class:`~aihpc.tasks.image.spec.ArchSpec`, so the search can store, compare and
deduplicate language models as it does CNNs.  Its fields:

* ``vocab_size`` -- tokens in the vocabulary (embedding rows, logits);
* ``context`` -- the longest sequence the model is trained and evaluated on;
  the network refuses longer inputs.  Positions are rotary (no parameters),
  so the context can grow without changing the function;
* ``width`` -- ``d``, the width of the residual stream;
* ``head_dim`` -- the width of every attention head, one for the whole model,
  even because rotary positions rotate pairs of dimensions.  It is fixed: a
  changed head size would change attention's ``1/sqrt(head_dim)`` scale and so
  the function;
* ``blocks`` -- one :class:`Block` per layer, ``Block(heads, mlp_hidden)``:
  per block, so that a morphism can give one block more heads or a wider MLP;
* ``norm_eps`` -- the epsilon of every RMSNorm.  It is part of the spec, not
  a constant, because widening the residual stream from ``d`` to ``d'`` with
  zeros shrinks every mean of squares by ``d/d'``; the operator
  (:func:`aihpc.tasks.language.widen.widen_stream`) multiplies ``norm_eps`` by the
  same ``d/d'`` (and the gains by ``sqrt(d/d')``) to keep the function exact;
* ``version`` -- the format version (:data:`LM_FORMAT_VERSION`).

:meth:`LMSpec.to_dict` writes ``"kind": "lm"``; a CNN ArchSpec dict has no
``"kind"``, so :func:`is_lm_arch` tells the two apart.  This module does not
import torch; :class:`aihpc.tasks.language.net.LMNet` builds a spec's network.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from aihpc.base.checks import integer, number
from aihpc.base.errors import SpecError
from aihpc.tasks.base import canonical

#: Version of the LM JSON format; bump it when the meaning of a spec changes.
LM_FORMAT_VERSION = 1
#: The value of ``"kind"`` in an LM spec dict.
LM_KIND = "lm"

_SPEC_KEYS = ("kind", "version", "vocab_size", "context", "width", "head_dim", "norm_eps", "blocks")
_BLOCK_KEYS = ("heads", "mlp_hidden")


@dataclass(frozen=True)
class Block:
    """One transformer block: ``heads`` attention heads of the spec's ``head_dim``
    and an MLP of ``mlp_hidden`` units."""

    heads: int
    mlp_hidden: int

    def __post_init__(self) -> None:
        integer("block heads", self.heads, error=SpecError)
        integer("block mlp_hidden", self.mlp_hidden, error=SpecError)

    def to_dict(self) -> dict[str, int]:
        return {"heads": self.heads, "mlp_hidden": self.mlp_hidden}

    @classmethod
    def from_dict(cls, data: Any, where: str = "block") -> Block:
        """Inverse of :meth:`to_dict`; SpecError naming ``where`` for anything wrong."""
        if not isinstance(data, Mapping):
            raise SpecError(f"{where} must be a JSON object, got {type(data).__name__}")
        _check_keys(data, _BLOCK_KEYS, where)
        try:
            return cls(heads=data["heads"], mlp_hidden=data["mlp_hidden"])
        except SpecError as exc:
            raise SpecError(f"{where}: {exc}") from None


@dataclass(frozen=True)
class LMSpec:
    """A decoder-only transformer; see the module docstring.  Validated on construction."""

    vocab_size: int
    context: int
    width: int
    head_dim: int
    blocks: tuple[Block, ...]
    norm_eps: float = 1e-5
    version: int = LM_FORMAT_VERSION

    def __post_init__(self) -> None:
        for name in ("vocab_size", "context", "width", "head_dim"):
            integer(name, getattr(self, name), error=SpecError)
        if self.head_dim % 2:
            raise SpecError(
                f"head_dim must be even (rotary positions rotate pairs), got {self.head_dim}"
            )
        if (
            not isinstance(self.blocks, (list, tuple))
            or not self.blocks
            or not all(isinstance(b, Block) for b in self.blocks)
        ):
            raise SpecError(f"blocks must be a non-empty tuple of Block, got {self.blocks!r}")
        object.__setattr__(self, "blocks", tuple(self.blocks))
        eps = self.norm_eps
        eps = number("norm_eps", eps, 0, low_open=True, error=SpecError)
        object.__setattr__(self, "norm_eps", eps)
        if self.version != LM_FORMAT_VERSION:
            raise SpecError(
                f"unsupported LM spec format version {self.version!r} "
                f"(this aihpc reads version {LM_FORMAT_VERSION})"
            )

    @property
    def layers(self) -> int:
        """The number of blocks."""
        return len(self.blocks)

    def num_params(self) -> int:
        """Trainable parameters, exactly those of ``LMNet(self)``: embedding and
        unembedding (``vocab x d`` each, untied), the final gain, and per block
        two gains, q, k, v and output projections (``d x heads*head_dim`` each)
        and the MLP (``d x mlp_hidden`` twice).  No biases."""
        d = self.width
        total = 2 * self.vocab_size * d + d
        for b in self.blocks:
            total += 2 * d + 4 * d * b.heads * self.head_dim + 2 * d * b.mlp_hidden
        return total

    # ----------------------------------------------------------- serialisation
    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict with a fixed key order; ``"kind": "lm"`` marks it as a language model."""
        return {
            "kind": LM_KIND,
            "version": self.version,
            "vocab_size": self.vocab_size,
            "context": self.context,
            "width": self.width,
            "head_dim": self.head_dim,
            "norm_eps": self.norm_eps,
            "blocks": [b.to_dict() for b in self.blocks],
        }

    @classmethod
    def from_dict(cls, data: Any) -> LMSpec:
        """Inverse of :meth:`to_dict`; validates; SpecError naming the key or value at fault."""
        if not isinstance(data, Mapping):
            raise SpecError(f"an LM spec must be a JSON object, got {type(data).__name__}")
        _check_keys(data, _SPEC_KEYS, "LM spec")
        if data["kind"] != LM_KIND:
            raise SpecError(f"LM spec field 'kind' must be {LM_KIND!r}, got {data['kind']!r}")
        blocks = data["blocks"]
        if not isinstance(blocks, list):
            raise SpecError(f"LM spec field 'blocks' must be a list, got {type(blocks).__name__}")
        return cls(
            vocab_size=data["vocab_size"],
            context=data["context"],
            width=data["width"],
            head_dim=data["head_dim"],
            blocks=tuple(Block.from_dict(b, f"block {i}") for i, b in enumerate(blocks)),
            norm_eps=data["norm_eps"],
            version=data["version"],
        )

    def content_hash(self) -> str:
        """SHA-256 (hex) of the canonical JSON of :meth:`to_dict` (keys sorted, no
        whitespace, ASCII): it covers every field and the format version, not
        weights, and is stable across processes and Python versions."""
        if "_content_hash" not in self.__dict__:  # a spec never changes, so neither does its hash
            digest = hashlib.sha256(canonical(self.to_dict()).encode("ascii")).hexdigest()
            object.__setattr__(self, "_content_hash", digest)
        result: str = self.__dict__["_content_hash"]
        return result


def _check_keys(data: Mapping[str, Any], expected: tuple[str, ...], where: str) -> None:
    """SpecError naming missing or unknown keys (and listing the valid ones)."""
    missing = [k for k in expected if k not in data]
    unknown = sorted(str(k) for k in data if k not in expected)
    if missing:
        raise SpecError(f"{where} is missing field(s) {', '.join(missing)}")
    if unknown:
        raise SpecError(
            f"{where} has unknown field(s) {', '.join(unknown)}; valid: {', '.join(expected)}"
        )


def is_lm_arch(d: object) -> bool:
    """True if ``d`` is a language-model spec dict (``"kind": "lm"``), False for a CNN
    ArchSpec dict (which has no ``"kind"``) or anything else.  It does not validate."""
    return isinstance(d, Mapping) and d.get("kind") == LM_KIND


def seed_lm_spec(
    vocab_size: int,
    context: int,
    width: int,
    layers: int,
    heads: int,
    head_dim: int,
    mlp_hidden: int,
    norm_eps: float = 1e-5,
) -> LMSpec:
    """A uniform seed: ``layers`` identical blocks of ``heads`` heads and ``mlp_hidden`` units."""
    integer("layers", layers, error=SpecError)
    return LMSpec(
        vocab_size=vocab_size,
        context=context,
        width=width,
        head_dim=head_dim,
        blocks=(Block(heads, mlp_hidden),) * layers,
        norm_eps=norm_eps,
    )
