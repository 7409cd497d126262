"""The train-to-target summary: what ``ttt.json``'s ``data`` holds, as frozen records.

:class:`TTTSummary` is one ``aihpc train-to-target`` invocation: the
workload, its target and budget, each run (:class:`TTTRun`) with its
instances (:class:`TTTInstance`), and the aggregates of
:mod:`aihpc.workloads.ttt`.  Each record has ``to_dict`` / ``from_dict``;
``to_dict`` writes exactly the keys the file has always had.  A value
that is not finite (a diverged run's quality) is None: JSON has no NaN.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from typing import Any

from aihpc.base.errors import DataError

# a learning curve's point: epoch, seconds since run_start, the metric (None: diverged)
CurvePoint = tuple[int, float, float | None]


def _check(rule: bool, message: str) -> None:
    if not rule:
        raise DataError(message)


@dataclass(frozen=True)
class TTTInstance:
    """One model trained to the target: its result, its MLPerf log and whether that log complies."""

    run: int
    instance: int
    seed: int
    reached: bool
    quality: float | None  # the metric at the last evaluation
    best: float | None  # the best metric of any evaluation
    epochs: int
    time_to_train_s: float
    staging_s: float
    staged_bytes: int
    run_start_ms: int
    run_stop_ms: int
    curve: tuple[CurvePoint, ...]
    train_ops_per_sample: int
    eval_ops_per_sample: int
    total_ops: int
    ops_per_s: float | None
    mlperf_log: str
    compliant: bool | None  # None: not checked yet
    host: str | None = None  # the node it trained on; None in files from before it was recorded

    def __post_init__(self) -> None:
        for name in ("run", "instance", "epochs", "staged_bytes", "total_ops"):
            value = getattr(self, name)
            _check(value >= 0, f"a train-to-target instance's {name} must be >= 0, got {value}")
        _check(
            self.run_stop_ms >= self.run_start_ms,
            f"run_stop_ms must be >= run_start_ms ({self.run_start_ms}), got {self.run_stop_ms}",
        )

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "curve": [list(point) for point in self.curve]}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> TTTInstance:
        curve = tuple((int(e), float(s), v) for e, s, v in d["curve"])
        return cls(**{**_known(cls, {"host": None, **d}), "curve": curve})


@dataclass(frozen=True)
class TTTRun:
    """One round: its instances trained at once, and their time to train and throughput."""

    instances: tuple[TTTInstance, ...]
    time_to_train_s: float  # the mean over the instances
    wall_s: float  # from the first run_start to the last run_stop
    models_per_minute: float | None
    ops_per_s: float | None
    reached: bool  # every instance reached the target

    def __post_init__(self) -> None:
        _check(len(self.instances) >= 1, "a train-to-target run needs >= 1 instance, got 0")

    def to_dict(self) -> dict[str, Any]:
        return {
            **{f.name: getattr(self, f.name) for f in fields(self)},
            "instances": [i.to_dict() for i in self.instances],
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> TTTRun:
        instances = tuple(TTTInstance.from_dict(i) for i in d["instances"])
        return cls(**{**_known(cls, d), "instances": instances})


@dataclass(frozen=True)
class TTTSummary:
    """``ttt.json``'s data: the workload, its target and budget, the runs and their aggregates."""

    workload: str
    benchmark: str
    size: str
    metric: str
    higher_is_better: bool
    target: float
    reference_target: float
    target_note: str
    division: str
    runs: tuple[TTTRun, ...]
    instances: int  # per run
    runs_planned: int
    runs_completed: int
    max_epochs: int
    max_seconds: float
    seed: int
    time_to_train_s: float
    time_to_train_aggregate: str  # how: olympic or plain mean, of how many runs
    staging_s: float  # the mean over every instance
    models_per_minute: float
    models_per_minute_aggregate: str
    all_reached: bool
    all_compliant: bool
    generation_s: float | None  # None: the data was given (--data-dir), not generated
    data_dir: str
    compliance_output: Mapping[str, str]  # the checker's output for each log that failed it

    def __post_init__(self) -> None:
        _check(
            self.runs_completed == len(self.runs),
            f"runs_completed must be the {len(self.runs)} runs, got {self.runs_completed}",
        )
        _check(
            1 <= self.runs_completed <= self.runs_planned,
            f"runs_completed must be in [1, {self.runs_planned}], got {self.runs_completed}",
        )
        _check(
            self.division in ("closed", "open"),
            f"division must be closed or open, got {self.division!r}",
        )

    def missed(self) -> list[TTTInstance]:
        """The instances that did not reach the target, in run order."""
        return [i for r in self.runs for i in r.instances if not i.reached]

    def to_dict(self) -> dict[str, Any]:
        return {
            **{f.name: getattr(self, f.name) for f in fields(self)},
            "runs": [r.to_dict() for r in self.runs],
            "compliance_output": dict(self.compliance_output),
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> TTTSummary:
        runs = tuple(TTTRun.from_dict(r) for r in d["runs"])
        return cls(**{**_known(cls, d), "runs": runs})


def _known(cls: type, d: Mapping[str, Any]) -> dict[str, Any]:
    """The fields of ``cls`` from ``d``; a missing one is a one-line error naming it."""
    names = [f.name for f in fields(cls)]
    missing = [n for n in names if n not in d]
    _check(not missing, f"a {cls.__name__} record needs {', '.join(missing)}; got {sorted(d)}")
    return {n: d[n] for n in names}
