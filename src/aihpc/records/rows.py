"""The run store's rows as records: a trial, one of its epochs, a proxy screening, a lost epoch,
their JSON columns decoded; and a new trial as the master hands it to the store.

``to_dict`` is the row as JSON (the hyperparameters and the weights as
objects); ``from_dict`` reads that form back.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from enum import StrEnum
from typing import Any

from aihpc.base.errors import DataError
from aihpc.records.messages import EpochRecord, Morph, ScreenStatus, WeightsRef
from aihpc.records.trial import Hyperparameters


class TrialStatus(StrEnum):
    """A trial's state: running until the master decides, then one of :data:`FINISHED` (the
    store's ``trials.status``; the values are what files hold)."""

    RUNNING = "running"
    COMPLETED = "completed"
    EARLY_STOPPED = "early_stopped"
    DEADLINE = "deadline"
    DIVERGED = "diverged"
    FAILED = "failed"


FINISHED = (
    TrialStatus.COMPLETED,
    TrialStatus.EARLY_STOPPED,
    TrialStatus.DEADLINE,
    TrialStatus.DIVERGED,
    TrialStatus.FAILED,
)
# the trials that ran to their end (their budget, or stopped early without improving)
SUCCEEDED = (TrialStatus.COMPLETED, TrialStatus.EARLY_STOPPED)


SEED_TRIAL = 0  # the run's first trial: the seed network, trained afresh


class TrialEnd(StrEnum):
    """Why a trial ended, finer than its status (:meth:`TrialRow.end`): a completed trial ended
    at its epoch budget or its plateau, an early-stopped one without improving or beside its peers
    at a rung of successive halving (:mod:`aihpc.runner.search.lifecycle`, whose reasons begin
    with these words)."""

    BUDGET = "budget"
    PLATEAU = "plateau"
    PATIENCE = "patience"
    HALVING = "successive halving"
    DEADLINE = "deadline"
    DIVERGED = "diverged"
    FAILED = "failed"
    RUNNING = "running"


# the ends of a trial that trained as far as its own rules let it: not stopped beside its peers,
# nor lost to a failure
TRAINED_OUT = (TrialEnd.BUDGET, TrialEnd.PLATEAU, TrialEnd.PATIENCE, TrialEnd.DEADLINE)


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
    status: TrialStatus
    reason: str | None
    num_params: int | None
    recipe: dict[str, Any] | None
    t_created: float
    t_end: float | None
    attempts: int
    traceback: str | None
    # the architecture as the edits of the parent's, where the store keeps it so (format 4)
    arch_diff: dict[str, Any] | None = None
    # where its learning-rate schedule and epochs count from, and where its hyperparameters came
    # from (NewTrial's; None: a store from before they were kept, format 4)
    lineage_start: float | None = None
    lineage_epochs: int | None = None
    hparams_origin: str | None = None

    def __post_init__(self) -> None:
        if self.status not in tuple(TrialStatus):
            finished = tuple(s.value for s in FINISHED)
            raise DataError(
                f"a trial's status is running or one of {finished}, got {self.status!r}"
            )
        object.__setattr__(self, "status", TrialStatus(self.status))
        if self.attempts < 0:
            raise DataError(f"a trial's attempts must be >= 0, got {self.attempts!r}")

    def end(self) -> TrialEnd:
        """Why the trial ended (:class:`TrialEnd`), from its status and reason."""
        reason = self.reason or ""
        if self.status == TrialStatus.COMPLETED:
            return TrialEnd.PLATEAU if reason.startswith(TrialEnd.PLATEAU) else TrialEnd.BUDGET
        if self.status == TrialStatus.EARLY_STOPPED:
            return TrialEnd.HALVING if reason.startswith(TrialEnd.HALVING) else TrialEnd.PATIENCE
        return TrialEnd(self.status.value)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "hparams": self.hparams.to_dict()}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TrialRow:
        return cls(**{**data, "hparams": Hyperparameters.from_dict(data["hparams"])})


@dataclass(frozen=True)
class EpochRow(EpochRecord):
    """One epoch of a trial as the store keeps it (:class:`EpochRecord`'s fields), with the attempt
    that made it."""

    attempt: int = field(kw_only=True)

    def __post_init__(self) -> None:
        super().__post_init__()
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
        cls,
        exc: BaseException,
        t: float,
        trial_id: int,
        epoch: int,
        attempt: int,
        requeued: bool,
        cause: str | None = None,
    ) -> LostEpoch:
        """The loss of epoch ``epoch`` (attempt ``attempt``) of ``trial_id`` to ``exc``, the
        exception its future raised: Dask's ``KilledWorker`` names the worker it last ran on.
        ``cause``: why the worker died, where known (its nanny killed it for memory); the reason
        is then that, else the exception."""
        last = getattr(exc, "last_worker", None)
        name = getattr(last, "name", None)
        return cls(
            t=t,
            trial_id=trial_id,
            epoch=epoch,
            attempt=attempt,
            worker=str(name) if name is not None else None,
            address=getattr(last, "host", None),
            reason=cause or f"{type(exc).__name__}: {exc}".strip(),
            requeued=requeued,
        )


@dataclass(frozen=True)
class NewTrial:
    """A trial the master starts, as :meth:`~aihpc.records.store.RunStore.add_trial` records it.

    ``parent_arch``: its parent's architecture, of which the store keeps its
    own as the diff (None: kept in full).  ``recipe``: how a child's first
    epoch makes its weights from its parent's.  ``budget``: its epochs at
    most (0: until the run's deadline).  ``lineage_start``: when its
    lineage's root started, in seconds of the run's clock (the seconds its
    masters ran, from the run's start: the learning-rate schedule's start);
    ``lineage_epochs``: the epochs its lineage trained before its first (its
    ancestors' whose weights it starts from); ``hparams_origin``: where its
    hyperparameters came from (:func:`aihpc.runner.search.inherit.origin`:
    ``tpe``, ``default``, or ``inherited from trial N``).
    """

    id: int
    parent: int | None
    arch_hash: str
    arch: dict[str, Any]
    parent_arch: dict[str, Any] | None
    morph: str
    recipe: Morph | None
    hparams: Hyperparameters
    hpo_number: int | None
    budget: int
    num_params: int | None
    t_created: float
    lineage_start: float
    lineage_epochs: int
    hparams_origin: str


@dataclass(frozen=True)
class Candidate:
    """One candidate child of a proxy screening: its architecture and hash, the morphs that made it,
    the matcher's prediction and the proxies (None: the screening failed), its operations.

    The fields are in the order of their names, as the store's JSON has them.
    """

    arch: dict[str, Any]
    arch_hash: str
    morph: str
    ops: int
    predicted: float | None
    proxies: dict[str, float | None] | None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Candidate:
        names = sorted(f.name for f in fields(cls))
        if sorted(data) != names:
            raise DataError(f"a screening candidate has the fields {names}, got {sorted(data)}")
        return cls(**data)


@dataclass(frozen=True)
class ScreeningRow:
    """One proxy screening as the store keeps it: its candidates, which was chosen and the trial it
    became (``trial`` and ``chosen`` None: none was started); the fields in the table's order."""

    id: int
    parent: int
    trial: int | None
    status: ScreenStatus
    worker: str
    t_start: float
    t_end: float
    batch: int
    ops: int
    chosen: int | None
    candidates: tuple[Candidate, ...]
    reason: str | None

    def __post_init__(self) -> None:
        if self.status not in tuple(ScreenStatus):
            states = tuple(s.value for s in ScreenStatus)
            raise DataError(f"a screening's status is one of {states}, got {self.status!r}")
        object.__setattr__(self, "status", ScreenStatus(self.status))

    def to_dict(self) -> dict[str, Any]:
        """The row as JSON (results.json's screening before its times are made relative)."""
        return {**asdict(self), "candidates": [c.to_dict() for c in self.candidates]}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ScreeningRow:
        candidates = tuple(Candidate.from_dict(c) for c in data["candidates"])
        return cls(**{**data, "candidates": candidates})
