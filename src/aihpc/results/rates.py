"""What a run's score is made of: results.json's ``score.work_seconds``, ``seed_rate`` and
``path_factor`` (:func:`rate_split`).

The score, the run's operations over its wall-clock seconds, is the product of three factors:

    score = work_seconds / wall_seconds × seed_rate × path_factor

* ``work_seconds / wall_seconds``: the trials at work on average: the seconds of training and
  evaluation (:data:`aihpc.records.messages.WORK_PHASES`) of every epoch, over the run's clock (a
  trial over several workers counts once).  The workers less what the harness cost them:
  set-up, compilation, waiting for a task.
* ``seed_rate``: the operations per second of the seed network's work, the run's first trial (a
  trial without a parent, id 0): the same network, data and settings in every run of one
  configuration, so a figure of the machine.
* ``path_factor``: the rate of all the run's work over the seed network's: which networks the
  search chose to train, and how much faster or slower than the seed network this machine runs
  them (the proxy screenings' operations, whose seconds are no epoch's, count here too).

Two runs of one configuration on one machine share the first two factors within the machine's
own variation.  The third follows the search's path: which trial leads after a few epochs, and so
what successive halving stops and what grows, depends on the order in which the workers' epochs
end.  Where two scores differ, the split says whether the machine or the search moved
(``benchmarks/score_repeatability.py`` measures each factor's spread over repeated runs).
"""

from __future__ import annotations

from typing import Any

from aihpc.records.messages import WORK_PHASES
from aihpc.records.rows import SEED_TRIAL
from aihpc.scoring.score import Score


def rate_split(store: Any, score: Score) -> dict[str, Any]:
    """The score's factors (the module docstring) from the run ``store``'s epochs:
    ``work_seconds``, ``seed_rate`` (None where the seed network's trial did no timed work) and
    ``path_factor`` (None where either rate is not known)."""
    work = seed_ops = seed_work = 0.0
    for e in store.iter_epochs():
        seconds = sum(e.phase_seconds.get(phase, 0.0) for phase in WORK_PHASES)
        work += seconds
        if e.trial_id == SEED_TRIAL:
            seed_ops += e.ops_train + e.ops_eval
            seed_work += seconds
    seed_rate = seed_ops / seed_work if seed_work > 0 and seed_ops > 0 else None
    path = score.ops / work / seed_rate if seed_rate is not None and work > 0 else None
    return {"work_seconds": work, "seed_rate": seed_rate, "path_factor": path}
