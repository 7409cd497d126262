"""The formula table type shared by the formula modules, and shape helpers.

A *formula* receives the arguments of one aten call with every tensor replaced
by its shape (a ``torch.Size``), plus ``out_shape`` (the output's shape, or a
tuple of shapes for multi-output ops), and returns the number of operations
of that call as an ``int``.  This is the calling convention of
:class:`torch.utils.flop_counter.FlopCounterMode`'s ``custom_mapping``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeGuard

import torch

FormulaFn = Callable[..., int]


@dataclass(frozen=True)
class Formula:
    """How to count one aten op (all its overloads).

    ``family``: the op type it is reported under in ``OpCount.by_operator``
    (a backward op is reported under its forward op, e.g. ``threshold_backward``
    under ``relu``).  ``ops``: the operation count.  ``macs``: for matrix
    products and convolutions, the multiply-accumulates alone (``None`` else).
    """

    family: str
    ops: FormulaFn
    macs: FormulaFn | None = None


def aten_packets(*names: str) -> list[Any]:
    """The ``torch.ops.aten`` op packets with these names that exist in this torch."""
    found = []
    for name in names:
        try:
            found.append(getattr(torch.ops.aten, name))
        except (AttributeError, RuntimeError):
            continue
    return found


class FormulaTable:
    """A dict op-packet -> :class:`Formula`, filled by the ``register`` decorator."""

    def __init__(self) -> None:
        self.entries: dict[Any, Formula] = {}

    def register(
        self, names: Sequence[str], family: str, macs: FormulaFn | None = None
    ) -> Callable[[FormulaFn], FormulaFn]:
        """Decorator: count the aten ops ``names`` (those that exist) with the function."""

        def deco(fn: FormulaFn) -> FormulaFn:
            for packet in aten_packets(*names):
                if packet in self.entries:
                    raise RuntimeError(f"duplicate counting formula for {packet}")
                self.entries[packet] = Formula(family, fn, macs)
            return fn

        return deco

    def constant(self, names: Sequence[str], family: str, per_element: int) -> None:
        """Register element-wise ops costing ``per_element`` operations per output element."""

        def fn(*args: Any, out_shape: Any = None, **kwargs: Any) -> int:
            return per_element * numel(first_shape(out_shape))

        fn.__name__ = f"{family}_{per_element}_per_element"
        self.register(names, family)(fn)


def numel(shape: Sequence[int] | None) -> int:
    """Number of elements of a shape (``None`` -> 0, ``()`` -> 1)."""
    if shape is None:
        return 0
    return int(math.prod(int(s) for s in shape))


def is_shape(value: Any) -> TypeGuard[torch.Size]:
    """True for a tensor shape as passed to formulas (a ``torch.Size``)."""
    return isinstance(value, torch.Size)


def first_shape(out_shape: Any) -> torch.Size | None:
    """The shape of a single output, or of the first output of a tuple."""
    if is_shape(out_shape) or out_shape is None:
        return out_shape
    if isinstance(out_shape, (tuple, list)) and out_shape:
        return first_shape(out_shape[0])
    return None


def ntuple(value: int | Sequence[int], n: int) -> tuple[int, ...]:
    """``value`` as an ``n``-tuple (a length-1 sequence or an int is repeated)."""
    if isinstance(value, int):
        return (value,) * n
    seq = tuple(int(v) for v in value)
    return seq * n if len(seq) == 1 else seq


def rows_along(shape: Sequence[int], dim: int) -> int:
    """Number of 1-D slices along ``dim`` (elements / size of ``dim``)."""
    if len(shape) == 0:
        return 1
    size = int(shape[dim % len(shape)])
    return numel(shape) // size if size else 0
