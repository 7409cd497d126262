"""How a report writes a classification task's accuracy (aihpc.tasks.quality.ACCURACY): its cards
and plot lines read the run's score and data records."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from aihpc.records.run_data import ImageDataRecord
from aihpc.records.score import ScoreRecord
from aihpc.results.read import decode_results
from aihpc.tasks.quality import ACCURACY

IMAGE = Path(__file__).parents[1] / "report" / "fixtures" / "results_v1.json"


def _score(doc: dict[str, Any]) -> ScoreRecord:
    """The score of results.json ``doc`` (an early file's, read as every version is)."""
    return decode_results(json.dumps(doc).encode(), "a test's results").head().score


def _data(ceiling: dict[str, float] | None) -> ImageDataRecord:
    return ImageDataRecord(
        name="synthetic",
        input_shape=(3, 16, 16),
        num_classes=50,
        num_train=9600,
        num_val=2400,
        max_params=2_000_000,
        description="synthetic images",
        generator=None,
        ceiling=ceiling,
    )


def test_the_cards_show_the_error_and_the_best_beside_the_minimum_and_the_ceiling() -> None:
    score = _score(json.loads(IMAGE.read_text()))
    cards = ACCURACY.headline(score, _data({"oracle_accuracy": 0.9894}))
    assert cards == [
        ("Error", "2.78%", ""),
        ("Best accuracy", "97.22%", "minimum 50% · task ceiling 98.9%–100%"),
    ]
    assert ACCURACY.headline(score, _data(None))[1][2] == "minimum 50%"
    assert ACCURACY.headline(score, None)[1][2] == "minimum 50%"


def test_the_plot_draws_the_minimum_of_a_valid_run() -> None:
    doc = json.loads(IMAGE.read_text())
    assert ACCURACY.thresholds(_score(doc), None) == [(0.5, "min accuracy 50%", "valid")]
    doc["score"]["min_accuracy"] = None
    assert ACCURACY.thresholds(_score(doc), None) == []
