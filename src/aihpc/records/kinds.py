"""The ``data`` of each result file kind but infer's (:mod:`aihpc.records.files`).

Each kind's data is a record, read and written field by field: ``aihpc bench
training`` (:class:`BenchTrainingData`, of
:meth:`aihpc.bench.training.TrainingOutcome.to_record`) and ``aihpc bench
distributed`` (:class:`BenchDistributedData`, of
:meth:`aihpc.bench.distributed.DistributedOutcome.to_record`) here; ``aihpc bench
operators`` and ``aihpc bench network`` in :mod:`aihpc.records.kinds_bench`;
``aihpc roofline`` and ``aihpc profile`` in :mod:`aihpc.records.kinds_measure`;
the three ``aihpc recommend`` kinds in :mod:`aihpc.records.kinds_recommend`;
``aihpc train-to-target`` is :class:`aihpc.records.ttt.TTTSummary`.
"""

from __future__ import annotations

from aihpc.records.codec import Record
from aihpc.records.kinds_bench import BenchNetworkData, BenchOperatorsData
from aihpc.records.kinds_measure import ProfileData, RooflineData
from aihpc.records.kinds_recommend import CalibrationData, RecommendData, ValidationData
from aihpc.records.ttt import TTTSummary

__all__ = [
    "BenchDistributedData",
    "BenchNetworkData",
    "BenchOperatorsData",
    "BenchTrainingData",
    "CalibrationData",
    "ProfileData",
    "RecommendData",
    "RooflineData",
    "TrainToTargetData",
    "ValidationData",
]


class TrainingEpoch(Record, frozen=True):
    """One point of a Level-2 run's convergence curve (:class:`aihpc.bench.training.EpochPoint`):
    training seconds so far, the epoch's evaluation seconds, its losses and throughput."""

    epoch: int
    seconds: float
    eval_s: float
    train_loss: float | None
    val_accuracy: float
    samples: int
    samples_per_s: float


class BenchTrainingData(Record, frozen=True):
    """``aihpc bench training``: time to a target accuracy, with its curve and settings."""

    model: str
    dataset: str
    target: float
    reached: bool
    stop_reason: str
    time_to_target_s: float | None
    epochs: tuple[TrainingEpoch, ...]
    throughput_samples_per_s: float
    device: str
    batch: int
    lr: float
    momentum: float
    seed: int
    max_epochs: int
    minutes: float
    threads: int
    parameters: int
    train_samples: int
    val_samples: int
    best_val_accuracy: float
    train_s: float
    eval_s: float
    wall_s: float


class StepTimesRecord(Record, frozen=True):
    """One Level-3 run's seconds per step (:class:`aihpc.bench.distributed.StepTimes`)."""

    procs: int
    step_s: float
    step_spread: float
    throughput: float
    compute_s: float
    allreduce_s: float
    overlap_s: float
    warning: str | None


class VolumeRecord(Record, frozen=True):
    """Bytes per rank and per all-reduce (:class:`aihpc.bench.distributed.Volume`)."""

    gradient_bytes: int
    ring_bytes_per_rank_computed: float
    bytes_per_rank_measured: float | None
    ratio: float | None
    measured_by: str
    interface: str | None
    interface_bytes_per_rank: float | None
    calls: int


class BenchDistributedData(Record, frozen=True):
    """``aihpc bench distributed``: one process against ``procs`` data-parallel ranks."""

    procs: int
    backend: str
    device: str
    model: str
    batch_per_rank: int
    steps: int
    warmup: int
    threads_per_rank: int
    launcher: str
    nodes: int
    hosts: tuple[str, ...]
    single: StepTimesRecord
    parallel: StepTimesRecord
    scaling_efficiency: float
    allreduce_share: float
    volume: VolumeRecord


#: ``aihpc train-to-target``'s summary: its frozen records (:mod:`aihpc.records.ttt`), read as they
#: are built (their checks included)
TrainToTargetData = TTTSummary
