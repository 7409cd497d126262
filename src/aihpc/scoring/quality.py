"""How a task's models are judged: the quality measure behind the search, the score and validity,
and how a report writes it.

A task names one validation metric its epochs report; everything that ranks
or scores models reads it through a :class:`Quality`:

* the search (tournaments, TPE, early stopping, the parents kept) compares
  :meth:`Quality.goodness`, higher is better (an accuracy as it is, a loss
  negated);
* the score's regulated factor and validity (:func:`aihpc.scoring.score.compute_score`)
  and the quality fields of results.json's ``score`` (:meth:`Quality.score_fields`).

Everything in a report that reads, ranks, formats or plots a model's quality
goes through the task's :class:`ReportQuality`.  Each task's measure and its
report's words are the task's own: the image task's validation accuracy
(:mod:`aihpc.scoring.accuracy`, AIPerf's), the language task's validation
loss in nats per token (:mod:`aihpc.tasks.language.quality`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

T = TypeVar("T")


class Quality(Protocol):
    """A task's quality measure (the module docstring)."""

    @property
    def metric(self) -> str:
        """The epoch metric it reads ("val_accuracy", "val_loss")."""
        ...

    @property
    def label(self) -> str:
        """What it is, in a message ("accuracy", "validation loss")."""
        ...

    @property
    def higher_is_better(self) -> bool:
        """Whether a larger metric is a better model."""
        ...

    @property
    def best_key(self) -> str:
        """The key of the best value so far in the run's timeline and score ("best_accuracy",
        "best_val_loss")."""
        ...

    @property
    def trial_key(self) -> str:
        """The key of a trial's best value in results.json's trials ("best_val_accuracy",
        "best_val_loss")."""
        ...

    @property
    def resolution(self) -> float:
        """One standard error of the metric as the validation set measures it: a smaller
        difference between two values is not told apart from none (the plateau rule of
        :mod:`aihpc.runner.search.lifecycle`)."""
        ...

    def text(self, value: float | None) -> str:
        """A metric value as the console and summary print it ("-" for None)."""
        ...

    def goodness(self, value: float) -> float:
        """``value`` of the metric as a figure where higher is better."""
        ...

    def regulated(self, ops_per_second: float, best: float | None) -> float:
        """The regulated score of a run whose best metric value was ``best``."""
        ...

    def invalid_reason(self, best: float | None) -> str | None:
        """Why a run whose best value was ``best`` is invalid (None: it is valid)."""
        ...

    def score_fields(self, best: float | None) -> dict[str, Any]:
        """results.json's ``score`` fields of this quality for a best value ``best``."""
        ...


def section(data: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    """``data[key]`` where it is a mapping (a section of results.json), else an empty one: what a
    report quality's headline reads, tolerant of a file's shape."""
    value = data.get(key)
    return value if isinstance(value, Mapping) else {}


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
    def headline(self, results: Mapping[str, Any]) -> list[tuple[str, str, str]]:
        """The report's cards of the run's quality, from its results.json: (title, value,
        note) each."""

    @abstractmethod
    def thresholds(self, results: Mapping[str, Any]) -> list[tuple[float, str, str]]:
        """The lines a plot of the best value so far draws, (value, label, style): the validity
        threshold, and the best any model can reach where it is known (style ``"valid"``,
        ``"floor"``)."""
