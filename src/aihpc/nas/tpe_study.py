"""Optuna's TPE sampler over a bounded window of trials: the study each search process runs.

:class:`WindowedStudy` bounds the study the sampler sees: past a limit it is
rebuilt from the best and the most recent finished trials
(:class:`BestAndRecent`), so an ask costs the same at trial 100 and at trial
100,000.  :mod:`aihpc.nas.hpo` runs it in child processes
(:mod:`aihpc.nas.hpo_process`) for the master.
"""

from __future__ import annotations

import heapq
import logging
import random
from collections import deque
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

T = TypeVar("T")

# Finished trials a rebuilt study holds: the WINDOW // 2 best and the
# WINDOW // 2 most recent.  TPE splits trials into a "good" group of at most 25
# (Optuna's default_gamma) and the rest, so 64 best keep the good group made of
# the best trials ever seen, and 64 recent keep the rest current.  Measured on
# this 2-core machine (multivariate, 64 trials running, a synthetic objective
# peaking at lr = 0.03): an Optuna ask costs 3.8 ms at 32 trials, 5.0 ms at 128,
# 7.4 ms at 256 and 11.9 ms at 512; over 1,500 trials the mean regret of the
# last 500 suggestions was 0.0022 with a window of 64, 0.0011 with 128, 0.0006
# with 256, and 0.005 with no window at all (16 ms an ask).  128 halves the
# regret of 64 for ~25 % more time per ask (4.2 against 3.3 ms, ask and tell).
WINDOW = 128


@dataclass(frozen=True)
class SearchSpace:
    """The hyperparameters a task's trials draw, as plain values (a search process, started by
    "spawn", gets it pickled): ``floats`` (name, low, high, log-scale), ``choices`` (name,
    values) and ``fixed`` (name, value), the last added to every suggestion as they are."""

    floats: tuple[tuple[str, float, float, bool], ...]
    choices: tuple[tuple[str, tuple[Any, ...]], ...] = ()
    fixed: tuple[tuple[str, Any], ...] = ()

    def distributions(self) -> dict[str, Any]:
        """The Optuna distributions of the searched hyperparameters."""
        from optuna import distributions as D

        drawn: dict[str, Any] = {
            name: D.FloatDistribution(low, high, log=log) for name, low, high, log in self.floats
        }
        drawn.update((name, D.CategoricalDistribution(list(v))) for name, v in self.choices)
        return drawn


class BestAndRecent(Generic[T]):
    """The finished trials a rebuilt study holds: the ``window // 2`` best and the
    ``window - window // 2`` most recent (a trial may be both), so never more than ``window``.

    Each is an item (an Optuna FrozenTrial in the child, params and accuracy in
    the master) with its accuracy.  Of equal accuracies the more recent is kept.
    """

    def __init__(self, window: int) -> None:
        self._recent: deque[tuple[int, T]] = deque(maxlen=window - window // 2)
        self._best: list[tuple[float, int, T]] = []  # (accuracy, sequence, item), a min-heap
        self._best_size = window // 2
        self._added = 0  # the next item's sequence number: items added, oldest first

    def add(self, accuracy: float, item: T) -> None:
        """Keep a finished trial among the recent and, if good enough, among the best."""
        sequence = self._added
        self._added += 1
        self._recent.append((sequence, item))
        best = (accuracy, sequence, item)
        if len(self._best) < self._best_size:
            heapq.heappush(self._best, best)
        elif best > self._best[0]:
            heapq.heapreplace(self._best, best)

    def items(self) -> list[T]:
        """The kept items, oldest first."""
        kept = dict(self._recent)
        kept.update({sequence: item for _, sequence, item in self._best})
        return [kept[sequence] for sequence in sorted(kept)]


@dataclass(frozen=True)
class _Asked:
    """A trial asked and not yet told: which study it came from, and its Optuna number there."""

    generation: int
    optuna_number: int
    params: dict[str, Any]


class WindowedStudy:
    """An Optuna TPE study that never holds more than ``window * 3 // 2`` trials.

    Trials are named by tokens this class assigns (stable across rebuilds),
    not by Optuna's numbers, which restart with every rebuilt study.  A trial
    asked from a study that has since been replaced is added to the current
    one as a frozen trial when it is told.  Deterministic for a given seed and
    sequence of calls; single-threaded.
    """

    def __init__(
        self, seed: int, distributions: dict[str, Any], window: int = WINDOW, stream: int = 0
    ) -> None:
        import optuna

        if window < 2:
            raise ValueError(f"window must be >= 2, got {window}")
        optuna.logging.set_verbosity(logging.WARNING)
        self._optuna = optuna
        self.seed = seed
        # several studies of one seed (one per search process) draw different numbers
        self.stream = stream
        self.distributions = distributions
        # rebuilt on reaching this many trials (running ones included), every
        # 32 to 64 asks: a rebuild (128 frozen trials added, ~12 ms) costs ~0.3 ms
        # an ask, while a larger slack would add ~0.017 ms an ask per extra trial
        self.limit = window + window // 2
        self.generation = 0  # how many times the study has been rebuilt
        # finished trials as Optuna FrozenTrials, made once and re-added at every rebuild
        self._kept: BestAndRecent[Any] = BestAndRecent(window)
        self._asked: dict[int, _Asked] = {}
        self._next_token = 0
        self.study = self._new_study([])

    @property
    def size(self) -> int:
        """Trials in the current study, running ones included."""
        return len(self.study.get_trials(deepcopy=False))

    def ask(self) -> tuple[int, dict[str, Any]]:
        """A new trial: its token and its hyperparameters."""
        if self.size >= self.limit:
            self._rebuild()
        trial = self.study.ask(self.distributions)
        token = self._next_token
        self._next_token += 1
        self._asked[token] = _Asked(self.generation, trial.number, trial.params)
        return token, dict(trial.params)

    def tell(self, token: int, accuracy: float | None) -> None:
        """The result of an asked trial: its accuracy, or ``None`` if it failed."""
        asked = self._asked.pop(token)
        if asked.generation != self.generation:
            self.add(asked.params, accuracy)
        elif accuracy is None:
            self.study.tell(asked.optuna_number, state=self._optuna.trial.TrialState.FAIL)
        else:
            self._kept.add(accuracy, self.study.tell(asked.optuna_number, accuracy))

    def add(self, params: dict[str, Any], accuracy: float | None) -> None:
        """A trial finished elsewhere (an earlier segment, a replaced study), as a frozen trial.

        A failed trial is not added: TPE reads only complete (and, with
        constant liar, running) trials, so it would take a place in the window
        and tell the sampler nothing.
        """
        if accuracy is None:
            return
        trial = self._frozen(params, accuracy)
        self._kept.add(accuracy, trial)
        if self.size >= self.limit:
            self._rebuild()  # the rebuilt study holds this trial: it is the most recent
        else:
            self.study.add_trial(trial)

    def _rebuild(self) -> None:
        """Replace the study with one holding only the best and the recent finished trials.

        Trials still running in the old study are dropped; their tells add
        them as frozen trials.  A fresh sampler, seeded from the seed and the
        generation, keeps the sequence deterministic.
        """
        self.generation += 1
        self.study = self._new_study(self._kept.items())

    def _new_study(self, trials: list[Any]) -> Any:
        optuna = self._optuna
        # random.Random seeds from a string through SHA-512: distinct seeds per
        # (seed, generation), within the 32 bits numpy's RandomState takes
        name = (
            f"{self.seed}/{self.generation}"
            if self.stream == 0
            else f"{self.seed}/{self.stream}/{self.generation}"
        )
        seed = random.Random(name).getrandbits(32)
        sampler = optuna.samplers.TPESampler(
            seed=seed,
            n_startup_trials=8,
            # many trials run at once: running ones count as bad, so the
            # sampler does not propose the same point to every idle worker
            constant_liar=True,
            # one joint model of all parameters: correlations such as lr with
            # batch size, and faster asks than univariate ones
            multivariate=True,
        )
        study = optuna.create_study(direction="maximize", sampler=sampler)
        study.add_trials(trials)
        return study

    def _frozen(self, params: dict[str, Any], accuracy: float) -> Any:
        return self._optuna.trial.create_trial(
            params=params, distributions=self.distributions, value=accuracy
        )
