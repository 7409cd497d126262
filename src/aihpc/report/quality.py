"""The run's quality as the report shows it: validation accuracy (image runs) or validation loss
in nats per token (language-model runs).

Every part of the report that reads, ranks, formats or plots a model's quality
goes through one :class:`ReportQuality`, chosen for a run by
:func:`report_quality` from the quality its score record holds
(:meth:`aihpc.results.sections.ScoreRecord.quality_kind`): which keys to read in the trials,
epochs and timeline, the words that name it, which way is better, and how its
values are written.  :data:`ACCURACY` writes what the report always wrote for
image runs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, TypeVar

from aihpc.base.fmt import NA, as_number, format_fraction
from aihpc.records.codec import convert
from aihpc.results.sections import QualityKind, ScoreRecord
from aihpc.scoring.quality import Accuracy, Loss

T = TypeVar("T")


@dataclass(frozen=True)
class ReportQuality:
    """How the report reads and writes one quality measure.

    ``name``: "accuracy" or "loss", as :class:`~aihpc.results.sections.QualityKind` names
    it; ``trial_key``, ``epoch_key``, ``best_key``: a trial's best value, an epoch's value, and
    the best so far in the timeline and the score; ``label``: the quality in
    words ("accuracy", "validation loss"); ``short``: one word ("accuracy",
    "loss"); ``column``: the trials table's heading; ``unit``: of plotted
    values ("%", "nats/token"); ``ranked``: the trials a digest keeps whole;
    ``missing``: a trial without a value (failed, cut short);
    ``regulated``: the regulated score's formula
    (:mod:`aihpc.scoring.quality`).
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

    def value(self, row: dict[str, Any]) -> float | None:
        """A trial's best value (``trial_key``), None where it has none."""
        return as_number(row.get(self.trial_key))

    def cell(self, value: Any) -> str:
        """A value for a table cell: "97.22%", "2.2784" (the unit in the heading)."""
        number = as_number(value)
        if number is None:
            return NA
        return format_fraction(number, 2) if self.higher_is_better else f"{number:.4f}"

    def brief(self, value: Any) -> str:
        """A value in a list of many: "97.2%", "2.278"."""
        number = as_number(value)
        if number is None:
            return NA
        return format_fraction(number, 1) if self.higher_is_better else f"{number:.3f}"

    def text(self, value: Any) -> str:
        """A value with its unit: "97.22%", "2.2784 nats/token"."""
        number = as_number(value)
        if number is None or self.higher_is_better:
            return self.cell(number)
        return f"{number:.4f} nats/token"

    def change(self, new: float, old: float) -> str:
        """From ``old`` to ``new``: "+3.20 points" of accuracy, "-0.0377 nats/token" of loss."""
        if self.higher_is_better:
            return f"{100 * (new - old):+.2f} points"
        return f"{new - old:+.4f} nats/token"

    def plotted(self, value: float) -> float:
        """A value on a plot axis in ``unit`` (an accuracy in %)."""
        return 100 * value if self.higher_is_better else value

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


ACCURACY = ReportQuality(
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

LOSS = ReportQuality(
    name="loss",
    trial_key=Loss.trial_key,
    epoch_key=Loss.metric,
    best_key=Loss.best_key,
    label="validation loss",
    short="loss",
    column="best val loss",
    unit="nats/token",
    higher_is_better=False,
    ranked="lowest loss",
    missing="not evaluated",
    regulated="OPS × ln((unigram − floor) / (loss − floor))",
)


def report_quality(kind: QualityKind) -> ReportQuality:
    """How the report shows the quality ``kind`` a run judged its models by."""
    return LOSS if kind is QualityKind.LOSS else ACCURACY


def quality_for(results: dict[str, Any]) -> ReportQuality:
    """The quality of a run's results as the report holds them (read and checked by
    :mod:`aihpc.results.read`): its score's (:meth:`aihpc.results.sections.ScoreRecord.
    quality_kind`, the one rule)."""
    score = convert(results["score"], ScoreRecord, "results.json's score")
    return report_quality(score.quality_kind())


def loss_floor(results: dict[str, Any]) -> float | None:
    """The lowest loss any model can reach on the run's data (the score's ``loss_floor``, else
    the data's ``floor``), None where unknown."""
    for key, field in (("score", "loss_floor"), ("data", "floor")):
        block = results.get(key)
        value = as_number(block.get(field)) if isinstance(block, dict) else None
        if value is not None:
            return value
    return None
