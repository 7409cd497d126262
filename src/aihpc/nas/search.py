"""Search strategies: which finished trial a new child is morphed from.

The master asks a :class:`Strategy` for a parent whenever a worker is free;
the child is a random function-preserving morphism of that parent, starting
from the parent's trained weights.

The default is *regularised (aging) evolution* (Real et al., AAAI 2019):
the population is the ``population`` most recently finished trials — older
ones age out however good they were, which keeps the search exploring — and a
parent is the most accurate of ``tournament`` members drawn at random.  It
needs no model of the search space (AIPerf used Bayesian optimisation with an
edit-distance kernel, which serialises the master on a Gaussian-process fit),
costs microseconds per proposal, and works unchanged when results arrive out
of order from many workers.  ``random`` (a uniformly chosen trial of the same
window of the ``population`` most recently finished)
is the baseline any strategy should beat; ``none`` (no architecture search:
every trial retrains the seed network from a fresh initialisation, only its
hyperparameters searched) and ``seed`` (no search at all: the seed network
trained once per worker for the whole run, with the task's default
hyperparameters and one learning-rate schedule) the baselines that any search
must beat.  Neither chooses parents (:func:`make_strategy` gives None).
"""

from __future__ import annotations

import random
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass

from aihpc.base.errors import ConfigError


@dataclass(frozen=True)
class Candidate:
    """A finished trial as a strategy sees it: its id and best validation accuracy."""

    trial_id: int
    accuracy: float


class Strategy(ABC):
    """Chooses parents.  Contract: ``choose`` reads ``finished`` (oldest first)
    and returns one of its members, or ``None`` when it is empty; it never
    modifies it.  Called only from the master's thread."""

    @abstractmethod
    def choose(self, finished: Sequence[Candidate], rng: random.Random) -> Candidate | None: ...


class AgingEvolution(Strategy):
    def __init__(self, population: int, tournament: int) -> None:
        if not 1 <= tournament <= population:
            raise ConfigError(
                f"tournament must be in [1, population={population}], got {tournament}"
            )
        self.population = population
        self.tournament = tournament

    def choose(self, finished: Sequence[Candidate], rng: random.Random) -> Candidate | None:
        alive = list(finished[-self.population :])
        if not alive:
            return None
        contestants = rng.sample(alive, min(self.tournament, len(alive)))
        return max(contestants, key=lambda c: c.accuracy)


class RandomParent(Strategy):
    """A parent drawn uniformly from ``finished``: the master passes the same bounded window
    of recent trials as for evolution, whose weights it keeps
    (:mod:`aihpc.runner.search.parents`)."""

    def choose(self, finished: Sequence[Candidate], rng: random.Random) -> Candidate | None:
        return rng.choice(list(finished)) if finished else None


#: The strategies that choose no parent: every trial is the seed network.
NO_PARENTS = ("none", "seed")


def make_strategy(name: str, population: int, tournament: int) -> Strategy | None:
    """The strategy called ``name``; ``None`` for those of :data:`NO_PARENTS` (no architecture
    search)."""
    if name in NO_PARENTS:
        return None
    if name == "evolution":
        return AgingEvolution(population, tournament)
    if name == "random":
        return RandomParent()
    raise ConfigError(f"strategy must be one of evolution, random, none, seed, got {name!r}")
