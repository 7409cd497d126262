"""When a trial ends: the master's decision after each of its finished epochs.

A trial trains epoch after epoch until one of these, checked in this order
(:func:`decide`):

1. its epoch budget is spent (``COMPLETED``);
2. asynchronous successive halving (``RunConfig.early_stop``; ASHA, Li et
   al. 2018): at a *rung* of 1, 2, 4, 8 ... epochs along its lineage (its
   own and its ancestors', :mod:`aihpc.runner.search.lineage`), its
   validation value is compared with those of every trial that reached the
   same rung before it; with at least ``MIN_PEERS`` others there, a trial
   outside the better half (its rank among the n trials there, ties in its
   favour, above n // 2: ASHA's promotion rule with a reduction factor of 2,
   as Optuna's ``SuccessiveHalvingPruner`` applies it) is stopped
   (``EARLY_STOPPED``, the reason says where), and its worker trains a
   child of a leader;
3. its validation curve flattens (``RunConfig.grow_on_plateau``): its last
   :data:`PLATEAU_EPOCHS` epochs together improved its best value by less
   than the metric's resolution (one standard error,
   :attr:`aihpc.scoring.quality.Quality.resolution`): more epochs of this
   size no longer pay, so it ends (``COMPLETED``, the reason says so) and
   becomes a parent the strategy can choose, whose child grows
   (:mod:`aihpc.runner.search.growth`);
4. without the plateau rule, ``patience`` epochs without a better value
   (``EARLY_STOPPED``); with it, the plateau decides instead (a trial
   :data:`PLATEAU_EPOCHS` epochs past its best is at its plateau, and one
   that is fewer past it, after a noisy epoch, may still be rising).

With ``RunConfig.keep_leader`` (:func:`keeps_on`) and more than one worker, the run's leader
(:func:`aihpc.runner.search.fork.leader`: the running trial with the best
value, ahead of every finished one) is *kept*: neither its plateau (3) nor
its epoch budget (1) ends it, so it trains on to the deadline on its
schedule, as the seed trained once does, until another trial leads.  Its
flattened curve (:func:`flattened`) makes the next new trial a child grown
from its latest weights instead of a copy (the master's); that child trains
on another worker, beside it.  A lone worker keeps nothing: its leader's
plateau is the only moment it can grow.

The mechanisms apply to the strategies that morph (evolution, random):
strategy "none" trains as it always did (its trials' own schedules and
drawn budgets), and strategy "seed" trains one trial per worker until the
deadline (:class:`Mechanisms`).
"""

from __future__ import annotations

from bisect import bisect_right, insort
from collections.abc import Callable
from dataclasses import dataclass

from aihpc.base.config import RunConfig
from aihpc.nas.search import NO_PARENTS
from aihpc.records.rows import TrialEnd, TrialStatus
from aihpc.runner.search.trials import LiveTrial, epoch_budget

MIN_PEERS = 1  # other trials at a rung before ASHA stops anyone there
# The plateau rule's window.  One epoch's validation value is noisy by about one resolution, so
# a window of one epoch ends a trial on noise while it still gains a little each epoch; the rule
# asks what the last PLATEAU_EPOCHS epochs gained together, and so ends a trial once its gain per
# epoch falls under a third of the resolution.  A trial trains at least PLATEAU_EPOCHS + 1
# epochs at each size before its plateau can end it.
PLATEAU_EPOCHS = 3


@dataclass(frozen=True)
class Mechanisms:
    """Which of the search's mechanisms a run applies (the module docstring)."""

    lineage_schedule: bool
    inherit_hparams: bool
    grow_on_plateau: bool
    early_stop: bool
    fork_leader: bool
    keep_leader: bool
    until_deadline: bool  # strategy "seed": a trial ends only at the deadline

    @classmethod
    def of(cls, config: RunConfig) -> Mechanisms:
        morphs = config.search.strategy not in NO_PARENTS
        seed = config.search.strategy == "seed"
        return cls(
            lineage_schedule=seed or (morphs and config.search.lineage_schedule),
            inherit_hparams=morphs and config.search.inherit_hparams,
            grow_on_plateau=morphs and config.search.grow_on_plateau,
            early_stop=morphs and config.search.early_stop,
            fork_leader=morphs and config.search.fork_leader,
            keep_leader=morphs and config.search.keep_leader and keeps_on(config),
            until_deadline=seed,
        )


def keeps_on(config: RunConfig) -> bool:
    """Whether a run can keep its leader (``keep_leader``): its plateau is what makes a child
    grow (``grow_on_plateau``), and its schedule runs to the deadline, however many epochs it
    trains (``lineage_schedule``; a trial's own schedule ends with its epoch budget)."""
    return config.search.grow_on_plateau and config.search.lineage_schedule


def trial_budget(
    config: RunConfig, mechanisms: Mechanisms, left: float, epoch_seconds: list[float]
) -> int:
    """The epochs a new trial may train, ``left`` seconds before the deadline: 0 (until the
    deadline) for strategy "seed"; ``epochs_max`` where its plateau ends it; else the budget
    drawn as the run goes on (:func:`aihpc.runner.search.trials.epoch_budget`)."""
    if mechanisms.until_deadline:
        return 0
    if mechanisms.grow_on_plateau:
        return config.search.epochs_max
    return epoch_budget(config, left, epoch_seconds)


def is_rung(lineage_epochs: int) -> bool:
    """Whether ``lineage_epochs`` epochs along a lineage is a rung: 1, 2, 4, 8 ..."""
    return lineage_epochs >= 1 and lineage_epochs & (lineage_epochs - 1) == 0


class Rungs:
    """The validation values (goodness: higher is better) of the trials that reached each rung,
    in sorted lists: a run's rungs hold a few values per trial."""

    def __init__(self) -> None:
        self._values: dict[int, list[float]] = {}

    def add(self, lineage_epochs: int, goodness: float) -> None:
        """A trial's value at ``lineage_epochs`` (nothing where that is no rung)."""
        if is_rung(lineage_epochs):
            insort(self._values.setdefault(lineage_epochs, []), goodness)

    def judge(self, lineage_epochs: int, goodness: float) -> str | None:
        """Add a trial's value and say why it stops (None: it goes on, or this is no rung)."""
        if not is_rung(lineage_epochs):
            return None
        values = self._values.setdefault(lineage_epochs, [])
        others = len(values)
        ahead = others - bisect_right(values, goodness)  # strictly better
        insort(values, goodness)
        there = others + 1
        if others < MIN_PEERS or ahead + 1 <= there // 2:
            return None
        return (
            f"{TrialEnd.HALVING} at {lineage_epochs} lineage epochs: ranked {ahead + 1} of the "
            f"{there} trials there, outside the better {there // 2}"
        )

    def count(self, lineage_epochs: int) -> int:
        """How many trials reached the rung."""
        return len(self._values.get(lineage_epochs, ()))


def plateaued(best_before: float | None, best_after: float, resolution: float) -> bool:
    """Whether the epochs that took a trial's best goodness from ``best_before`` (None: the
    trial has no epochs before them) to ``best_after`` improved it by less than ``resolution``."""
    return best_before is not None and best_after - best_before < resolution


def best_before_window(history: list[float]) -> float | None:
    """A trial's best goodness before its last :data:`PLATEAU_EPOCHS` epochs (``history``: each
    epoch's, in order); None where it has no epoch before them."""
    earlier = history[:-PLATEAU_EPOCHS]
    return max(earlier) if earlier else None


def flattened(history: list[float], resolution: float) -> bool:
    """Whether a trial's curve (``history``: each epoch's goodness, in order) has flattened: its
    last :data:`PLATEAU_EPOCHS` epochs improved its best by less than ``resolution``."""
    return bool(history) and plateaued(best_before_window(history), max(history), resolution)


@dataclass(frozen=True)
class Epoch:
    """A trial's finished epoch as :func:`decide` reads it."""

    done: int  # the trial's epochs finished, this one included
    budget: int  # its epochs at most (0: until the deadline)
    lineage_epochs: int  # epochs along its lineage, this one included
    goodness: float  # this epoch's validation value (higher is better)
    # the trial's best before its last PLATEAU_EPOCHS epochs, this one included (None: it has
    # no epoch before them)
    best_before_window: float | None
    best_after: float  # its best after this epoch
    since_best: int  # epochs since its best one (0: this one is its best)
    kept: bool = False  # it leads the run, kept past its plateau and budget (keep_leader)


def decide(
    epoch: Epoch, mechanisms: Mechanisms, rungs: Rungs, resolution: float, patience: int
) -> tuple[TrialStatus, str | None] | None:
    """How the trial ends after ``epoch`` (status, reason), or None: it trains on.  Its value
    joins ``rungs`` (with ``early_stop``) whatever is decided."""
    if mechanisms.until_deadline:
        return None
    stop = rungs.judge(epoch.lineage_epochs, epoch.goodness) if mechanisms.early_stop else None
    if epoch.budget and epoch.done >= epoch.budget and not epoch.kept:
        return TrialStatus.COMPLETED, None
    if stop is not None:
        return TrialStatus.EARLY_STOPPED, stop
    before = epoch.best_before_window
    if epoch.kept:
        return None
    if mechanisms.grow_on_plateau and plateaued(before, epoch.best_after, resolution):
        gain = epoch.best_after - (before or 0.0)
        first = epoch.done - PLATEAU_EPOCHS + 1
        return TrialStatus.COMPLETED, (
            f"{TrialEnd.PLATEAU}: epochs {first}-{epoch.done} improved its best by {gain:.4g}, "
            f"less than the resolution {resolution:.4g}"
        )
    if not mechanisms.grow_on_plateau and epoch.since_best >= patience:
        return TrialStatus.EARLY_STOPPED, None
    return None


class Judge:
    """The master's decisions after each finished epoch, by the run's rules: its
    :class:`Mechanisms`, the rungs of successive halving so far, the metric's ``resolution``
    and ``patience``."""

    def __init__(self, mechanisms: Mechanisms, resolution: float, patience: int) -> None:
        self.mechanisms, self.resolution, self.patience = mechanisms, resolution, patience
        self.rungs = Rungs()

    def after(
        self, trial: LiveTrial, goodness: float, kept: Callable[[LiveTrial], bool]
    ) -> tuple[TrialStatus, str | None] | None:
        """How ``trial`` ends after the epoch it just finished (its ``epochs_done`` counts it),
        whose validation value was ``goodness`` (higher is better), or None: it trains on.  The
        value joins the trial's history; then ``kept`` says whether the trial is the run's kept
        leader (the module docstring)."""
        before = trial.best_goodness
        trial.history.append(goodness)
        epoch = Epoch(
            done=trial.epochs_done,
            budget=trial.budget,
            lineage_epochs=trial.lineage_epochs(),
            goodness=goodness,
            best_before_window=best_before_window(trial.history),
            best_after=max(goodness, before) if before is not None else goodness,
            since_best=trial.epochs_done - trial.best_epoch,
            kept=self.mechanisms.keep_leader and kept(trial),
        )
        return decide(epoch, self.mechanisms, self.rungs, self.resolution, self.patience)
