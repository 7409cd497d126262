"""The sections of results.json but its trials, its data set and its score, as records.

Each is the layout :mod:`aihpc.results.write` gives the section (``t`` and
``t_*`` in seconds since the run's start), in every form results.json has
had (see :mod:`aihpc.records.codec` for what a field's type says).
"""

from __future__ import annotations

from aihpc.records.codec import UNSET, Record, UnsetType, value_or_none
from aihpc.records.messages import ScreenStatus


class SegmentRecord(Record, frozen=True):
    """One stretch a master ran."""

    t_start: float
    t_end: float


class TimelinePoint(Record, frozen=True):
    """The run's progress at one report: operations so far, their rate, the best value of its
    quality (``best_accuracy`` or ``best_val_loss``), trials done and running."""

    t: float
    ops: int
    ops_per_second: float
    trials_done: int
    running: int
    in_flight: int | None = None
    time_left: float | None = None
    best_accuracy: float | None | UnsetType = UNSET
    best_val_loss: float | None | UnsetType = UNSET

    def best(self, best_key: str) -> float | None:
        """The best value of the run's quality so far, whose field is ``best_key`` (the task's
        :attr:`~aihpc.tasks.quality.ReportQuality.best_key`); None where none was measured."""
        return value_or_none(getattr(self, best_key))


class WorkerBusy(Record, frozen=True):
    """How busy one worker was over the run's wall time (``epochs``; schema 1: ``trials``)."""

    name: str
    busy_seconds: float
    busy_fraction: float
    epochs: int | None = None
    trials: int | None = None


class CandidateRecord(Record, frozen=True):
    """One candidate child of a proxy screening (:class:`aihpc.records.rows.Candidate`, less its
    architecture: the chosen one's is its trial's)."""

    arch_hash: str
    morph: str
    ops: int
    predicted: float | None
    proxies: dict[str, float | None] | None


class ScreeningRecord(Record, frozen=True):
    """One proxy screening (:class:`aihpc.records.rows.ScreeningRow`)."""

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
    candidates: tuple[CandidateRecord, ...]
    reason: str | None


class IntegrityRecord(Record, frozen=True):
    """The head of the run store's digest chain as results.json was written."""

    chain_sha256: str
    links: int


class ModelFlopsRecord(Record, frozen=True):
    """A language model run's model FLOPs (:data:`aihpc.results.write.MODEL_FLOPS_CONVENTION`)."""

    convention: str
    total: float
    per_second: float
    utilisation: float | None


class CompilationRecord(Record, frozen=True):
    """What the trials' region-compiled models needed (:func:`aihpc.results.write.compilation`)."""

    models: int
    regions_needed: int
    regions_compiled: int
    regions_from_cache: int
    compile_seconds: float


class DeviceRecord(Record, frozen=True):
    """One device a worker trains on: its torch name, and a GPU's model and identity."""

    device: str
    name: str | None | UnsetType = UNSET
    pci_bus_id: str | None | UnsetType = UNSET
    uuid: str | None | UnsetType = UNSET


class PlacedWorker(Record, frozen=True):
    """A worker's host, slot, the devices it sees (``CUDA_VISIBLE_DEVICES``) and trains on."""

    worker: str
    host: str
    slot: int | None
    visible: str | None
    devices: tuple[DeviceRecord, ...]


class DevicesRecord(Record, frozen=True):
    """Which devices each worker trains on (:mod:`aihpc.launch.placement`), with the rule."""

    rule: str
    workers: tuple[PlacedWorker, ...]
    procs_per_worker: int | None = None


class LayoutRecord(Record, frozen=True):
    """The workers' layout (:class:`aihpc.launch.executor.Layout`), or the address of the Dask
    scheduler they joined."""

    device: str | None = None
    workers: int | None = None
    threads: int | None = None
    procs: int | None = None
    scheduler: str | None | UnsetType = UNSET


class StagedRank(Record, frozen=True):
    """How one data-parallel rank of a worker staged its copy (:meth:`aihpc.train.staging.Staged.
    record`)."""

    tier: str
    seconds: float
    bytes: int
    dtype: str


class StagedWorker(Record, frozen=True):
    """How one worker staged the data set: where (its tier), its bytes and seconds; a worker
    whose trials train on several processes, each rank's (``ranks``: the slowest one's seconds,
    all their bytes)."""

    worker: str
    tier: str
    bytes: int
    seconds: float
    dtype: str | None = None
    ranks: tuple[StagedRank, ...] | None = None


class StagingRecord(Record, frozen=True):
    """How the data set was staged on the workers before the run's clock started."""

    bytes: int
    seconds: float
    workers: int
    tiers: tuple[str, ...]
    per_worker: tuple[StagedWorker, ...]


class WorkerMemory(Record, frozen=True):
    """One worker's memory limit, its node's memory and what it held before its first trial."""

    worker: str
    host: str
    node_bytes: int | None
    node_confined: bool | None
    rss_bytes: int
    limit_bytes: int | None


class WorkerMemoryRecord(Record, frozen=True):
    """Each worker's memory (:mod:`aihpc.launch.memory`), with the rule that sized the limits."""

    rule: str
    terminate_fraction: float
    workers: tuple[WorkerMemory, ...]
