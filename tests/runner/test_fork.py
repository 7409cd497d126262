"""Children of a running leader (aihpc.runner.search.fork): which trial is forked, its snapshot's
bytes, and the master forking it, with the scripted trainer on a step clock."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch
from runner_helpers import (
    DIGITS,
    InProcessExecutor,
    StepClock,
    image_master,
    scripted_epoch,
    scripted_master,
)

from aihpc.records.messages import Morph, WeightsRef
from aihpc.records.store import RunStore
from aihpc.runner.search import fork
from aihpc.runner.search.lineage import Lineage
from aihpc.runner.search.master import Master
from aihpc.runner.search.proposals import FORK
from aihpc.runner.search.trials import LiveTrial
from aihpc.tasks import read_config, task_of
from aihpc.train.weights import load, save

IMAGE = task_of("image")


def _live(trial_id: int, history: list[float], weights: str | None = "w.pt") -> LiveTrial:
    spec = IMAGE.seed_arch(DIGITS)
    return LiveTrial(
        id=trial_id,
        parent=None,
        arch=spec.to_dict(),
        arch_hash=spec.content_hash(),
        morph="seed",
        hparams=IMAGE.default_hparams(read_config(dict(batch_sizes=(32, 64, 128)))),
        hpo_number=trial_id,
        budget=8,
        num_params=spec.num_params(),
        seed=trial_id,
        lineage=Lineage(0.0, 0),
        hparams_origin="default",
        epochs_done=len(history),
        history=history,
        weights=WeightsRef(weights, "0" * 64) if weights else None,
    )


def test_the_leader_is_the_best_running_trial_with_weights_that_beats_every_finished_one():
    ahead, behind = _live(1, [0.5, 0.7]), _live(2, [0.6])
    unsaved = _live(3, [0.9], weights=None)  # no committed weights: nothing to fork
    assert fork.leader([behind, ahead, unsaved], best_finished=None) is ahead
    assert fork.leader([behind, ahead], best_finished=0.69) is ahead
    assert fork.leader([behind, ahead], best_finished=0.7) is None  # a finished trial as good
    assert fork.leader([_live(4, []), unsaved], best_finished=None) is None
    assert fork.leader([_live(6, [0.7]), ahead], best_finished=None) is ahead  # the earlier
    assert fork.leader([], best_finished=0.1) is None


def test_a_snapshot_is_the_leaders_file_under_the_forks_name_until_released(tmp_path):
    state = {"w": torch.arange(6.0)}
    ref = save(tmp_path, "trial1-epoch3-try1.pt", state, {"state": {}, "param_groups": []})
    leader = _live(1, [0.1, 0.2, 0.3], weights=None)
    leader.weights = ref
    snap = fork.snapshot(tmp_path, leader, child=7)
    assert snap == WeightsRef("fork7-trial1-epoch3.pt", ref.digest) and fork.is_snapshot(snap)
    assert not fork.is_snapshot(ref) and not fork.is_snapshot(None)
    (tmp_path / ref.name).unlink()  # the leader's next epoch supersedes its file
    model, _ = load(tmp_path, snap)  # its digest checked
    assert torch.equal(model["w"], state["w"])
    child = _live(7, [], weights=None)
    child.recipe = Morph(IMAGE.seed_arch(DIGITS).to_dict(), snap, 0, 1, 0, None)
    fork.release(tmp_path, child)
    assert not (tmp_path / snap.name).exists()
    fork.release(tmp_path, child)  # gone already: nothing to do


def _leads(t: int, e: int) -> float:
    """Trial 0 ahead of every other at each of its epochs: the others trail it at their rungs."""
    return (0.6 if t == 0 else 0.3) + 0.02 * e


def _behind(task) -> bool:
    """Trial 1's first attempt is lost: sent again, it reaches each rung after trial 0 has, so
    successive halving judges it there (two trials that reach a rung together are judged in the
    order their results are collected)."""
    return task.trial_id == 1 and task.attempt == 1


def _master(tmp_path: Path, script=None, **config) -> tuple[Master, RunStore, InProcessExecutor]:
    script = script or scripted_epoch(_leads, lost=_behind)
    config = {"epochs_max": 12, "patience": 20, **config}
    return scripted_master(tmp_path, _leads, slots=2, script=script, **config)


def test_a_worker_freed_while_the_leader_trains_forks_it(tmp_path):
    master, store, executor = _master(tmp_path)
    master.run()
    rows = {r.id: r for r in store.trials()}
    forks = [r for r in rows.values() if r.morph.startswith(FORK)]
    assert forks and all(r.parent == 0 for r in forks)
    seed = rows[0]
    for r in forks:
        # after which of the leader's epochs: its snapshot's name says, and the lineage agrees
        after = int(r.recipe["parent_weights"]["name"].rsplit("epoch", 1)[1].removesuffix(".pt"))
        assert r.morph == f"{FORK} 0 after its epoch {after}"
        assert r.arch_hash == seed.arch_hash and r.recipe["steps"] == 0
        assert (r.lineage_start, r.lineage_epochs) == (seed.lineage_start, after)
        assert r.hparams_origin == "inherited from trial 0"
        for name in ("lr", "weight_decay"):  # each x0.8 or x1.25 (the defaults leave room)
            ratio = getattr(r.hparams, name) / getattr(seed.hparams, name)
            assert ratio == pytest.approx(0.8) or ratio == pytest.approx(1.25)
        assert r.hparams.batch_size == seed.hparams.batch_size
        # its first epoch started from the leader's weights of that epoch (the scripted trainer
        # writes the weights it starts from): the snapshot held the same bytes
        first = next(t for t in executor.tasks if t.trial_id == r.id)
        assert first.morph.parent_weights.name.startswith(f"fork{r.id}-")
        leader_epoch = store.epochs(0)[after - 1].weights
        assert first.morph.parent_weights.digest == leader_epoch.digest
    # every snapshot is gone at the end: the folder holds only what the pool keeps
    names = {p.name for p in store.weights_dir.iterdir()}
    assert not any(n.startswith(fork.PREFIX) for n in names) and names == master.parents.files()


def test_without_forks_no_trial_starts_from_a_running_one(tmp_path):
    master, store, _ = _master(tmp_path, fork_leader=False)
    master.run()
    assert not [r for r in store.trials() if r.morph.startswith(FORK)]
    assert len(store.trials()) > 2


class _Dies(BaseException):
    """The master's process dies (not an exception the master catches)."""


def test_a_resumed_run_keeps_the_snapshot_of_a_fork_that_has_not_started(tmp_path):
    trainer = scripted_epoch(_leads, lost=_behind)

    def dies(task):
        if task.morph is not None and fork.is_snapshot(task.morph.parent_weights):
            raise _Dies
        return trainer(task)

    master, store, _ = _master(tmp_path, script=dies)
    with pytest.raises(_Dies):
        master.run()
    store.close()
    shutil.copytree(tmp_path / "run", tmp_path / "copy")
    clock = StepClock(10.0)
    clock.now = master.clock() + 5.0
    copy = RunStore(tmp_path / "copy")
    executor = InProcessExecutor(clock, slots=2, script=trainer)
    resumed = image_master(master.config, copy, executor, clock)
    resumed.run()
    first = next(r for r in copy.trials() if r.morph.startswith(FORK))
    assert first.status != "failed" and any(e.status == "ok" for e in copy.epochs(first.id))
    assert not any(p.name.startswith(fork.PREFIX) for p in copy.weights_dir.iterdir())
