"""How a task's models are judged: the quality measure behind the search, the score and validity.

A task names one validation metric its epochs report; everything that ranks
or scores models reads it through a :class:`Quality`:

* the search (tournaments, TPE, early stopping, the parents kept) compares
  :meth:`Quality.goodness`, higher is better (an accuracy as it is, a loss
  negated);
* the score's regulated factor and validity (:func:`aihpc.scoring.score.compute_score`)
  and the quality fields of results.json's ``score`` (:meth:`Quality.score_fields`).

Everything in a report that reads, ranks, formats or plots a model's quality
goes through the task's :class:`aihpc.tasks.quality.ReportQuality`.  Each
task's measure and its report's words are the task's own: a classification
task's validation accuracy (:mod:`aihpc.scoring.accuracy`, AIPerf's), the
language task's validation loss in nats per token
(:mod:`aihpc.tasks.language.quality`).
"""

from __future__ import annotations

from typing import Any, Protocol


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
