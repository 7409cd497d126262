"""The score, as AIPerf defines it, from what the store recorded.

- OPS = all operations completed / wall seconds of the run.
- The run's quality (:mod:`aihpc.scoring.quality`): for images the best
  validation accuracy, error = 100 − it in %, regulated score = OPS ×
  |ln(1 − best accuracy)| (AIPerf's: it rewards accuracy logarithmically in
  the error; a validation set of n samples cannot tell an accuracy above
  1 − 1/(2n) from 1, so the accuracy is capped there), valid from
  ``min_accuracy``; for language models the best validation loss, regulated
  score = OPS × ln((unigram − floor) / (loss − floor)), valid up to
  ``max_val_loss``.  An invalid result says why.
- peak fraction: OPS / the measured peak of the devices used (the best of the
  dense kernels the workload calls, :mod:`aihpc.roofline.peak`); above 1 the
  measured peak is unreliable (the run did more than the peak said the
  machine could), and ``peak_warning`` says so.
- nominal peak fraction: OPS / the nominal peak of the same devices (what
  their silicon can do, :mod:`aihpc.roofline.nominal`): what language-model
  papers call model FLOPs utilisation.  None where the nominal peak is unknown.

Wall seconds run from the first start of the run to its last stop,
downtime of a killed master included: the clock never stops, so an
interruption can only lower a score.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any

from aihpc.base.errors import DataError
from aihpc.scoring.quality import Quality


@dataclass(frozen=True)
class Score:
    """The score of a run: results.json's ``score`` block, less the trial tallies it adds."""

    ops: int
    wall_seconds: float
    ops_per_second: float
    best_accuracy: float | None  # None for language models (and for images before any evaluation)
    error_percent: float | None  # None for language models
    regulated_score: float
    min_accuracy: float | None  # None for language models
    valid: bool
    invalid_reason: str | None
    peak_flops_per_s: float | None
    peak_fraction: float | None
    # added after the first results files (absent there, and not compared by verify)
    nominal_peak_flops_per_s: float | None = None
    nominal_peak_fraction: float | None = None
    peak_warning: str | None = None
    # a language model's quality (aihpc.scoring.quality.Loss); absent from an image run's score
    best_val_loss: float | None = None
    max_val_loss: float | None = None
    loss_floor: float | None = None
    unigram_loss: float | None = None
    gap_to_floor: float | None = None
    bits_per_byte: float | None = None

    #: The fields results files written before them lack.
    ADDED_LATER = ("nominal_peak_flops_per_s", "nominal_peak_fraction", "peak_warning")
    #: A language model's fields: in its score only.
    LOSS_FIELDS = (
        "best_val_loss",
        "max_val_loss",
        "loss_floor",
        "unigram_loss",
        "gap_to_floor",
        "bits_per_byte",
    )

    def __post_init__(self) -> None:
        if self.ops < 0:
            raise DataError(f"a score's ops must be >= 0, got {self.ops!r}")
        if self.wall_seconds < 0:
            raise DataError(f"a score's wall_seconds must be >= 0, got {self.wall_seconds!r}")
        if self.best_accuracy is not None and not 0.0 <= self.best_accuracy <= 1.0:
            raise DataError(
                f"a score's best_accuracy must be in [0, 1], got {self.best_accuracy!r}"
            )
        if self.valid != (self.invalid_reason is None):
            raise DataError(
                f"a score is valid exactly when it has no invalid_reason, got valid={self.valid!r} "
                f"with invalid_reason={self.invalid_reason!r}"
            )

    @property
    def is_loss(self) -> bool:
        """Whether this is a language model's score (a loss), not an image run's (an accuracy)."""
        return self.max_val_loss is not None

    def to_dict(self) -> dict[str, Any]:
        """The keys of results.json's ``score`` block: 14 for an image run (the loss fields
        left out), 20 for a language model's."""
        values = asdict(self)
        if not self.is_loss:
            for name in self.LOSS_FIELDS:
                del values[name]
        return values

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Score:
        """The score from results.json's ``score`` block (its trial tallies are not the score's;
        the fields of :data:`ADDED_LATER` and :data:`LOSS_FIELDS` read as None where a file
        lacks them)."""
        optional = (*cls.ADDED_LATER, *cls.LOSS_FIELDS)
        return cls(
            **{
                f.name: data[f.name]
                for f in fields(cls)
                if f.name in data or f.name not in optional
            }
        )


def compute_score(
    ops: int,
    wall_seconds: float,
    best: float | None,
    quality: Quality,
    peak_flops_per_s: float | None = None,
    nominal_peak_flops_per_s: float | None = None,
) -> Score:
    """The score of a run whose best validation metric was ``best`` (the module docstring)."""
    ops_per_second = ops / wall_seconds if wall_seconds > 0 else 0.0
    fraction = ops_per_second / peak_flops_per_s if peak_flops_per_s else None
    reason = quality.invalid_reason(best)
    return Score(
        ops=int(ops),
        wall_seconds=wall_seconds,
        ops_per_second=ops_per_second,
        regulated_score=quality.regulated(ops_per_second, best),
        valid=reason is None,
        invalid_reason=reason,
        peak_flops_per_s=peak_flops_per_s,
        peak_fraction=fraction,
        nominal_peak_flops_per_s=nominal_peak_flops_per_s,
        nominal_peak_fraction=(
            ops_per_second / nominal_peak_flops_per_s if nominal_peak_flops_per_s else None
        ),
        peak_warning=peak_warning(fraction),
        **quality.score_fields(best),
    )


def peak_warning(fraction: float | None) -> str | None:
    """The warning a share of the measured peak above 100 % carries (None at or below it)."""
    if fraction is None or fraction <= 1.0:
        return None
    return (
        f"the score is {100 * fraction:.1f} % of the measured peak: the run did more than the "
        "peak measured, so that peak is unreliable (a faster kernel than any measured, or a "
        "machine slowed while it was measured)"
    )


@dataclass(frozen=True)
class Segment:
    """One stretch a master ran, in seconds since the epoch: opened as it starts, stopped as it
    ends."""

    start: float
    stop: float

    def __post_init__(self) -> None:
        if self.stop < self.start:
            raise DataError(
                f"a segment stops at or after it starts, got {self.start!r}..{self.stop!r}"
            )

    def to_dict(self, t0: float = 0.0) -> dict[str, float]:
        """results.json's form: ``t_start`` and ``t_end`` in seconds since ``t0`` (the run's
        start)."""
        return {"t_start": self.start - t0, "t_end": self.stop - t0}

    @classmethod
    def from_dict(cls, data: dict[str, float], t0: float = 0.0) -> Segment:
        """The segment of results.json's ``t_start``/``t_end`` (seconds since ``t0``)."""
        return cls(start=data["t_start"] + t0, stop=data["t_end"] + t0)


def wall_seconds(segments: list[Segment]) -> float:
    """First start to last stop; gaps between segments (downtime) included."""
    if not segments:
        return 0.0
    return max(s.stop for s in segments) - segments[0].start


def active_seconds(segments: list[Segment]) -> float:
    """Seconds a master was running: what the run's time budget counts."""
    return sum(s.stop - s.start for s in segments)
