"""Validation accuracy as a task's quality (AIPerf's), and how a report writes it: the image task's
and any other classification task's.

:class:`Accuracy`: regulated score = OPS x |ln(1 - best accuracy)|, valid from
``min_accuracy``.  :data:`ACCURACY`: the report's words for it (an accuracy in
percent, changes in points, the task's ceiling where the data set knows it).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from aihpc.base.fmt import as_number, format_fraction, format_percent
from aihpc.scoring.quality import ReportQuality, section


@dataclass(frozen=True)
class Accuracy:
    """Validation accuracy, a fraction: a classification task's quality.

    A validation set of ``val_samples`` samples cannot tell an accuracy above
    1 - 1/(2n) from 1, so the regulated score caps it there (else a perfect
    accuracy would score infinitely).
    """

    val_samples: int
    min_accuracy: float
    metric: str = "val_accuracy"
    label: str = "accuracy"
    higher_is_better: bool = True
    best_key: str = "best_accuracy"
    trial_key: str = "best_val_accuracy"

    @property
    def resolution(self) -> float:
        """The standard error of an accuracy over ``val_samples`` samples at its largest (at one
        half): sqrt(p (1 - p) / n) <= 0.5 / sqrt(n)."""
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
class AccuracyReport(ReportQuality):
    """How a report writes an accuracy: in percent, changes in points."""

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
        """The error, and the best accuracy beside the minimum for a valid run and the task's
        ceiling where it is known."""
        score = section(results, "score")
        least = as_number(score.get("min_accuracy"))
        notes = [f"minimum {format_fraction(least, 0)}"] if least is not None else []
        ceiling = section(section(results, "data"), "ceiling")
        oracle = as_number(ceiling.get("oracle_accuracy"))
        if oracle is not None:
            notes.append(f"task ceiling {format_fraction(oracle, 1)}–100%")
        return [
            ("Error", format_percent(score.get("error_percent")), ""),
            ("Best accuracy", format_fraction(score.get("best_accuracy"), 2), " · ".join(notes)),
        ]

    def thresholds(self, results: Mapping[str, Any]) -> list[tuple[float, str, str]]:
        least = as_number(section(results, "score").get("min_accuracy"))
        return [] if least is None else [(least, f"min accuracy {100 * least:.0f}%", "valid")]


ACCURACY = AccuracyReport(
    name="accuracy",
    trial_key=Accuracy.trial_key,
    epoch_key=Accuracy.metric,
    best_key=Accuracy.best_key,
    label="accuracy",
    short="accuracy",
    column="best val acc",
    unit="%",
    higher_is_better=True,
    ranked="most accurate",
    missing="no accuracy",
    regulated="OPS × |ln(1 − accuracy)|",
)
