"""The processes that train one trial together: one by default, a rank pool's ranks otherwise."""

from __future__ import annotations

import torch

from aihpc.records.messages import WeightsRef


class Group:
    """The processes training one trial together; a single process by default.

    Subclassed by :class:`aihpc.train.ranks.ProcessGroup`.  Every
    method is a collective: all ranks call it, in the same order.
    """

    rank = 0
    world = 1

    def wrap(self, model: torch.nn.Module) -> torch.nn.Module:
        return model

    def any(self, flag: bool) -> bool:
        return flag

    def sum(self, *values: float) -> tuple[float, ...]:
        return values

    def first(self, weights: WeightsRef | None) -> WeightsRef | None:
        """Rank 0's ``weights`` on every rank."""
        return weights


SINGLE = Group()
