"""Validation accuracy as a task's quality (AIPerf's): the image task's and any other
classification task's.

:class:`Accuracy`: regulated score = OPS x |ln(1 - best accuracy)|, valid from
``min_accuracy``.  The report's words for it are
:data:`aihpc.tasks.quality.ACCURACY`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any


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
