"""Weight retention: the parent pool keeps the files the search can still use and deletes the
rest."""

from __future__ import annotations

import os
from pathlib import Path

from runner_helpers import (
    InProcessExecutor,
    StepClock,
    image_master,
    scripted_epoch,
)

from aihpc.records.messages import WeightsRef
from aihpc.records.meta import MetaKey
from aihpc.records.store import RunStore
from aihpc.runner.search.parents import KEEP_BEST, ParentPool
from aihpc.tasks import read_config, task_of


def _finish(pool: ParentPool, folder: Path, trial_id: int, accuracy: float) -> str:
    name = f"trial{trial_id}.pt"
    (folder / name).write_bytes(b"w")
    pool.finished(trial_id, accuracy, {"id": trial_id}, WeightsRef(name, "0" * 64))
    return name


def test_the_pool_keeps_the_window_the_best_the_seed_and_pinned_parents(tmp_path: Path) -> None:
    pool = ParentPool(tmp_path, population=3, parse=task_of("image").arch, keep_best=2)
    pool.add_seed({"id": 0})
    accuracies = {0: 0.1, 1: 0.9, 2: 0.2, 3: 0.8, 4: 0.3, 5: 0.4, 6: 0.5, 7: 0.6, 8: 0.1}
    for trial_id, accuracy in accuracies.items():
        if trial_id == 5:
            pool.pin(4)  # a child of 4 has not started yet
        _finish(pool, tmp_path, trial_id, accuracy)
    window = [6, 7, 8]
    assert [c.trial_id for c in pool.window] == window
    assert pool.best() == [1, 3]
    kept = {0, 1, 3, 4, *window}  # the seed, the best two, the pinned parent, the window
    assert {p.name for p in tmp_path.iterdir()} == {f"trial{i}.pt" for i in kept} == pool.files()
    assert pool.deleted == len(accuracies) - len(kept)
    assert pool.arch(4) == {"id": 4} and pool.weights(7).name == "trial7.pt"
    pool.unpin(4)
    assert not (tmp_path / "trial4.pt").exists() and pool.deleted == len(accuracies) - len(kept) + 1
    # a better trial displaces the worse of the best, which has left the window: its file goes
    _finish(pool, tmp_path, 9, 0.95)
    assert pool.best() == [9, 1] and not (tmp_path / "trial3.pt").exists()


def test_sweep_deletes_the_files_nothing_names(tmp_path: Path) -> None:
    pool = ParentPool(tmp_path, population=2, parse=task_of("image").arch)
    kept = _finish(pool, tmp_path, 1, 0.5)
    (tmp_path / "trial7-epoch2-try1.pt").write_bytes(b"a running trial's")
    (tmp_path / "trial9-epoch1-try1.pt").write_bytes(b"an epoch the master never committed")
    pool.sweep({"trial7-epoch2-try1.pt"})
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([kept, "trial7-epoch2-try1.pt"])


def test_a_long_run_keeps_a_bounded_set_of_weight_files(tmp_path: Path) -> None:
    """Every child starts from its parent's real file (a deleted one would fail the trial), and the
    folder never holds more than the pool's bound plus a file per slot and pinned parent."""
    slots, population = 2, 3
    cfg = read_config(
        dict(
            dataset="digits",
            minutes=5.0,
            epochs_min=1,
            epochs_max=2,
            batch_sizes=(128,),
            report_seconds=600,
            population=population,
            tournament=2,
            keep_leader=False,  # every trial ends within its 2 epochs: many trials, many files
        )
    )
    store = RunStore(tmp_path / "run")
    store.set_meta(MetaKey.CONFIG, cfg.to_dict())
    clock = StepClock(5.0)
    epoch = scripted_epoch(lambda t, e: (t * 37 % 100) / 100 + e / 1000)
    most = 0

    def counted(task):
        nonlocal most
        most = max(most, len(os.listdir(store.weights_dir)))
        return epoch(task)

    executor = InProcessExecutor(clock, slots=slots, script=counted)
    master = image_master(cfg, store, executor, clock)
    master.run()
    rows = store.trials()
    assert len(rows) > 3 * (population + KEEP_BEST + 1) and {r.status for r in rows} <= {
        "completed",
        "early_stopped",
        "deadline",
    }
    assert most <= population + KEEP_BEST + 1 + 2 * slots
    assert master.parents.deleted > len(rows) // 2
    assert {p.name for p in store.weights_dir.iterdir()} == master.parents.files()
