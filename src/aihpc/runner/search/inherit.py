"""Where a trial's hyperparameters come from: TPE, the task's defaults, or its parent (PBT).

With ``RunConfig.inherit_hparams`` a child that starts from its parent's trained weights takes its
parent's hyperparameters as well, perturbed (Population Based Training's exploit and explore,
Jaderberg et al. 2017): the weight decay multiplied by 0.8 or 1.25 at random, within the search
space's range; the learning rate, the batch size and everything else kept — where the parent is
worth it (:func:`worth_inheriting`: PBT exploits the better members of its population
only); a child of a parent in the worse half draws TPE's instead. The run's first trial, the root
of the lineage most early children grow from, takes the task's default hyperparameters, and the
other roots of lineages at the run's start (the seed's children before it trained) take them
perturbed, as PBT starts its population: TPE's first suggestions are random draws, and a lineage
rooted in a bad one takes the worker it runs on for most of a short run. TPE still proposes for the
other trials without a parent, and is told every trial's result (an inherited trial's as a trial it
did not draw, :meth:`aihpc.nas.hpo.HyperparameterSearch.adopt`).

The learning rate is kept because a lineage anneals it on one schedule
(:mod:`aihpc.runner.search.lineage`), and the search keeps the lineages that lead early
(successive halving, the leader's forks): a lower rate tends to lead over a few epochs, whichever
rate is best over the run, so a perturbed rate drifts down along the lineages that win (PBT's
greedy selection, its known short-horizon bias).

A trial records its hyperparameters' origin (:func:`origin`), which results.json shows beside them.
"""

from __future__ import annotations

import dataclasses
import random

from aihpc.nas.search import Candidate
from aihpc.nas.tpe_study import SearchSpace
from aihpc.records.trial import Hyperparameters

PERTURBED = ("weight_decay",)  # the hyperparameters a child perturbs (the docstring)
FACTORS = (0.8, 1.25)  # each multiplied by one of these, drawn with equal chances
TPE = "tpe"  # drawn by TPE
DEFAULT = "default"  # the task's defaults (strategy "seed"; a search's first trial)
DEFAULT_PERTURBED = "default, perturbed"  # a lineage's root beside the seed's


def origin(parent: int | None) -> str:
    """The origin of a trial's hyperparameters inherited from trial ``parent``; of one drawn by
    TPE where ``parent`` is None."""
    return TPE if parent is None else f"inherited from trial {parent}"


def worth_inheriting(parent: int, finished: list[Candidate]) -> bool:
    """Whether a child of ``parent`` takes its hyperparameters: the parent is in the better half
    of ``finished`` (the trials a parent is chosen from, with their goodness: higher is better),
    its goodness at least their upper median (a parent not among them, or none finished: yes)."""
    mine = next((c.accuracy for c in finished if c.trial_id == parent), None)
    if mine is None:
        return True
    ranked = sorted(c.accuracy for c in finished)
    return mine >= ranked[len(ranked) // 2]


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
