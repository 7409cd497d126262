"""The language task's quality: validation loss in nats per token, and how a report writes it.

:class:`Loss`: regulated score = OPS x ln((unigram - floor) / (best - floor)),
the number of e-folds by which the model cut the loss a context-free model
leaves above the floor (0 at the unigram loss, growing without bound towards
the floor, as |ln(1 - accuracy)| grows towards a perfect accuracy); valid at
or below ``max_loss``.  :data:`LOSS`: the report's words for it (nats per
token, the floor, the gap to it, bits per byte of byte-level text, and the
next-token accuracy the epochs record beside it).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from aihpc.base.fmt import NA, as_number, format_value
from aihpc.records.codec import Record, value_or_none
from aihpc.records.run_data import LanguageDataRecord
from aihpc.records.score import ScoreRecord
from aihpc.tasks.base import other_fields
from aihpc.tasks.quality import ReportQuality


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


@dataclass(frozen=True)
class LossReport(ReportQuality):
    """How a report writes a loss: in nats per token, to four decimals."""

    def cell(self, value: Any) -> str:
        number = as_number(value)
        return NA if number is None else f"{number:.4f}"

    def brief(self, value: Any) -> str:
        number = as_number(value)
        return NA if number is None else f"{number:.3f}"

    def text(self, value: Any) -> str:
        number = as_number(value)
        return NA if number is None else f"{number:.4f} nats/token"

    def change(self, new: float, old: float) -> str:
        return f"{new - old:+.4f} nats/token"

    def plotted(self, value: float) -> float:
        return value

    def headline(self, score: ScoreRecord, data: Record | None) -> list[tuple[str, str, str]]:
        """The best validation loss beside the floor (the best loss any model can reach, where
        known), the gap to it, bits per byte (byte-level text), the maximum of a valid run, and
        the unigram loss the regulated score measures from."""
        best = score.best(self.best_key)
        floor = loss_floor(score, data)
        gap = value_or_none(score.gap_to_floor)
        if gap is None and best is not None and floor is not None:
            gap = best - floor
        notes = ["floor unknown" if floor is None else f"floor {floor:.4f}"]
        if gap is not None:
            notes.append(f"gap {gap:.4f}")
        bits = value_or_none(score.bits_per_byte)
        if bits is not None:
            notes.append(f"{bits:.3f} bits/byte")
        for value, word in ((score.max_val_loss, "maximum"), (score.unigram_loss, "unigram")):
            number = value_or_none(value)
            if number is not None:
                notes.append(f"{word} {number:.4f}")
        return [("Best validation loss", self.text(best), " · ".join(notes))]

    def thresholds(self, score: ScoreRecord, data: Record | None) -> list[tuple[float, str, str]]:
        lines = []
        most = value_or_none(score.max_val_loss)
        if most is not None:
            lines.append((most, f"max loss {most:.4f} (valid below)", "valid"))
        floor = loss_floor(score, data)
        if floor is not None:
            lines.append((floor, f"floor {floor:.4f} (best possible)", "floor"))
        return lines


def loss_floor(score: ScoreRecord, data: Record | None) -> float | None:
    """The lowest loss any model can reach on the run's data (the score's ``loss_floor``, else
    the data's ``floor``), None where unknown."""
    floor = value_or_none(score.loss_floor)
    if floor is None and isinstance(data, LanguageDataRecord):
        floor = data.floor
    return floor


def arch_rows(arch: Mapping[str, Any]) -> list[tuple[str, str]]:
    """A language model's blocks, width, context, vocabulary, and each block's heads and MLP
    width (:class:`aihpc.tasks.language.spec.LMSpec`), then its other fields."""
    blocks = [b for b in arch.get("blocks") or [] if isinstance(b, Mapping)]
    heads = ", ".join(format_value(b.get("heads")) for b in blocks) or NA
    rows = [
        ("blocks", format_value(len(blocks))),
        ("width", format_value(arch.get("width"))),
        ("context", f"{format_value(arch.get('context'))} tokens"),
        ("vocabulary", f"{format_value(arch.get('vocab_size'))} tokens"),
        ("heads per block", f"{heads} (head dim {format_value(arch.get('head_dim'))})"),
        ("MLP widths", ", ".join(format_value(b.get("mlp_hidden")) for b in blocks) or NA),
    ]
    shown = {"blocks", "width", "context", "vocab_size", "head_dim"}
    return rows + other_fields(arch, shown)


LOSS = LossReport(
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
    epoch_accuracy=True,
)
