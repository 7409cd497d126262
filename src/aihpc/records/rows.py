"""The run store's rows as records: a trial and one of its epochs, their JSON columns decoded.

``to_dict`` is the row as JSON (the hyperparameters and the weights as
objects); ``from_dict`` reads that form back.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from aihpc.base.errors import DataError
from aihpc.records.messages import WeightsRef
from aihpc.records.trial import Hyperparameters

# Trial states: 'running' until the master decides; then one of these.
FINISHED = ("completed", "early_stopped", "deadline", "diverged", "failed")


@dataclass(frozen=True)
class TrialRow:
    """One trial as the store keeps it: what it is, how it was made, and how it ended."""

    id: int
    parent: int | None
    arch_hash: str
    arch: dict[str, Any]
    morph: str
    hparams: Hyperparameters
    hpo_number: int | None
    budget: int
    status: str
    reason: str | None
    num_params: int | None
    recipe: dict[str, Any] | None
    t_created: float
    t_end: float | None
    attempts: int
    traceback: str | None
    # the architecture as the edits of the parent's, where the store keeps it so (format 4)
    arch_diff: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        if self.status != "running" and self.status not in FINISHED:
            raise DataError(
                f"a trial's status is running or one of {FINISHED}, got {self.status!r}"
            )
        if self.attempts < 0:
            raise DataError(f"a trial's attempts must be >= 0, got {self.attempts!r}")

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "hparams": self.hparams.to_dict()}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TrialRow:
        return cls(**{**data, "hparams": Hyperparameters.from_dict(data["hparams"])})


@dataclass(frozen=True)
class EpochRow:
    """One epoch of a trial as the store keeps it; ``weights`` the file it wrote, if any."""

    trial_id: int
    epoch: int
    status: str
    worker: str
    t_start: float
    t_end: float
    ops_train: int
    ops_eval: int
    metrics: dict[str, Any]
    phase_seconds: dict[str, float]
    ops_per_sample: dict[str, Any]
    device: str
    attempt: int
    weights: WeightsRef | None

    def __post_init__(self) -> None:
        if self.epoch < 1:
            raise DataError(f"an epoch's number must be >= 1, got {self.epoch!r}")
        if self.ops_train < 0 or self.ops_eval < 0:
            raise DataError(
                f"an epoch's operations must be >= 0, got {self.ops_train!r} and {self.ops_eval!r}"
            )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> EpochRow:
        weights = data["weights"]
        return cls(**{**data, "weights": WeightsRef(**weights) if weights is not None else None})


@dataclass(frozen=True)
class LostEpoch:
    """An epoch whose worker died or vanished while training it (a killed process, a lost node).

    ``t`` is when the master learnt of it (seconds since the epoch, as every
    store time); ``worker`` the Dask name of the worker that ran it and
    ``address`` that worker's network host, where the failure says (None:
    it does not); ``requeued`` whether the epoch was sent again (False: its
    trial had used up ``max_attempts`` and failed).
    """

    t: float
    trial_id: int
    epoch: int
    attempt: int
    worker: str | None
    address: str | None
    reason: str
    requeued: bool

    def __post_init__(self) -> None:
        if self.epoch < 1 or self.attempt < 1:
            raise DataError(
                f"a lost epoch's number and attempt must be >= 1, got {self.epoch!r} and "
                f"{self.attempt!r}"
            )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> LostEpoch:
        return cls(**{**data, "requeued": bool(data["requeued"])})

    @classmethod
    def of(
        cls, exc: BaseException, t: float, trial_id: int, epoch: int, attempt: int, requeued: bool
    ) -> LostEpoch:
        """The loss of epoch ``epoch`` (attempt ``attempt``) of ``trial_id`` to ``exc``, the
        exception its future raised: Dask's ``KilledWorker`` names the worker it last ran on."""
        last = getattr(exc, "last_worker", None)
        name = getattr(last, "name", None)
        return cls(
            t=t,
            trial_id=trial_id,
            epoch=epoch,
            attempt=attempt,
            worker=str(name) if name is not None else None,
            address=getattr(last, "host", None),
            reason=f"{type(exc).__name__}: {exc}".strip(),
            requeued=requeued,
        )
