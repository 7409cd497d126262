"""Is a task inside what the matcher was calibrated on?

Every task and candidate feature of :mod:`aihpc.recommend.matcher` (not
the products, which follow from them) must lie within the range the
calibration rows spanned, widened by :data:`TOLERANCE` of that range on
either side.  A task with any feature outside -- its own, or one of its
candidates' -- is *out of domain*: the matcher would extrapolate, so
:mod:`aihpc.recommend.ranking` ranks it by synflow alone instead and
says why in one line (:func:`describe`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from aihpc.recommend.matcher import CANDIDATE_FEATURES, FEATURES, TASK_FEATURES, Matcher
from aihpc.records.kinds_recommend import OutsideRecord

#: How far past the calibrated range a feature may go, as a fraction of the range.
TOLERANCE = 0.1

#: Plain words for each checked feature, and how to show its value (from the feature).
_SHOWN: dict[str, tuple[str, Callable[[float], str]]] = {
    "probe_error": ("random-feature probe error", lambda v: f"{v:.2f}"),
    "n3": ("1-NN error N3", lambda v: f"{v:.2f}"),
    "n1": ("boundary fraction N1", lambda v: f"{v:.2f}"),
    "log_f1": ("Fisher ratio F1", lambda v: f"{10**v - 1:.3g}"),
    "log_t2": ("samples per input value T2", lambda v: f"{10**v:.3g}"),
    "log_dimension": ("input values C*H*W", lambda v: f"{10**v:.0f}"),
    "log_classes": ("classes", lambda v: f"{10**v:.0f}"),
    "log_params": ("parameters", lambda v: f"{10**v:.3g}"),
    "log_ops": ("training ops per sample", lambda v: f"{10**v:.3g}"),
    "log_ops_per_value": ("training ops per input value", lambda v: f"{10**v:.3g}"),
    "log_synflow": ("log10 synflow", lambda v: f"{v:.3g}"),
    "log_snip": ("log10 snip", lambda v: f"{v:.3g}"),
    "log_grad_norm": ("log10 grad_norm", lambda v: f"{v:.3g}"),
    "jacob_cov": ("signed log10 jacob_cov", lambda v: f"{v:.3g}"),
    "naswot": ("NASWOT per sample", lambda v: f"{v:.3g}"),
}


@dataclass(frozen=True)
class Outside:
    """One feature outside the calibrated range: for the task, or for a named candidate."""

    feature: str
    value: float
    low: float
    high: float
    candidate: str | None = None

    def __str__(self) -> str:
        words, show = _SHOWN[self.feature]
        who = f" ({self.candidate})" if self.candidate else ""
        return f"{words}{who} {show(self.value)} not in {show(self.low)}..{show(self.high)}"

    def to_record(self) -> OutsideRecord:
        return OutsideRecord(
            feature=self.feature,
            value=self.value,
            low=self.low,
            high=self.high,
            candidate=self.candidate,
        )


def check(matcher: Matcher, rows: np.ndarray, names: list[str]) -> list[Outside]:
    """Features of ``rows`` (one per candidate, named) outside the matcher's widened range;
    a task feature is reported once, a candidate feature per candidate."""
    out: list[Outside] = []
    for feature in TASK_FEATURES + CANDIDATE_FEATURES:
        j = FEATURES.index(feature)
        lo, hi = matcher.lower[j], matcher.upper[j]
        pad = TOLERANCE * (hi - lo)
        bad = np.flatnonzero((rows[:, j] < lo - pad) | (rows[:, j] > hi + pad))
        if feature in TASK_FEATURES:
            bad = bad[:1]
        out += [
            Outside(
                feature, float(rows[i, j]), lo, hi, None if feature in TASK_FEATURES else names[i]
            )
            for i in bad
        ]
    return out


def describe(outside: list[Outside], limit: int = 3) -> str:
    """One line: the task is inside the calibration, or which features are not."""
    if not outside:
        return "inside the calibrated domain (every task and candidate feature within its range)"
    more = f", and {len(outside) - limit} more" if len(outside) > limit else ""
    return "outside the calibrated domain: " + "; ".join(map(str, outside[:limit])) + more
