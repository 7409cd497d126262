"""A trial's records: its hyperparameters, and its rows and its epochs' rows as the store holds
them."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any

from aihpc.base.config import OPTIMIZERS, SCHEDULES
from aihpc.base.errors import DataError


@dataclass(frozen=True)
class Hyperparameters:
    """One trial's hyperparameters: those the search draws (see aihpc.nas.hpo) and the fixed ones.

    The defaults are the trainer's for a value not given.  ``to_dict`` is the
    JSON kept in the store and in results.json's trials.
    """

    lr: float
    batch_size: int
    weight_decay: float = 0.0
    momentum: float = 0.9
    dropout: float = 0.0
    optimizer: str = "sgd"
    schedule: str = "cosine"
    # the share of a trial's steps its learning rate rises over from 0 (language models; an
    # image trial's is 0, and to_dict leaves it out then, as files from before it have none)
    warmup: float = 0.0

    def __post_init__(self) -> None:
        if not self.lr > 0:
            raise DataError(f"the learning rate must be > 0, got {self.lr!r}")
        if self.batch_size < 1:
            raise DataError(f"the batch size must be >= 1, got {self.batch_size!r}")
        if not 0.0 <= self.dropout < 1.0:
            raise DataError(f"dropout must be in [0, 1), got {self.dropout!r}")
        if self.weight_decay < 0:
            raise DataError(f"weight decay must be >= 0, got {self.weight_decay!r}")
        if self.optimizer not in OPTIMIZERS:
            raise DataError(f"unknown optimizer {self.optimizer!r}: one of {OPTIMIZERS}")
        if self.schedule not in SCHEDULES:
            raise DataError(f"unknown schedule {self.schedule!r}: one of {SCHEDULES}")
        if not 0.0 <= self.warmup < 1.0:
            raise DataError(f"warmup must be in [0, 1), got {self.warmup!r}")

    def searched(self) -> dict[str, Any]:
        """Every value, for the hyperparameter search (which draws some of them)."""
        return asdict(self)

    def to_dict(self) -> dict[str, Any]:
        """The JSON the store and results.json keep (``warmup`` left out where it is 0)."""
        values = asdict(self)
        if not self.warmup:
            del values["warmup"]
        return values

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Hyperparameters:
        unknown = sorted(set(data) - {f.name for f in fields(cls)})
        if unknown:
            raise DataError(f"no hyperparameters named {unknown}")
        return cls(**data)
