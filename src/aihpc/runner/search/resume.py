"""A resumed master's search, rebuilt from the run store.

Finished trials are told to the hyperparameter search and given to the
parent pool in the order they finished, so the pool keeps what it kept
before, with what a child takes from each (its hyperparameters, its lineage
and its last epoch's duration); every finished epoch's value joins the rungs
of successive halving at its place along its lineage.  A trial that was
running when the previous master died continues from its last finished
epoch, with that epoch's weights and optimizer state (without one, from its
recipe, as a child's first epoch does), in its lineage, with its
hyperparameters.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from aihpc.base.config import RunConfig
from aihpc.records.rows import SEED_TRIAL, TrialRow, TrialStatus
from aihpc.records.store import RunStore
from aihpc.runner.search.lifecycle import Rungs
from aihpc.runner.search.parents import ParentPool, Trained
from aihpc.runner.search.trials import (
    LiveTrial,
    Progress,
    progress,
    resumed_trial,
    stored_lineage,
    trial_seed,
)
from aihpc.scoring.quality import Quality

if TYPE_CHECKING:
    from aihpc.nas.hpo import HyperparameterSearch


@dataclass
class Rebuilt:
    """What the master takes back from the store: the trials still running, the next trial's id,
    the finished epochs (their number and metric values) and every architecture tried."""

    running: list[LiveTrial] = field(default_factory=list)
    next_id: int = 0
    epochs: int = 0
    values: list[float] = field(default_factory=list)
    hashes: set[str] = field(default_factory=set)


def rebuild(
    store: RunStore,
    config: RunConfig,
    quality: Quality,
    hpo: HyperparameterSearch,
    parents: ParentPool,
    rungs: Rungs,
) -> Rebuilt:
    """The search's state from ``store`` (the module docstring): ``hpo``, ``parents`` and
    ``rungs`` are told what they held; the rest is returned."""
    rows = {row.id: row for row in store.trials()}
    if SEED_TRIAL in rows:
        parents.add_seed(rows[SEED_TRIAL].arch)
    out = Rebuilt()
    ended: list[tuple[TrialRow, float | None, Progress]] = []
    for row in rows.values():
        done = progress(store.epochs(row.id), quality.metric)
        accs = [quality.goodness(v) for v in done.values]
        out.next_id = max(out.next_id, row.id + 1)
        out.hashes.add(row.arch_hash)
        out.epochs += len(accs)
        out.values += done.values
        start = stored_lineage(row).epochs
        for k, good in enumerate(accs, start=1):
            rungs.add(start + k, good)
        if row.status != TrialStatus.RUNNING:
            ended.append((row, max(accs) if accs else None, done))
            continue
        number = hpo.adopt(row.hparams.searched())
        parent_arch = rows[row.parent].arch if row.parent is not None else None
        seed = trial_seed(config.run.seed, row.id)
        out.running.append(resumed_trial(row, accs, done, parent_arch, number, seed))
    order = {trial_id: i for i, trial_id in enumerate(store.finish_order())}
    for row, best, done in sorted(ended, key=lambda e: (order.get(e[0].id, -1), e[0].id)):
        hpo.restore(row.hparams.searched(), best)
        if best is not None and done.weights is not None:
            lineage = stored_lineage(row).after(len(done.values))
            trained = Trained(
                row.hparams,
                lineage,
                done.epoch_seconds,
                done.ops_per_sample,
                done.reached or 0.0,
                done.eval_seconds,
            )
            parents.finished(row.id, best, row.arch, done.weights, trained=trained)
    return out
