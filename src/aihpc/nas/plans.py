"""What every task's growth operators share: the first plan within a size, and state copies.

A task's operators (the image task's morphisms, :mod:`aihpc.tasks.image.morphism`;
the language task's, :mod:`aihpc.tasks.language.growth`) plan a step as a
tuple whose first item is the child architecture; :func:`first_within` draws
such plans until one fits the run's size limit.  A step never aliases its
parent's tensors (:func:`clone_state`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import torch

from aihpc.base.errors import MorphError

StateDict = dict[str, torch.Tensor]
#: How many random candidates a random morphism tries before it gives up.
ATTEMPTS = 50
AnyPlan = TypeVar("AnyPlan", bound=tuple[Any, ...])


def first_within(
    propose: Callable[[], AnyPlan], max_params: int | None
) -> tuple[AnyPlan | None, int | None]:
    """The first of up to :data:`ATTEMPTS` plans from ``propose()`` (one that raises MorphError is
    passed over) whose child (the plan's first item) has at most ``max_params`` parameters; else
    None, and the smallest child tried (None where no candidate applied)."""
    smallest: int | None = None
    for _ in range(ATTEMPTS):
        try:
            plan = propose()
        except MorphError:
            continue
        n_child = plan[0].num_params()
        if max_params is not None and n_child > max_params:
            smallest = n_child if smallest is None else min(smallest, n_child)
            continue
        return plan, None
    return None, smallest


def clone_state(state: Mapping[str, torch.Tensor]) -> StateDict:
    """Independent copies of every tensor (the child never aliases the parent)."""
    return {k: v.detach().clone() for k, v in state.items()}


def float_kind(state: Mapping[str, torch.Tensor]) -> tuple[torch.dtype, torch.device]:
    """dtype and device of the state's floating tensors (defaults if it has none)."""
    for value in state.values():
        if value.is_floating_point():
            return value.dtype, value.device
    return torch.get_default_dtype(), torch.device("cpu")
