"""Where a trial's hyperparameters come from: TPE, the task's defaults, or its parent (PBT).

With ``RunConfig.inherit_hparams`` a child that starts from its parent's
trained weights takes its parent's hyperparameters as well, perturbed
(Population Based Training's exploit and explore, Jaderberg et al. 2017):
the learning rate and the weight decay each multiplied by 0.8 or 1.25 at
random, within the search space's ranges; the batch size and everything
else kept.  TPE still proposes for trials without a parent, and is told
every trial's result (an inherited trial's as a trial it did not draw,
:meth:`aihpc.nas.hpo.HyperparameterSearch.adopt`).

A trial records its hyperparameters' origin (:func:`origin`), which
results.json shows beside them.
"""

from __future__ import annotations

import dataclasses
import random

from aihpc.nas.tpe_study import SearchSpace
from aihpc.records.trial import Hyperparameters

PERTURBED = ("lr", "weight_decay")  # the hyperparameters a child perturbs
FACTORS = (0.8, 1.25)  # each multiplied by one of these, drawn with equal chances
TPE = "tpe"  # drawn by TPE
DEFAULT = "default"  # the task's defaults (strategy "seed")


def origin(parent: int | None) -> str:
    """The origin of a trial's hyperparameters inherited from trial ``parent``; of one drawn by
    TPE where ``parent`` is None."""
    return TPE if parent is None else f"inherited from trial {parent}"


def perturb(hp: Hyperparameters, rng: random.Random, space: SearchSpace) -> Hyperparameters:
    """``hp`` with each of :data:`PERTURBED` multiplied by one of :data:`FACTORS` (drawn from
    ``rng`` in that order), then held within ``space``'s range where it searches it."""
    bounds = {name: (low, high) for name, low, high, _ in space.floats}
    changed = {}
    for name in PERTURBED:
        value = getattr(hp, name) * rng.choice(FACTORS)
        low, high = bounds.get(name, (value, value))
        changed[name] = min(max(value, low), high)
    return dataclasses.replace(hp, **changed)
