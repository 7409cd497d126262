"""How a task's models are judged: the quality measure behind the search, the score and validity.

A task names one validation metric its epochs report; everything that ranks
or scores models reads it through a :class:`Quality`:

* the search (tournaments, TPE, early stopping, the parents kept) compares
  :meth:`Quality.goodness`, higher is better (an accuracy as it is, a loss
  negated);
* the score's regulated factor and validity (:func:`aihpc.scoring.score.compute_score`)
  and the quality fields of results.json's ``score`` (:meth:`Quality.score_fields`).

:class:`Accuracy` is the image task's (AIPerf's): regulated score = OPS x
|ln(1 - best accuracy)|, valid from ``min_accuracy``.  :class:`Loss` is the
language task's, in nats per token: regulated score = OPS x
ln((unigram - floor) / (best - floor)), the number of e-folds by which the
model cut the loss a context-free model leaves above the floor (0 at the
unigram loss, growing without bound towards the floor, as |ln(1 - accuracy)|
grows towards a perfect accuracy); valid at or below ``max_loss``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
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


@dataclass(frozen=True)
class Accuracy:
    """Validation accuracy, a fraction: the image task's quality.

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
class Loss:
    """Validation loss in nats per token: the language task's quality.

    ``floor`` is the best loss any model can reach on the validation tokens
    where the data's generative model is known (None: unknown, taken as 0 in
    the regulated score); ``unigram`` the loss of the best context-free
    model; ``max_loss`` the validity threshold.  The regulated factor's
    distance to the floor is held at ``resolution`` or more: the standard
    error of a mean over the validation tokens cannot tell a smaller gap
    from none, as an accuracy is capped at half a sample.
    """

    unigram: float
    max_loss: float
    floor: float | None
    resolution: float
    bytes_per_token: float | None = None  # 1 for byte-level text: nats/token / ln 2 = bits/byte
    metric: str = "val_loss"
    label: str = "validation loss"
    higher_is_better: bool = False
    best_key: str = "best_val_loss"
    trial_key: str = "best_val_loss"

    def text(self, value: float | None) -> str:
        return "-" if value is None else f"{value:.4f} nats/token"

    def goodness(self, value: float) -> float:
        return -value

    def regulated(self, ops_per_second: float, best: float | None) -> float:
        if best is None:
            return 0.0
        floor = self.floor or 0.0
        gap = max(best - floor, self.resolution)
        return ops_per_second * max(0.0, math.log((self.unigram - floor) / gap))

    def invalid_reason(self, best: float | None) -> str | None:
        if best is None:
            return "no trial finished an evaluation"
        if best > self.max_loss:
            return (
                f"best validation loss {best:.4f} nats/token is above the maximum "
                f"{self.max_loss:.4f}"
            )
        return None

    def score_fields(self, best: float | None) -> dict[str, Any]:
        bits = None
        if best is not None and self.bytes_per_token:
            bits = best / math.log(2) / self.bytes_per_token
        return {
            "best_accuracy": None,
            "error_percent": None,
            "min_accuracy": None,
            "best_val_loss": best,
            "max_val_loss": self.max_loss,
            "loss_floor": self.floor,
            "unigram_loss": self.unigram,
            "gap_to_floor": None if best is None or self.floor is None else best - self.floor,
            "bits_per_byte": bits,
        }
