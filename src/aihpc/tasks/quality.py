"""How a report reads and writes a task's quality (:attr:`aihpc.tasks.base.Task.report_quality`),
and the words of a classification task's accuracy.

:class:`ReportQuality` is what every part of a report that reads, ranks,
formats or plots a model's quality goes through; it reads the run's
``score`` and ``data`` as records, so it lives with the tasks, above them.
:data:`ACCURACY` writes an accuracy (:class:`aihpc.scoring.accuracy.Accuracy`):
in percent, changes in points, the task's ceiling where the data set knows
it.  The language task's loss is :mod:`aihpc.tasks.language.quality`'s.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, TypeVar

from aihpc.base.fmt import as_number, format_fraction, format_percent
from aihpc.records.codec import Record
from aihpc.records.run_data import ImageDataRecord
from aihpc.records.score import ScoreRecord
from aihpc.scoring.accuracy import Accuracy

T = TypeVar("T")


@dataclass(frozen=True)
class ReportQuality(ABC):
    """How a report reads and writes one quality measure: a task's :attr:`report_quality`
    (:attr:`aihpc.tasks.base.Task.report_quality`).

    ``name``: the measure ("accuracy", "loss"); ``trial_key``, ``epoch_key``,
    ``best_key``: a trial's best value in results.json, an epoch's value, and
    the best so far in the timeline and the score; ``label``: the quality in
    words ("accuracy", "validation loss"); ``short``: one word; ``column``: the
    trials table's heading; ``unit``: of plotted values ("%", "nats/token");
    ``ranked``: the trials a digest keeps whole; ``missing``: a trial without
    a value (failed, cut short); ``regulated``: the regulated score's formula;
    ``epoch_accuracy``: the epochs record a ``val_accuracy`` beside the
    quality (a language model's next-token accuracy), which the report shows.
    """

    name: str
    trial_key: str
    epoch_key: str
    best_key: str
    label: str
    short: str
    column: str
    unit: str
    higher_is_better: bool
    ranked: str
    missing: str
    regulated: str
    epoch_accuracy: bool = False

    @property
    def val_label(self) -> str:
        """The quality with "validation" in its name: "validation accuracy", "validation loss"."""
        return self.label if self.label.startswith("validation") else f"validation {self.label}"

    @property
    def axis_label(self) -> str:
        """A plot axis of best values: "best validation accuracy (%)"."""
        return f"best {self.val_label} ({self.unit})"

    @property
    def change_heading(self) -> str:
        """The heading of a column of changes between parent and child."""
        return "change" if self.higher_is_better else "change (lower is better)"

    def goodness(self, value: float) -> float:
        """Higher is better: an accuracy as it is, a loss negated."""
        return value if self.higher_is_better else -value

    def best(self, items: Iterable[T], value_of: Callable[[T], float | None]) -> T | None:
        """The item of the best value (the first on ties), None if none has a value."""
        best: T | None = None
        best_goodness = 0.0
        for item in items:
            value = value_of(item)
            if value is None:
                continue
            goodness = self.goodness(value)
            if best is None or goodness > best_goodness:
                best, best_goodness = item, goodness
        return best

    @abstractmethod
    def cell(self, value: Any) -> str:
        """A value for a table cell ("97.22%", "2.2784": the unit in the heading)."""

    @abstractmethod
    def brief(self, value: Any) -> str:
        """A value in a list of many ("97.2%", "2.278")."""

    @abstractmethod
    def text(self, value: Any) -> str:
        """A value with its unit ("97.22%", "2.2784 nats/token")."""

    @abstractmethod
    def change(self, new: float, old: float) -> str:
        """From ``old`` to ``new`` ("+3.20 points", "-0.0377 nats/token")."""

    @abstractmethod
    def plotted(self, value: float) -> float:
        """A value on a plot axis, in ``unit``."""

    @abstractmethod
    def headline(self, score: ScoreRecord, data: Record | None) -> list[tuple[str, str, str]]:
        """The report's cards of the run's quality, from its results.json's ``score`` and
        ``data`` (None: not recorded): (title, value, note) each."""

    @abstractmethod
    def thresholds(self, score: ScoreRecord, data: Record | None) -> list[tuple[float, str, str]]:
        """The lines a plot of the best value so far draws, (value, label, style): the validity
        threshold, and the best any model can reach where it is known (style ``"valid"``,
        ``"floor"``)."""


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

    def headline(self, score: ScoreRecord, data: Record | None) -> list[tuple[str, str, str]]:
        """The error, and the best accuracy beside the minimum for a valid run and the task's
        ceiling where its data set knows it (a synthetic image set's)."""
        least = score.min_accuracy
        notes = [f"minimum {format_fraction(least, 0)}"] if least is not None else []
        ceiling = data.ceiling if isinstance(data, ImageDataRecord) else None
        oracle = as_number((ceiling or {}).get("oracle_accuracy"))
        if oracle is not None:
            notes.append(f"task ceiling {format_fraction(oracle, 1)}–100%")
        return [
            ("Error", format_percent(score.error_percent), ""),
            ("Best accuracy", format_fraction(score.best_accuracy, 2), " · ".join(notes)),
        ]

    def thresholds(self, score: ScoreRecord, data: Record | None) -> list[tuple[float, str, str]]:
        least = score.min_accuracy
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
