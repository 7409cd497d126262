"""The score, as AIPerf defines it, from what the store recorded.

- OPS = all operations completed / wall seconds of the run.
- error = 100 − best validation accuracy in %.
- regulated score = OPS × |ln(1 − best accuracy)|: it rewards accuracy
  logarithmically in the error, as AIPerf does.  A validation set of n
  samples cannot tell an accuracy above 1 − 1/(2n) from 1, so the accuracy
  used here is capped there (otherwise a perfect score would be infinite).
- valid: the best accuracy reached ``min_accuracy``; otherwise the result is
  marked invalid with the reason.
- peak fraction: OPS / measured matrix-multiply peak of the devices used.

Wall seconds run from the first start of the run to its last stop,
downtime of a killed master included: the clock never stops, so an
interruption can only lower a score.
"""

from __future__ import annotations

import math
from typing import Any


def compute_score(
    ops: int,
    wall_seconds: float,
    best_accuracy: float | None,
    val_samples: int,
    min_accuracy: float,
    peak_flops_per_s: float | None = None,
) -> dict[str, Any]:
    """The score dictionary written to results.json (see module docstring)."""
    ops_per_second = ops / wall_seconds if wall_seconds > 0 else 0.0
    best = best_accuracy if best_accuracy is not None else 0.0
    capped = min(best, 1.0 - 0.5 / max(val_samples, 1))
    regulated = ops_per_second * abs(math.log(1.0 - capped))
    reason = None
    if best_accuracy is None:
        reason = "no trial finished an evaluation"
    elif best < min_accuracy:
        reason = f"best accuracy {best:.4f} is below the minimum {min_accuracy:.4f}"
    return {
        "ops": int(ops),
        "wall_seconds": wall_seconds,
        "ops_per_second": ops_per_second,
        "best_accuracy": best_accuracy,
        "error_percent": 100.0 * (1.0 - best),
        "regulated_score": regulated,
        "min_accuracy": min_accuracy,
        "valid": reason is None,
        "invalid_reason": reason,
        "peak_flops_per_s": peak_flops_per_s,
        "peak_fraction": ops_per_second / peak_flops_per_s if peak_flops_per_s else None,
    }


def wall_seconds(segments: list[tuple[float, float]]) -> float:
    """First start to last stop; gaps between segments (downtime) included."""
    if not segments:
        return 0.0
    return max(stop for _, stop in segments) - segments[0][0]


def active_seconds(segments: list[tuple[float, float]]) -> float:
    """Seconds a master was running: what the run's time budget counts."""
    return sum(stop - start for start, stop in segments)
