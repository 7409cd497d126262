"""What a run's score is made of (aihpc.results.rates): its factors from the run store's epochs,
against the same figures summed from results.json's trials, and the summary's lines."""

from __future__ import annotations

import json
import math
from typing import Any

from aihpc.records.messages import WORK_PHASES
from aihpc.records.store import RunStore
from aihpc.results.rates import rate_split
from aihpc.results.read import read_run_head
from aihpc.runner.display.summary import rate_lines
from fixture_run import FIXTURES, results_head

RUN = FIXTURES / "run"


def test_the_factors_multiply_to_the_score_and_match_the_trials_sums() -> None:
    doc = json.loads((RUN / "results.json").read_text())
    score = read_run_head(RUN / "results.json").score.score()
    parts = rate_split(RunStore.read_only(RUN), score)
    # results.json's trials sum their epochs' phases and operations: an independent tally
    work = sum(t["phase_seconds"].get(p, 0.0) for t in doc["trials"] for p in WORK_PHASES)
    seed = doc["trials"][0]
    seed_work = sum(seed["phase_seconds"].get(p, 0.0) for p in WORK_PHASES)
    assert math.isclose(parts["work_seconds"], work, rel_tol=1e-12)
    assert math.isclose(parts["seed_rate"], seed["ops"]["total"] / seed_work, rel_tol=1e-12)
    product = parts["work_seconds"] / score.wall_seconds * parts["seed_rate"] * parts["path_factor"]
    assert math.isclose(product, score.ops_per_second, rel_tol=1e-12)


def _head(**fields: float | None) -> Any:
    doc = json.loads((RUN / "results.json").read_text())
    doc["score"] = {**doc["score"], "wall_seconds": 10.0, **fields}
    return results_head(doc)


def test_the_summary_gives_the_three_factors_and_nothing_for_older_files() -> None:
    head = _head(work_seconds=19.5, seed_rate=2.5e10, path_factor=1.07)
    assert rate_lines(head) == [
        "  score's parts    1.95 trials at work × 25.0 GOPS, the seed network's rate",
        "                   × 1.07, the rate of the networks searched over the seed's",
    ]
    unknown = _head(work_seconds=0.0, seed_rate=None, path_factor=None)
    assert rate_lines(unknown) == [
        "  score's parts    not known: the seed network's trial did no timed work"
    ]
    assert rate_lines(_head()) == []
