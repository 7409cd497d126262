"""The toy task's quality (validation accuracy, valid from ``min_accuracy``), how a report writes
it, and its settings (``[blobs]`` of a run's TOML file)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from aihpc.base.config import read_section, section_keys
from aihpc.base.errors import ConfigError
from aihpc.base.fmt import as_number, format_fraction
from aihpc.scoring.quality import ReportQuality


@dataclass(frozen=True)
class BlobsOptions:
    """The best accuracy of a valid run, and the data set's options (:mod:`toy_task.data`)."""

    min_accuracy: float = 0.3
    data_options: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not 0.0 <= self.min_accuracy < 1.0:
            raise ConfigError(f"min_accuracy must be in [0, 1), got {self.min_accuracy!r}")

    @classmethod
    def keys(cls) -> tuple[str, ...]:
        return section_keys(cls)

    @classmethod
    def ignored(cls) -> tuple[str, ...]:
        return ()  # a task newer than flat configurations meets none of another task's

    @classmethod
    def from_dict(cls, values: Mapping[str, Any], source: str) -> BlobsOptions:
        return read_section(cls, values, source)

    def to_dict(self) -> dict[str, Any]:
        return {"min_accuracy": self.min_accuracy, "data_options": dict(self.data_options)}

    def ref_options(self) -> dict[str, Any]:
        return dict(self.data_options)


@dataclass(frozen=True)
class PointAccuracy:
    """Validation accuracy, a fraction; the regulated score OPS x |ln(1 - accuracy)|, the
    accuracy capped at 1 - 1/(2n) for a validation set of n points."""

    val_samples: int
    min_accuracy: float
    metric: str = "val_accuracy"
    label: str = "accuracy"
    higher_is_better: bool = True
    best_key: str = "best_accuracy"
    trial_key: str = "best_val_accuracy"

    @property
    def resolution(self) -> float:
        return 0.5 / math.sqrt(max(self.val_samples, 1))

    def text(self, value: float | None) -> str:
        return "-" if value is None else f"{100 * value:.2f}%"

    def goodness(self, value: float) -> float:
        return value

    def regulated(self, ops_per_second: float, best: float | None) -> float:
        capped = min(best or 0.0, 1.0 - 0.5 / max(self.val_samples, 1))
        return ops_per_second * abs(math.log(1.0 - capped))

    def invalid_reason(self, best: float | None) -> str | None:
        if best is None:
            return "no trial finished an evaluation"
        if best < self.min_accuracy:
            return f"best accuracy {best:.4f} is below the minimum {self.min_accuracy:.4f}"
        return None

    def score_fields(self, best: float | None) -> dict[str, Any]:
        return {
            "best_accuracy": best,
            "error_percent": 100.0 * (1.0 - (best if best is not None else 0.0)),
            "min_accuracy": self.min_accuracy,
        }


@dataclass(frozen=True)
class PointReport(ReportQuality):
    """A report's accuracy: in percent, changes in points."""

    def cell(self, value: Any) -> str:
        return format_fraction(as_number(value), 2)

    def brief(self, value: Any) -> str:
        return format_fraction(as_number(value), 1)

    def text(self, value: Any) -> str:
        return self.cell(value)

    def change(self, new: float, old: float) -> str:
        return f"{100 * (new - old):+.2f} points"

    def plotted(self, value: float) -> float:
        return 100 * value

    def headline(self, results: Mapping[str, Any]) -> list[tuple[str, str, str]]:
        score = results.get("score")
        best = score.get("best_accuracy") if isinstance(score, Mapping) else None
        return [("Best accuracy", format_fraction(as_number(best), 2), "")]

    def thresholds(self, results: Mapping[str, Any]) -> list[tuple[float, str, str]]:
        score = results.get("score")
        least = as_number(score.get("min_accuracy")) if isinstance(score, Mapping) else None
        return [] if least is None else [(least, f"min accuracy {100 * least:.0f}%", "valid")]


REPORT = PointReport(
    name="accuracy",
    trial_key=PointAccuracy.trial_key,
    epoch_key=PointAccuracy.metric,
    best_key=PointAccuracy.best_key,
    label="accuracy",
    short="accuracy",
    column="best val acc",
    unit="%",
    higher_is_better=True,
    ranked="most accurate",
    missing="no accuracy",
    regulated="OPS × |ln(1 − accuracy)|",
)
