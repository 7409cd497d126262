"""What the master sends a worker, and what comes back.

The unit of work is one *epoch* of one trial.  A trial of E epochs is E tasks
in sequence, each starting from the weights and optimizer state the previous
one wrote, so a worker that dies mid-trial loses only the unfinished epoch:
the master sends that epoch again.  A task carries everything it needs; the
worker keeps nothing between tasks but caches of pure functions of the task
(the loaded data set, the operation count of an architecture).

Weights never travel through the master: a worker writes each epoch's
weights to the run's weight directory and returns a :class:`WeightsRef`
(file name and digest); the next epoch's task names that file.  A child's
first epoch names its parent's file and a :class:`Morph` recipe, which the
worker replays (see :mod:`aihpc.train.weights`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from aihpc.base.config import RunConfig
from aihpc.base.errors import DataError
from aihpc.records.trial import Hyperparameters


@dataclass(frozen=True)
class DataRef:
    """Which data set to train on, and how a worker stages it (:mod:`aihpc.train.staging`); the
    worker caches it.

    ``staging`` is the tier (``auto``, ``device`` or ``stream``);
    ``stage_dir`` the node-local folder of the stream tier (None: the
    system's temporary folder); ``task`` the run's task (:mod:`aihpc.tasks`),
    whose data set ``name`` is.
    """

    name: str
    path: str | None = None
    options: tuple[tuple[str, Any], ...] = ()
    seed: int = 0
    staging: str = "auto"
    stage_dir: str | None = None
    task: str = "image"

    def options_dict(self) -> dict[str, Any]:
        return dict(self.options)

    @classmethod
    def of(cls, config: RunConfig) -> DataRef:
        """The data set of a run's configuration, as every task names it (the workers' cache
        key): its ``[run]`` section's, with the options its task's settings give
        (:meth:`aihpc.base.config.TaskOptions.ref_options`)."""
        run = config.run
        return cls(
            name=run.dataset,
            path=run.data_path,
            options=tuple(sorted(config.options.ref_options().items())),
            seed=run.seed,
            staging=run.staging,
            stage_dir=run.stage_dir,
            task=run.task,
        )

    @classmethod
    def from_dict(cls, fields: dict[str, Any]) -> DataRef:
        """The reference from ``dataclasses.asdict`` of one (e.g. read back from JSON)."""
        return cls(**{**fields, "options": tuple(tuple(o) for o in fields["options"])})


@dataclass(frozen=True)
class WeightsRef:
    """One weight file of the run: its name in the weight directory and its SHA-256 digest."""

    name: str
    digest: str


@dataclass(frozen=True)
class Morph:
    """How a child's starting weights are made from its parent's.

    Replay ``steps`` growth steps of the run's task (:meth:`aihpc.tasks.base.Task.plan`) on the
    parent's architecture with ``random.Random(seed)`` and ``max_params``,
    applying each to the parent's weights: those in ``parent_weights``, or,
    where the parent has none yet (the seed network before any trial
    finished), its fresh initialisation from ``parent_seed``.
    """

    parent_arch: dict[str, Any]
    parent_weights: WeightsRef | None
    parent_seed: int
    seed: int
    steps: int
    max_params: int | None


@dataclass(frozen=True)
class EpochTask:
    """Train ``trial_id`` for epoch ``epoch`` (1-based) of ``epochs``.

    The epoch starts from ``start`` (a weight file with the model's and the
    optimizer's state), or from ``morph`` (a child's first epoch: with
    ``carry_optimizer``, its parent's optimizer state carried through the
    growth, else a fresh optimizer), or else from a fresh initialisation
    seeded by ``seed``.  Its weights are written to ``weights_dir``.
    ``deadline`` is an absolute ``time.time()``: training stops there, and
    the samples processed until then still count.

    ``schedule_from`` and ``schedule_to``: the learning-rate schedule's
    position (0 at its start, 1 at its end) at the epoch's start and at its
    expected end, which the steps interpolate (:meth:`positions`); the master
    sets them (:mod:`aihpc.runner.search.lineage`); None: the trial's own
    schedule over its ``epochs``.  ``share``: the share of the epoch's
    training steps it trains (at least one step), less than 1 for a worker's
    last epoch, sized to end with its validation before the deadline
    (:func:`aihpc.runner.search.lineage.last_share`).
    """

    trial_id: int
    epoch: int
    epochs: int
    arch: dict[str, Any]
    hparams: Hyperparameters
    data: DataRef
    deadline: float
    seed: int
    weights_dir: str
    start: WeightsRef | None = None
    morph: Morph | None = None
    device: str = "auto"
    threads: int | None = None
    procs: int = 1  # processes (GPUs) training this epoch data-parallel
    # compile the model region by region (aihpc.train.regions); None: the task's compile_auto
    compile: bool | None = None
    attempt: int = 1
    carry_optimizer: bool = True  # RunConfig.carry_optimizer
    schedule_from: float | None = None
    schedule_to: float | None = None
    share: float = 1.0

    def positions(self) -> tuple[float, float]:
        """The schedule's position at the epoch's start and at its (expected) end: the master's,
        or, where it gave none, epoch ``epoch`` of ``epochs`` along the trial's own schedule."""
        if self.schedule_from is not None and self.schedule_to is not None:
            return self.schedule_from, self.schedule_to
        return (self.epoch - 1) / self.epochs, self.epoch / self.epochs


class EpochStatus(StrEnum):
    """How an epoch ended (the store's ``epochs.status``; the values are what files hold)."""

    OK = "ok"  # trained and evaluated
    DEADLINE = "deadline"  # stopped by the run's deadline
    DIVERGED = "diverged"  # a NaN or infinite loss
    FAILED = "failed"  # an exception


class ScreenStatus(StrEnum):
    """How a proxy screening ended (the store's ``screenings.status``)."""

    OK = "ok"
    FAILED = "failed"


# the phases of an epoch's ``phase_seconds`` (aihpc.train.timing.PHASES) that are the trial's own
# work, training and evaluation: not its set-up, compilation or waiting
WORK_PHASES = ("data", "forward", "backward", "optimizer", "eval")


@dataclass(frozen=True)
class EpochRecord:
    """What one epoch of a trial did: the fields a worker's :class:`EpochResult` and the store's
    :class:`~aihpc.records.rows.EpochRow` share.

    ``weights`` is the file the epoch wrote (status ok or deadline), if any.
    Operations are those actually performed: samples processed times the
    counted operations per sample.  ``status`` is given as an
    :class:`EpochStatus` or its value; DataError for any other.
    """

    trial_id: int
    epoch: int
    status: EpochStatus
    worker: str
    t_start: float
    t_end: float
    ops_train: int = 0
    ops_eval: int = 0
    metrics: dict[str, Any] = field(default_factory=dict)
    phase_seconds: dict[str, float] = field(default_factory=dict)
    ops_per_sample: dict[str, float] = field(default_factory=dict)
    device: str = "cpu"
    weights: WeightsRef | None = None

    def __post_init__(self) -> None:
        if self.status not in _EPOCH_STATES:
            raise DataError(f"an epoch's status is one of {_EPOCH_STATES}, got {self.status!r}")
        object.__setattr__(self, "status", EpochStatus(self.status))

    @property
    def ops(self) -> int:
        return self.ops_train + self.ops_eval


_EPOCH_STATES = tuple(s.value for s in EpochStatus)


@dataclass(frozen=True)
class EpochResult(EpochRecord):
    """The outcome of one :class:`EpochTask`, as the worker sends it back.

    ``status``: ``ok`` (epoch trained and evaluated), ``deadline`` (stopped by
    the run's deadline; partial work counted, no evaluation unless finished),
    ``diverged`` (a NaN or infinite loss), ``failed`` (an exception; ``reason``
    says which in one line, ``traceback`` in full).  ``num_params`` is the
    model's parameter count.
    """

    reason: str | None = None
    traceback: str | None = None
    num_params: int = 0

    @classmethod
    def failed(
        cls, task: EpochTask, worker: str, t_start: float, reason: str, traceback: str | None
    ) -> EpochResult:
        """The result of ``task``'s epoch that raised: ``reason`` in one line, ending now."""
        return cls(
            task.trial_id,
            task.epoch,
            EpochStatus.FAILED,
            worker,
            t_start,
            time.time(),
            reason=reason,
            traceback=traceback,
        )


@dataclass(frozen=True)
class ScreenTask:
    """Score candidate children of one parent without training them (proxy screening).

    The worker builds every candidate architecture at a fresh initialisation
    (seeded by ``seed``), measures the zero-cost proxies on one minibatch of
    the training data, and has the shipped matcher predict each one's
    accuracy (see :mod:`aihpc.recommend.screen`).  ``screen_id`` numbers the
    screenings of a run.
    """

    screen_id: int
    parent: int
    candidates: tuple[dict[str, Any], ...]  # architecture dicts (ArchSpec.to_dict)
    data: DataRef
    seed: int
    device: str = "auto"
    threads: int | None = None


@dataclass
class ScreenResult:
    """The outcome of a :class:`ScreenTask`.

    ``status`` ``ok`` or ``failed`` (``reason`` says why).  Per candidate, in
    the task's order: ``predicted`` (the matcher's raw value: it ranks),
    ``proxies``, ``ops`` (the operations the screening performed on it).
    ``chosen`` is the index of the highest prediction (the first on a tie).
    """

    screen_id: int
    status: ScreenStatus
    worker: str
    t_start: float
    t_end: float
    reason: str | None = None
    predicted: list[float] = field(default_factory=list)
    proxies: list[dict[str, float]] = field(default_factory=list)
    ops: list[int] = field(default_factory=list)
    chosen: int = 0
    batch: int = 0  # samples in the proxies' minibatch
    device: str = "cpu"

    def __post_init__(self) -> None:
        self.status = ScreenStatus(self.status)
