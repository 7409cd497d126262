"""The measured matmul peak as a record: one device's, one worker's, the run's.

:class:`PeakResult` is one measurement of :func:`aihpc.roofline.peak.measure_peak`
(one device, one dtype).  A run measures every worker at once, in the dtype it
trains in (:func:`aihpc.runner.measure.measure_run_peak`): a :class:`WorkerPeak` is
the sum of its processes' measurements (its ``parts``), the :class:`RunPeak` the
sum over the workers.  The run store's meta ``peak`` and results.json's ``peak``
hold :meth:`RunPeak.to_dict`, with the peak measured again after the run, its
``drift`` and ``drift_warning`` beside it once the run has ended.  Each record is
frozen, checked on construction (a :class:`DataError` naming the rule and the
value), and reads back its own dict with ``from_dict``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Any

from aihpc.errors import DataError


def _check_rate(name: str, value: float) -> None:
    """A rate or spread: a number >= 0 (a spread is infinite where the median is 0)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
        raise DataError(f"{name} must be a number >= 0, got {value!r}")


def _check_count(name: str, value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise DataError(f"{name} must be an integer >= 1, got {value!r}")


def _fields(cls: type, data: dict[str, Any], what: str) -> dict[str, Any]:
    """The values of ``cls``'s fields in ``data``; DataError naming those it lacks."""
    missing = [f.name for f in fields(cls) if f.name not in data]
    if missing:
        raise DataError(f"{what} lacks {', '.join(missing)}")
    return {f.name: data[f.name] for f in fields(cls)}


@dataclass(frozen=True)
class PeakResult:
    """One measured matmul peak.

    ``flops_per_s`` is the median over ``repeats`` (FLOP/s of each timed
    repeat, in order); ``spread`` is ``(max - min) / median``; ``warning`` is a
    sentence when the spread exceeds
    :data:`aihpc.roofline.peak.RANGE_SPREAD_WARNING`, else None.
    """

    device: str
    dtype: str
    size: int
    flops_per_s: float
    min_flops_per_s: float
    max_flops_per_s: float
    spread: float
    repeats: tuple[float, ...]
    matmuls_per_repeat: int
    flops_per_matmul: int
    threads: int
    note: str | None
    warning: str | None

    def __post_init__(self) -> None:
        for name in ("size", "matmuls_per_repeat", "flops_per_matmul", "threads"):
            _check_count(name, getattr(self, name))
        for name in ("flops_per_s", "min_flops_per_s", "max_flops_per_s", "spread"):
            _check_rate(name, getattr(self, name))
        if not self.repeats:
            raise DataError("a peak needs at least one timed repeat, got none")

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable dict of all fields (``repeats`` as a list)."""
        values = {f.name: getattr(self, f.name) for f in fields(self)}
        return {**values, "repeats": list(self.repeats)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PeakResult:
        values = _fields(cls, data, "a matmul peak")
        return cls(**{**values, "repeats": tuple(values["repeats"])})


@dataclass(frozen=True)
class WorkerPeak:
    """One worker's peak: the sum of its processes' (``parts``, measured at once)."""

    worker: str
    device: str
    dtype: str
    flops_per_s: float
    spread: float  # the largest of its parts'
    parts: tuple[PeakResult, ...]

    def __post_init__(self) -> None:
        if not self.parts:
            raise DataError(f"worker {self.worker}'s peak has no measured process")
        _check_rate("flops_per_s", self.flops_per_s)
        _check_rate("spread", self.spread)

    @classmethod
    def of(cls, worker: str, parts: list[PeakResult]) -> WorkerPeak:
        """The peak of ``worker`` whose processes measured ``parts``."""
        if not parts:
            raise DataError(f"worker {worker}'s peak has no measured process")
        return cls(
            worker=worker,
            device=parts[0].device,
            dtype=parts[0].dtype,
            flops_per_s=sum(p.flops_per_s for p in parts),
            spread=max(p.spread for p in parts),
            parts=tuple(parts),
        )

    def to_dict(self) -> dict[str, Any]:
        values = {f.name: getattr(self, f.name) for f in fields(self)}
        return {**values, "parts": [p.to_dict() for p in self.parts]}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> WorkerPeak:
        values = _fields(cls, data, "a worker's peak")
        return cls(**{**values, "parts": tuple(PeakResult.from_dict(p) for p in values["parts"])})


@dataclass(frozen=True)
class PeakDrift:
    """The peak measured again after the run (None: it could not be), and how far it moved."""

    after: RunPeak | None
    drift: float | None  # after / before - 1
    warning: str | None

    def __post_init__(self) -> None:
        if self.drift is not None and not math.isfinite(self.drift):
            raise DataError(f"drift must be a finite number or None, got {self.drift!r}")

    def to_dict(self) -> dict[str, Any]:
        after = None if self.after is None else self.after.to_dict()
        return {"after": after, "drift": self.drift, "drift_warning": self.warning}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PeakDrift:
        after = data["after"]
        return cls(
            None if after is None else RunPeak.from_dict(after),
            data["drift"],
            data["drift_warning"],
        )


@dataclass(frozen=True)
class RunPeak:
    """The run's peak: every worker's, measured at once; ``drift`` once it is measured again."""

    device: str
    dtype: str
    per_worker: tuple[WorkerPeak, ...]
    procs_per_worker: int
    total_flops_per_s: float
    spread: float  # the largest of the workers'
    drift: PeakDrift | None = None  # None: not (yet) measured again after the run

    def __post_init__(self) -> None:
        if not self.per_worker:
            raise DataError("a run's peak needs at least one worker's, got none")
        _check_count("procs_per_worker", self.procs_per_worker)
        _check_rate("total_flops_per_s", self.total_flops_per_s)
        _check_rate("spread", self.spread)

    @property
    def workers(self) -> int:
        return len(self.per_worker)

    @classmethod
    def of(cls, per_worker: list[WorkerPeak], procs_per_worker: int) -> RunPeak:
        """The run's peak from its workers' (all measured at once)."""
        if not per_worker:
            raise DataError("a run's peak needs at least one worker's, got none")
        return cls(
            device=per_worker[0].device,
            dtype=per_worker[0].dtype,
            per_worker=tuple(per_worker),
            procs_per_worker=procs_per_worker,
            total_flops_per_s=sum(w.flops_per_s for w in per_worker),
            spread=max(w.spread for w in per_worker),
        )

    def to_dict(self) -> dict[str, Any]:
        """results.json's ``peak`` (``after``, ``drift``, ``drift_warning`` once measured again)."""
        values = {
            "device": self.device,
            "dtype": self.dtype,
            "per_worker": [w.to_dict() for w in self.per_worker],
            "workers": self.workers,
            "procs_per_worker": self.procs_per_worker,
            "total_flops_per_s": self.total_flops_per_s,
            "spread": self.spread,
        }
        return values if self.drift is None else {**values, **self.drift.to_dict()}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunPeak:
        """The record of :meth:`to_dict`'s dict; DataError naming what it lacks or breaks."""
        keys = [f.name for f in fields(cls) if f.name != "drift"] + ["workers"]
        missing = [k for k in keys if k not in data]
        if missing:
            raise DataError(f"the run's peak lacks {', '.join(missing)}")
        per_worker = tuple(WorkerPeak.from_dict(w) for w in data["per_worker"])
        if data["workers"] != len(per_worker):
            raise DataError(
                f"the run's peak counts {data['workers']} workers but holds {len(per_worker)}"
            )
        return cls(
            device=data["device"],
            dtype=data["dtype"],
            per_worker=per_worker,
            procs_per_worker=data["procs_per_worker"],
            total_flops_per_s=data["total_flops_per_s"],
            spread=data["spread"],
            drift=PeakDrift.from_dict(data) if "drift" in data else None,
        )
