"""The measured peak as a record: one device's, one worker's, the run's; and the nominal one.

:class:`PeakResult` is one measurement of :mod:`aihpc.roofline.peak` (one
device, one dtype): the rate of the fastest of the dense kernels searched
(:mod:`aihpc.roofline.kernels`), which kernel that was, every kernel's rate in
the search (``candidates``), and the device's :class:`NominalPeak` (what its
silicon can do, from the hardware's figures: :mod:`aihpc.roofline.nominal`).
A run measures every worker at once, in the dtype it trains in
(:func:`aihpc.runner.measure.measure_run_peak`): a :class:`WorkerPeak` is the sum
of its processes' measurements (its ``parts``), the :class:`RunPeak` the sum
over the workers, with the nominal peaks summed alike.  The run store's meta
``peak`` and results.json's ``peak`` hold :meth:`RunPeak.to_dict`, with the
peak measured again after the run, its ``drift`` (over ``drift_workers``, the
workers measured both times) and ``drift_warning`` beside it once the run has
ended.  Each record is frozen, checked on construction (a
:class:`DataError` naming the rule and the value), and reads back its own dict
with ``from_dict``; a peak written before the kernel search (a matmul's
``size``, ``matmuls_per_repeat``, ``flops_per_matmul``; no nominal) reads as
the matmul it was.

A peak's ``spread`` is :func:`aihpc.base.spread.spread` of its repeats (IQR /
median), and its dict says so (``spread_statistic``); a dict without it was
written when the spread was the range ``(max - min) / median``, and its spread
is recomputed from its ``repeats`` (the warning it recorded is kept as
written).  A worker's and the run's ``spread`` (the largest of their parts')
are recomputed alike, so old and new files mean the same by it.
"""

from __future__ import annotations

import math
from dataclasses import MISSING, dataclass, fields
from typing import Any

from aihpc.base.checks import integer, number
from aihpc.base.errors import DataError
from aihpc.base.spread import STATISTIC
from aihpc.base.spread import spread as spread_of


def _fields(cls: type, data: dict[str, Any], what: str) -> dict[str, Any]:
    """The values of ``cls``'s fields in ``data``; DataError naming those it lacks (fields with
    a default may be absent: an older record)."""
    required = [f for f in fields(cls) if f.default is MISSING and f.default_factory is MISSING]
    missing = [f.name for f in required if f.name not in data]
    if missing:
        raise DataError(f"{what} lacks {', '.join(missing)}")
    return {f.name: data[f.name] for f in fields(cls) if f.name in data}


@dataclass(frozen=True)
class NominalPeak:
    """What a device's silicon can do in one dtype, from the hardware's own figures.

    ``flops_per_s`` is None exactly where it is not known, and ``note`` then
    says why; where it is known, ``derivation`` shows the product it comes
    from (a CPU's cores x lanes x FMA units x 2 x clock, a GPU's data-sheet
    figure) and ``note`` any caveat (a hypervisor that hides the boost clock).
    """

    dtype: str
    flops_per_s: float | None
    derivation: str | None
    note: str | None

    def __post_init__(self) -> None:
        if self.flops_per_s is None:
            if not self.note:
                raise DataError("a nominal peak that is not known must say why (note)")
        else:
            number("nominal flops_per_s", self.flops_per_s, 0, finite=False, error=DataError)

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> NominalPeak:
        return cls(**_fields(cls, data, "a nominal peak"))

    @classmethod
    def unknown(cls, dtype: str, why: str) -> NominalPeak:
        return cls(dtype=dtype, flops_per_s=None, derivation=None, note=why)


def nominal_total(nominals: list[NominalPeak | None]) -> NominalPeak | None:
    """The sum of several devices' nominal peaks: unknown (with the first reason) if any is;
    None where none was recorded (a peak from before nominal peaks)."""
    if not nominals or any(n is None for n in nominals):
        return None
    known = [n for n in nominals if n is not None]
    unknown = [n for n in known if n.flops_per_s is None]
    if unknown:
        return NominalPeak.unknown(known[0].dtype, str(unknown[0].note))
    if len(known) == 1:
        return known[0]
    total = sum(n.flops_per_s or 0.0 for n in known)
    notes = sorted({n.note for n in known if n.note})
    derivations = {n.derivation for n in known}
    each = known[0].derivation
    return NominalPeak(
        dtype=known[0].dtype,
        flops_per_s=total,
        derivation=f"{len(known)} x ({each})"
        if len(derivations) == 1
        else (f"the sum of {len(known)} devices' nominal peaks"),
        note="; ".join(notes) or None,
    )


@dataclass(frozen=True)
class KernelRate:
    """One kernel's rate in a peak search (a short timing, to choose the kernel measured)."""

    kernel: str
    flops_per_s: float

    def to_dict(self) -> dict[str, Any]:
        return {"kernel": self.kernel, "flops_per_s": self.flops_per_s}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> KernelRate:
        return cls(**_fields(cls, data, "a kernel's rate"))


@dataclass(frozen=True)
class PeakResult:
    """One measured peak: the fastest kernel's rate, timed in repeats.

    ``flops_per_s`` is the median over ``repeats`` (FLOP/s of each timed
    repeat, in order) of ``kernel``; ``spread`` is IQR / median
    (:func:`aihpc.base.spread.spread`); ``warning`` is a sentence when the
    spread exceeds :data:`aihpc.base.spread.SPREAD_WARNING`, else None.
    ``candidates`` are the kernels searched with their short-timing rates (empty
    where one kernel was measured alone); ``nominal`` is the device's nominal
    peak in this dtype (None in records from before it was recorded).
    """

    device: str
    dtype: str
    kernel: str
    flops_per_s: float
    min_flops_per_s: float
    max_flops_per_s: float
    spread: float
    repeats: tuple[float, ...]
    calls_per_repeat: int
    flops_per_call: int
    threads: int
    note: str | None
    warning: str | None
    candidates: tuple[KernelRate, ...] = ()
    nominal: NominalPeak | None = None

    def __post_init__(self) -> None:
        for name in ("calls_per_repeat", "flops_per_call", "threads"):
            integer(name, getattr(self, name), error=DataError)
        for name in ("flops_per_s", "min_flops_per_s", "max_flops_per_s", "spread"):
            number(name, getattr(self, name), 0, finite=False, error=DataError)
        if not self.repeats:
            raise DataError("a peak needs at least one timed repeat, got none")

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable dict of all fields (``repeats`` and ``candidates`` as lists) and
        ``spread_statistic``, the statistic of ``spread``."""
        values = {f.name: getattr(self, f.name) for f in fields(self)}
        return {
            **values,
            "spread_statistic": STATISTIC,
            "repeats": list(self.repeats),
            "candidates": [c.to_dict() for c in self.candidates],
            "nominal": None if self.nominal is None else self.nominal.to_dict(),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PeakResult:
        """The record of :meth:`to_dict`'s dict, or of a matmul peak written before the search;
        a spread written as the range (no ``spread_statistic``) is recomputed from the repeats."""
        if "kernel" not in data and "size" in data:  # a matmul's peak, before the kernel search
            data = {
                **data,
                "kernel": f"matmul {data['size']}x{data['size']}",
                "calls_per_repeat": data.get("matmuls_per_repeat"),
                "flops_per_call": data.get("flops_per_matmul"),
            }
        values = _fields(cls, data, "a measured peak")
        if data.get("spread_statistic") != STATISTIC and values["repeats"]:
            values["spread"] = spread_of(values["repeats"])
        nominal = values.get("nominal")
        return cls(
            **{
                **values,
                "repeats": tuple(values["repeats"]),
                "candidates": tuple(KernelRate.from_dict(c) for c in values.get("candidates", ())),
                "nominal": None if nominal is None else NominalPeak.from_dict(nominal),
            }
        )


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
        number("flops_per_s", self.flops_per_s, 0, finite=False, error=DataError)
        number("spread", self.spread, 0, finite=False, error=DataError)

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

    @property
    def nominal(self) -> NominalPeak | None:
        """The nominal peak of the worker's devices, summed (None: not recorded)."""
        return nominal_total([p.nominal for p in self.parts])

    def to_dict(self) -> dict[str, Any]:
        """The worker's record with its parts; ``nominal`` (the parts' summed) is derived."""
        values = {f.name: getattr(self, f.name) for f in fields(self)}
        nominal = self.nominal
        return {
            **values,
            "parts": [p.to_dict() for p in self.parts],
            "nominal": None if nominal is None else nominal.to_dict(),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> WorkerPeak:
        """The record of :meth:`to_dict`'s dict; ``spread`` is its parts' (read as they are)."""
        values = _fields(cls, data, "a worker's peak")
        parts = tuple(PeakResult.from_dict(p) for p in values["parts"])
        spread = max((p.spread for p in parts), default=values["spread"])
        return cls(**{**values, "spread": spread, "parts": parts})


#: How far the peak may move between its measurements before and after a run, either way, for
#: the run's score and its share of peak to count as repeatable: past it the machine itself
#: changed during the run (throttling, other load), and the same run would not score the same.
PEAK_DRIFT = 0.10


@dataclass(frozen=True)
class PeakDrift:
    """The peak measured again after the run (None: it could not be), and how far it moved: over
    ``workers``, the workers measured both times (a worker the run lost is not measured after
    it); None in records from before this was recorded, where the drift is over every worker."""

    after: RunPeak | None
    drift: float | None  # the workers' total after / their total before - 1
    warning: str | None
    workers: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        if self.drift is not None and not math.isfinite(self.drift):
            raise DataError(f"drift must be a finite number or None, got {self.drift!r}")

    def to_dict(self) -> dict[str, Any]:
        after = None if self.after is None else self.after.to_dict()
        workers = None if self.workers is None else list(self.workers)
        return {
            "after": after,
            "drift": self.drift,
            "drift_warning": self.warning,
            "drift_workers": workers,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PeakDrift:
        after, workers = data["after"], data.get("drift_workers")
        return cls(
            None if after is None else RunPeak.from_dict(after),
            data["drift"],
            data["drift_warning"],
            None if workers is None else tuple(workers),
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
        integer("procs_per_worker", self.procs_per_worker, error=DataError)
        number("total_flops_per_s", self.total_flops_per_s, 0, finite=False, error=DataError)
        number("spread", self.spread, 0, finite=False, error=DataError)

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

    def not_repeatable(self) -> str | None:
        """Why the run's score and its share of peak would not repeat: the peak moved past
        :data:`PEAK_DRIFT` between before the run and after it; None where it did not, or where
        the drift is not known."""
        drift = None if self.drift is None else self.drift.drift
        if drift is None or abs(drift) <= PEAK_DRIFT:
            return None
        return (
            f"the machine's peak moved by {100 * drift:+.1f} % between before the run and after "
            f"it (more than {100 * PEAK_DRIFT:.0f} %)"
        )

    @property
    def nominal(self) -> NominalPeak | None:
        """The nominal peak of every worker's devices, summed (None: not recorded)."""
        return nominal_total([w.nominal for w in self.per_worker])

    @property
    def kernels(self) -> tuple[str, ...]:
        """The kernels whose rates make the peak (each process's fastest), each named once."""
        return tuple(sorted({p.kernel for w in self.per_worker for p in w.parts}))

    @property
    def above_nominal(self) -> str | None:
        """A warning where the measured peak passes the nominal one: one of them is wrong."""
        nominal = self.nominal
        if nominal is None or nominal.flops_per_s is None:
            return None
        if self.total_flops_per_s <= nominal.flops_per_s:
            return None
        ratio = self.total_flops_per_s / nominal.flops_per_s
        caveat = f" ({nominal.note})" if nominal.note else ""
        return (
            f"the measured peak is {ratio:.2f} times the nominal peak{caveat}: the nominal "
            "figures (clock, FMA units) understate this machine, or the measurement is wrong"
        )

    def to_dict(self) -> dict[str, Any]:
        """results.json's ``peak`` (``after``, ``drift``, ``drift_warning`` once measured again).

        ``kernels``, ``nominal`` and ``above_nominal`` are derived from the workers'
        records (and not read back).
        """
        nominal = self.nominal
        values = {
            "device": self.device,
            "dtype": self.dtype,
            "per_worker": [w.to_dict() for w in self.per_worker],
            "workers": self.workers,
            "procs_per_worker": self.procs_per_worker,
            "total_flops_per_s": self.total_flops_per_s,
            "spread": self.spread,
            "kernels": list(self.kernels),
            "nominal": None if nominal is None else nominal.to_dict(),
            "above_nominal": self.above_nominal,
        }
        return values if self.drift is None else {**values, **self.drift.to_dict()}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunPeak:
        """The record of :meth:`to_dict`'s dict; DataError naming what it lacks or breaks."""
        keys = [f.name for f in fields(cls) if f.name != "drift"] + ["workers"]
        # kernels, nominal and above_nominal are derived: not read back
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
            spread=max(w.spread for w in per_worker) if per_worker else data["spread"],
            drift=PeakDrift.from_dict(data) if "drift" in data else None,
        )


def current_run_peak(data: Any) -> RunPeak | None:
    """The run's peak from a store's or results.json's ``peak``: None where it was not measured
    or is in an older form that is kept as written (version 1's one peak per dtype, a peak per
    worker of one process from before ``procs_per_worker``)."""
    if not (isinstance(data, dict) and "procs_per_worker" in data):
        return None
    return RunPeak.from_dict(data)
