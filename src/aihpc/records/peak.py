"""A measured peak as result documents record it: results.json's ``peak``, infer.json's.

The records are the files' layout of :mod:`aihpc.scoring.peak`'s values, in every form
they have had: a measurement (:class:`PeakRecord`, of
:meth:`~aihpc.scoring.peak.PeakResult.to_dict`; a matmul's ``size``,
``matmuls_per_repeat`` and ``flops_per_matmul`` before the kernel search), a worker's
(:class:`WorkerPeakRecord`: the sum of its processes' ``parts``; before a trial trained
on several processes, the one measurement itself), the run's (:class:`RunPeakRecord`,
with the peak measured again after the run and its drift).  Each gives back the value
it records (``peak_result()``, ``run_peak()``), which reads the older forms as
:mod:`aihpc.scoring.peak` does.
"""

from __future__ import annotations

from aihpc.records.codec import UNSET, Record, UnsetType
from aihpc.scoring.peak import PeakResult, RunPeak


class NominalPeakRecord(Record, frozen=True):
    """What a device's silicon can do in one dtype (:class:`aihpc.scoring.peak.NominalPeak`)."""

    dtype: str
    flops_per_s: float | None
    derivation: str | None
    note: str | None


class KernelRateRecord(Record, frozen=True):
    """One kernel's rate in a peak search."""

    kernel: str
    flops_per_s: float


class PeakRecord(Record, frozen=True):
    """One measured peak (:class:`aihpc.scoring.peak.PeakResult`): the fastest kernel's rate in
    timed repeats.  ``devices`` and ``seconds``: infer.json's, the devices it was measured on at
    once and the seconds the measurement took."""

    device: str
    dtype: str
    flops_per_s: float
    min_flops_per_s: float
    max_flops_per_s: float
    spread: float
    repeats: tuple[float, ...]
    threads: int
    note: str | None
    warning: str | None
    kernel: str | None = None
    calls_per_repeat: int | None = None
    flops_per_call: int | None = None
    candidates: tuple[KernelRateRecord, ...] | None = None
    nominal: NominalPeakRecord | None | UnsetType = UNSET
    spread_statistic: str | None = None
    devices: int | None = None
    seconds: float | None = None
    # before the kernel search: the matmul measured
    size: int | None = None
    matmuls_per_repeat: int | None = None
    flops_per_matmul: int | None = None

    def peak_result(self) -> PeakResult:
        """The measurement (a matmul's before the search read as its kernel; a range spread
        recomputed as the IQR over the median)."""
        return PeakResult.from_dict(self.to_dict())


class WorkerPeakRecord(Record, frozen=True):
    """One worker's peak: the sum of its processes' (``parts``); in files from before a trial
    trained on several processes, the worker's one measurement (the fields of
    :class:`PeakRecord`, no ``worker`` or ``parts``)."""

    device: str
    dtype: str
    flops_per_s: float
    spread: float
    worker: str | None = None
    parts: tuple[PeakRecord, ...] | None = None
    nominal: NominalPeakRecord | None | UnsetType = UNSET
    # a worker's one measurement, before parts
    min_flops_per_s: float | None = None
    max_flops_per_s: float | None = None
    repeats: tuple[float, ...] | None = None
    threads: int | None = None
    note: str | None | UnsetType = UNSET
    warning: str | None | UnsetType = UNSET
    kernel: str | None = None
    calls_per_repeat: int | None = None
    flops_per_call: int | None = None
    candidates: tuple[KernelRateRecord, ...] | None = None
    spread_statistic: str | None = None
    size: int | None = None
    matmuls_per_repeat: int | None = None
    flops_per_matmul: int | None = None


class RunPeakRecord(Record, frozen=True):
    """The run's peak: every worker's, measured at once (:class:`aihpc.scoring.peak.RunPeak`);
    ``kernels``, ``nominal`` and ``above_nominal`` as derived when written; once the run ended,
    the peak measured again (``after``: None where it could not be), its ``drift`` over
    ``drift_workers`` and ``drift_warning``, all absent before."""

    device: str
    dtype: str
    per_worker: tuple[WorkerPeakRecord, ...]
    workers: int
    total_flops_per_s: float
    spread: float
    procs_per_worker: int | None = None
    kernels: tuple[str, ...] | None = None
    nominal: NominalPeakRecord | None | UnsetType = UNSET
    above_nominal: str | None | UnsetType = UNSET
    after: RunPeakRecord | None | UnsetType = UNSET
    drift: float | None | UnsetType = UNSET
    drift_warning: str | None | UnsetType = UNSET
    drift_workers: tuple[str, ...] | None | UnsetType = UNSET

    def run_peak(self) -> RunPeak | None:
        """The run's peak as :mod:`aihpc.scoring.peak` computes with it; None for a peak of the
        form before a trial trained on several processes (no ``procs_per_worker``), which the
        score names as it used it."""
        if self.procs_per_worker is None:
            return None
        return RunPeak.from_dict(self.to_dict())


class DtypePeakRecord(Record, frozen=True):
    """results.json's schema 1: the peak measured in one dtype (a matmul of ``matrix_size``)."""

    device: str
    dtype: str
    flops_per_s: float
    matrix_size: int | None = None
    repeats: int | None = None
