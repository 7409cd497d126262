"""How far a run's search got above the seed network trained in the same run: results.json's
``score.seed_only_*``, ``search_gain`` and ``best_lineage_epochs`` (:func:`seed_only`).

The comparison is with the trials without a parent (the seed network trained afresh: the run's
first trial, and every trial of strategies "none" and "seed") that trained as far as their own
rules let them (:data:`aihpc.records.rows.TRAINED_OUT`: to their epoch budget, their plateau,
epochs without improving, or the deadline).  A seed that successive halving stopped beside its
peers after an epoch or two says nothing of what the seed reaches: its lineage trains on in its
children, and the run's best would look far above a seed that never trained.  Where no trial
without a parent trained out, no gain is given, and ``seed_only_end`` says how the best of them
ended.
"""

from __future__ import annotations

from typing import Any

from aihpc.records.messages import EpochStatus
from aihpc.records.rows import TRAINED_OUT, TrialRow
from aihpc.scoring.score import Score


def seed_only(store: Any, score: Score) -> dict[str, Any]:
    """How far the search got above the seed network trained afresh, in the same run (the module
    docstring): ``seed_only_best``, the best validation value of the trials without a parent that
    trained out (where none did, of all of them), ``seed_only_trial`` the first to reach it,
    ``seed_only_end`` how that trial ended (:class:`aihpc.records.rows.TrialEnd`), and
    ``search_gain`` the run's best less it, in the quality's units where higher is better
    (accuracy as a fraction; a loss in nats per token, the seed-only loss less the run's best),
    None where that trial did not train out.  All None where no trial without a parent finished
    an evaluation.

    And the training behind each side: ``seed_only_epochs``, the epochs the seed-only trial had
    trained when it reached its best, and ``best_lineage_epochs``, those along the lineage of the
    first trial to reach the run's best value (its ancestors' before its first epoch, and its own
    up to that one); None where not known (a store from before lineages were recorded)."""
    metric, sign = ("val_loss", -1.0) if score.is_loss else ("val_accuracy", 1.0)
    roots: dict[int, TrialRow] = {r.id: r for r in store.trials() if r.parent is None}
    before = store.lineage_epochs()
    seeds: dict[bool, tuple[float, int, int]] = {}  # value, trial, epoch; by whether it trained out
    best: tuple[float, int | None] | None = None  # value, epochs along its lineage
    for e in store.iter_epochs():
        value = e.metrics.get(metric) if e.status == EpochStatus.OK else None
        if value is None:
            continue
        root = roots.get(e.trial_id)
        if root is not None:
            out = root.end() in TRAINED_OUT
            if out not in seeds or sign * value > sign * seeds[out][0]:
                seeds[out] = (value, e.trial_id, e.epoch)
        if best is None or sign * value > sign * best[0]:
            lineage = before.get(e.trial_id)
            best = (value, None if lineage is None else lineage + e.epoch)
    seed = seeds.get(True) or seeds.get(False)
    run_best = score.best_val_loss if score.is_loss else score.best_accuracy
    trained_out = seeds.get(True)
    gain = None if trained_out is None or run_best is None else sign * (run_best - trained_out[0])
    return {
        "seed_only_best": None if seed is None else seed[0],
        "seed_only_trial": None if seed is None else seed[1],
        "seed_only_end": None if seed is None else roots[seed[1]].end().value,
        "search_gain": gain,
        "seed_only_epochs": None if seed is None else seed[2],
        "best_lineage_epochs": None if best is None else best[1],
    }
