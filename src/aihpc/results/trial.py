"""results.json's trials: one :class:`TrialRecord` per trial, with its :class:`EpochRecord`\\ s.

A trial's epochs hold the metrics its worker measured, flat beside where and
when it ran; a failed epoch has none (its worker raised before measuring).
Files of schema 1 had no epoch's status, worker, device, attempt or times,
and no trial's budget or traceback; a trial's architecture is ``arch`` in
full (a trial without a parent, and every trial before schema 3) or
``arch_diff``, the edits of its parent's (:mod:`aihpc.records.archdiff`).
"""

from __future__ import annotations

from typing import Any

from aihpc.records.codec import UNSET, Record, UnsetType, value_or_none
from aihpc.records.messages import EpochStatus
from aihpc.records.rows import TrialStatus
from aihpc.records.trial import Hyperparameters


class EpochRecord(Record, frozen=True):
    """One epoch of a trial: its status, worker, device, attempt and times (seconds since the
    run's start), and the metrics its worker measured (``train_loss`` and the other quality
    figures ``null`` where not measured, absent from a failed epoch)."""

    status: EpochStatus | None = None
    worker: str | None = None
    device: str | None = None
    attempt: int | None = None
    t_start: float | None = None
    t_end: float | None = None
    epoch: int | None = None
    ops: int | None = None
    seconds: float | None = None
    train_samples: int | None = None
    val_samples: int | None = None
    train_loss: float | None | UnsetType = UNSET
    train_accuracy: float | None | UnsetType = UNSET
    val_loss: float | None | UnsetType = UNSET
    val_accuracy: float | None | UnsetType = UNSET
    # the learning-rate schedule's positions its steps went between (absent in older files)
    schedule_from: float | None = None
    schedule_to: float | None = None
    model_flops: float | None = None  # a language model's, by PaLM's convention
    # a compiled model's first epoch on its worker: regions its passes needed, and compiled
    regions_needed: int | None = None
    regions_compiled: int | None = None

    def value(self, metric: str) -> float | None:
        """The epoch's value of ``metric``, the run's quality (its task's
        :attr:`~aihpc.tasks.quality.ReportQuality.epoch_key`); None where not measured."""
        return value_or_none(getattr(self, metric))


class HparamsRecord(Record, frozen=True):
    """A trial's hyperparameters (:class:`aihpc.records.trial.Hyperparameters`; ``warmup``
    absent where it is 0, and every field but ``lr`` and ``batch_size`` absent from files older
    than it)."""

    lr: float
    batch_size: int
    weight_decay: float | None = None
    momentum: float | None = None
    dropout: float | None = None
    optimizer: str | None = None
    schedule: str | None = None
    warmup: float | None = None

    @classmethod
    def of(cls, hparams: Hyperparameters) -> HparamsRecord:
        return cls(**hparams.to_dict())

    def hyperparameters(self) -> Hyperparameters:
        """The trial's hyperparameters (the trainer's default for one a file lacks)."""
        return Hyperparameters.from_dict(self.to_dict())


class TrialOps(Record, frozen=True):
    """A trial's operations: training, evaluation, both."""

    train: int
    eval: int
    total: int


class OpsPerSample(Record, frozen=True):
    """The operations per sample of a trial's architecture (empty where its last epoch failed)."""

    train: float | None = None
    eval: float | None = None


class TrialRecord(Record, frozen=True):
    """One trial of results.json: what it is, how it was made, how it ended, its epochs."""

    id: int
    parent: int | None
    arch_hash: str
    num_params: int | None
    morph: str
    hparams: HparamsRecord
    status: TrialStatus
    reason: str | None
    attempts: int
    worker: str | None
    t_start: float | None
    t_end: float | None
    epochs: tuple[EpochRecord, ...]
    ops: TrialOps
    ops_per_sample: OpsPerSample | None
    phase_seconds: dict[str, float]
    arch: dict[str, Any] | None = None
    arch_diff: dict[str, Any] | None = None
    budget_epochs: int | None = None
    traceback: str | None | UnsetType = UNSET
    # its lineage's start and epochs before its first, and where its hyperparameters came from
    lineage_start: float | None = None
    lineage_epochs: int | None = None
    hparams_origin: str | None = None
    # its best validation value: of the run's quality (the other absent)
    best_val_accuracy: float | None | UnsetType = UNSET
    best_val_loss: float | None | UnsetType = UNSET

    def best(self, trial_key: str) -> float | None:
        """Its best validation value, whose field is ``trial_key`` (the run's task's
        :attr:`~aihpc.tasks.quality.ReportQuality.trial_key`); None: no epoch measured one."""
        return value_or_none(getattr(self, trial_key))
