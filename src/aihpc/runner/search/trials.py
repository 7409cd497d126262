"""The master's trials: one in progress, and one rebuilt from the store when a run resumes."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from aihpc.base.config import RunConfig
from aihpc.records.messages import EpochStatus, Morph, WeightsRef
from aihpc.records.rows import EpochRow, NewTrial, TrialRow
from aihpc.records.trial import Hyperparameters
from aihpc.runner.search.lineage import Lineage, steady_seconds
from aihpc.runner.search.parents import Trained

if TYPE_CHECKING:
    from aihpc.tasks import Arch


@dataclass
class LiveTrial:
    """The master's view of a trial in progress."""

    id: int
    parent: int | None
    arch: dict[str, Any]
    arch_hash: str
    morph: str
    hparams: Hyperparameters
    hpo_number: int
    budget: int  # epochs at most (0: until the deadline)
    num_params: int | None  # None in a store row that never recorded it
    seed: int
    lineage: Lineage  # its place in its lineage (aihpc.runner.search.lineage)
    hparams_origin: str  # where its hyperparameters came from (aihpc.runner.search.inherit)
    recipe: Morph | None = None  # how a child's first epoch makes its starting weights
    epochs_done: int = 0
    # each finished epoch's validation metric as goodness (the quality's: higher better), in order
    history: list[float] = field(default_factory=list)
    weights: WeightsRef | None = None  # the weights of the last epoch committed
    spec: Arch | None = None  # its architecture's value, where the master has built it
    memory_kills: int = 0  # its epoch's last attempts in a row whose worker was killed for memory
    # its last finished epoch's seconds (steady: without its one-time phases) and training
    # operations per sample (None: none yet)
    epoch_seconds: float | None = None
    ops_per_sample: float | None = None
    eval_seconds: float | None = None  # its last finished epoch's validation seconds
    first_seconds: float | None = None  # its first epoch's expected seconds (from its parent's)
    # the schedule's position its lineage reached: where its last finished epoch (or, before
    # its first, its parent's) ended (aihpc.runner.search.lineage; 0 for a trial's own schedule)
    reached: float = 0.0

    @property
    def best_goodness(self) -> float | None:
        """Its best validation goodness so far (None: no epoch finished)."""
        return max(self.history) if self.history else None

    @property
    def best_epoch(self) -> int:
        """The epoch of its best goodness (the first of equals; 0: no epoch finished)."""
        return self.history.index(max(self.history)) + 1 if self.history else 0

    def trained(self) -> Trained:
        """What a child of it takes from it, as it stands after its finished epochs."""
        return Trained(
            self.hparams,
            self.lineage.after(self.epochs_done),
            self.epoch_seconds,
            self.ops_per_sample,
            self.reached,
            self.eval_seconds,
        )

    def files(self) -> set[str]:
        """The weight files it needs: its last committed, or, before its first epoch is
        committed, its parent's (the pool's, or a snapshot of a running one)."""
        if self.weights is not None:
            return {self.weights.name}
        parent = self.recipe.parent_weights if self.recipe is not None else None
        return {parent.name} if parent is not None else set()

    def needs_parent(self) -> bool:
        """Whether its next epoch starts from its parent's weights (through its recipe): a
        child whose first epoch is not yet committed."""
        return self.recipe is not None and self.weights is None

    def new_row(self, t_created: float) -> NewTrial:
        """The trial as the store records it when it starts, at ``t_created``."""
        return NewTrial(
            id=self.id,
            parent=self.parent,
            arch_hash=self.arch_hash,
            arch=self.arch,
            parent_arch=self.recipe.parent_arch if self.recipe else None,
            morph=self.morph,
            recipe=self.recipe,
            hparams=self.hparams,
            hpo_number=self.hpo_number,
            budget=self.budget,
            num_params=self.num_params,
            t_created=t_created,
            lineage_start=self.lineage.start,
            lineage_epochs=self.lineage.epochs,
            hparams_origin=self.hparams_origin,
        )

    def lineage_epochs(self) -> int:
        """Epochs trained along its lineage: its ancestors' and its own finished ones."""
        return self.lineage.epochs + self.epochs_done


def trial_seed(run_seed: int, trial_id: int) -> int:
    """The seed of a trial's initialisation and data order, from the run's seed."""
    return run_seed * 7919 + trial_id


def epoch_budget(config: RunConfig, left: float, epoch_seconds: list[float]) -> int:
    """Epochs for a new trial, ``left`` seconds before the deadline: from epochs_min early in the
    run up to epochs_max at its end, but never more than fit in the time left.

    A trial's learning rate decays over its budget, so one that the
    deadline cuts short is never evaluated at the end of its schedule.
    What fits is the time left over the median of the recent epochs'
    durations ``epoch_seconds`` (at least one epoch).
    """
    s = config.search
    progress = min(max(1.0 - left / (config.run.minutes * 60.0), 0.0), 1.0)
    budget = min(s.epochs_max, s.epochs_min + int(progress * (s.epochs_max - s.epochs_min + 1)))
    per_epoch = statistics.median(epoch_seconds) if epoch_seconds else 0.0
    if per_epoch > 0:
        budget = min(budget, max(1, int(left / per_epoch)))
    return budget


@dataclass(frozen=True)
class Progress:
    """A stored trial's finished epochs as the search reads them back: the values of the
    validation metric, its last weights, and its last finished epoch's seconds (steady:
    :func:`aihpc.runner.search.lineage.steady_seconds`), training operations per sample and
    validation seconds (None: no finished epoch)."""

    values: list[float]
    weights: WeightsRef | None
    epoch_seconds: float | None
    ops_per_sample: float | None
    reached: float | None  # the schedule's position its last finished epoch ended at
    eval_seconds: float | None = None


def progress(epochs: list[EpochRow], metric: str) -> Progress:
    """A stored trial's :class:`Progress` from its epochs' rows."""
    ok = [e for e in epochs if e.status == EpochStatus.OK]
    weights = next((e.weights for e in reversed(epochs) if e.weights is not None), None)
    last = ok[-1] if ok else None
    return Progress(
        [e.metrics[metric] for e in ok],
        weights,
        steady_seconds(last.t_end - last.t_start, last.phase_seconds) if last else None,
        last.ops_per_sample.get("train") if last else None,
        last.metrics.get("schedule_to") if last else None,
        last.phase_seconds.get("eval") if last else None,
    )


def stored_lineage(row: TrialRow) -> Lineage:
    """A stored trial's lineage (a row without one, from an older store: a root at the run's
    start)."""
    return Lineage(row.lineage_start or 0.0, row.lineage_epochs or 0)


def resumed_trial(
    row: TrialRow,
    accs: list[float],
    done: Progress,
    parent_arch: dict[str, Any] | None,
    hpo_number: int,
    seed: int,
) -> LiveTrial:
    """A trial that was running when the previous master died, after ``len(accs)`` finished epochs
    whose goodness (the quality's, higher better) ``accs`` lists, as ``done`` read them.

    ``parent_arch``: its parent's architecture, from which a child whose first
    epoch is still to be made from its recipe starts.
    """
    return LiveTrial(
        id=row.id,
        parent=row.parent,
        arch=row.arch,
        arch_hash=row.arch_hash,
        morph=row.morph,
        hparams=row.hparams,
        hpo_number=hpo_number,
        budget=row.budget,
        num_params=row.num_params,
        seed=seed,
        lineage=stored_lineage(row),
        hparams_origin=row.hparams_origin or "tpe",
        recipe=_recipe(row.recipe, parent_arch) if row.recipe is not None else None,
        epochs_done=len(accs),
        history=list(accs),
        weights=done.weights,
        epoch_seconds=done.epoch_seconds,
        ops_per_sample=done.ops_per_sample,
        eval_seconds=done.eval_seconds,
        reached=done.reached or 0.0,
    )


def _recipe(saved: dict[str, Any], parent_arch: dict[str, Any] | None) -> Morph:
    """A child's morph recipe as the store keeps it, with its parent's architecture."""
    parent_weights = WeightsRef(**saved["parent_weights"]) if saved["parent_weights"] else None
    return Morph(**{**saved, "parent_arch": parent_arch, "parent_weights": parent_weights})
