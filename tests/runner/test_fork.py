"""Children of a running leader (aihpc.runner.search.fork): which trial is forked, its snapshot's
bytes, and the master forking it, with the scripted trainer on a step clock."""

from __future__ import annotations

import random
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
from aihpc.records.rows import TrialStatus
from aihpc.records.store import RunStore
from aihpc.runner.search import fork
from aihpc.runner.search.growth import Sizes
from aihpc.runner.search.lifecycle import Mechanisms
from aihpc.runner.search.lineage import Lineage
from aihpc.runner.search.master import Master
from aihpc.runner.search.parents import ParentPool
from aihpc.runner.search.proposals import FORK, GROWN_FROM_RUNNING
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


def _leadership(tmp_path: Path, running: list[LiveTrial], **on: bool) -> fork.Leadership:
    flags = dict(fork_leader=False, keep_leader=True) | on
    mechanisms = Mechanisms(True, True, True, True, until_deadline=False, **flags)
    pool = ParentPool(tmp_path, population=3, parse=IMAGE.arch)
    pool.finished(9, 0.6, {"id": 9}, WeightsRef("trial9-epoch2-try1.pt", "0" * 64))
    return fork.Leadership(mechanisms, 0.01, {t.id: t for t in running}, pool)


def test_a_kept_leader_is_grown_once_flattened_and_only_with_a_second_worker(tmp_path):
    rising = _live(1, [0.5, 0.6, 0.7, 0.8])
    flat = _live(1, [0.5, 0.7, 0.703, 0.706, 0.709])  # its last 3 epochs gained 0.009 < 0.01
    behind = _live(2, [0.65])
    for slots, kept in ((1, False), (2, True)):
        lead = _leadership(tmp_path, [rising, behind])
        lead.slots = slots
        assert lead.leader() is rising and lead.kept(rising) is kept
        assert not lead.kept(behind) and lead.start() is None  # neither forked nor flattened
        lead = _leadership(tmp_path, [flat, behind])
        lead.slots = slots
        assert lead.grows(flat) is kept and (lead.start() is flat) is kept
    lead = _leadership(tmp_path, [rising, behind], fork_leader=True, keep_leader=False)
    lead.slots = 2
    assert lead.start() is rising and not lead.kept(rising) and not lead.grows(rising)
    lead = _leadership(tmp_path, [_live(2, [0.6])])  # no better than the finished trial 9
    lead.slots = 2
    assert lead.leader() is None and lead.start() is None


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
        ratio = r.hparams.weight_decay / seed.hparams.weight_decay  # the default leaves room
        assert ratio == pytest.approx(0.8) or ratio == pytest.approx(1.25)
        assert (r.hparams.lr, r.hparams.batch_size) == (seed.hparams.lr, seed.hparams.batch_size)
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


# -- the kept leader (keep_leader) ---------------------------------------------------------------
def _seed_leads_then_flattens(t: int, e: int) -> float:
    """The seed ahead of every other trial all run long, flat from its third epoch (epochs 3-5
    are its plateau); the others rise slowly far behind it."""
    return 0.5 + 0.05 * min(e, 2) if t == 0 else 0.2 + 0.01 * e


def _kept_run(tmp_path: Path, slots: int = 2, **config) -> RunStore:
    config = {"epochs_max": 8, "early_stop": False, "minutes": 6.0, **config}
    master, store, _ = scripted_master(
        tmp_path, _seed_leads_then_flattens, slots=slots, samples=1438, **config
    )
    master.run()
    return store


def test_a_kept_leader_trains_to_the_deadline_and_a_freed_worker_grows_its_latest_weights(
    tmp_path,
):
    store = _kept_run(tmp_path)
    rows = {r.id: r for r in store.trials()}
    seed = rows[0]
    # neither its plateau (epoch 5) nor its budget of 8 epochs ended it
    assert seed.status == TrialStatus.DEADLINE and len(store.epochs(0)) > 8
    grown = [r for r in rows.values() if r.morph.startswith(GROWN_FROM_RUNNING)]
    assert grown, [r.morph for r in rows.values()]
    for r in grown:
        after = int(r.recipe["parent_weights"]["name"].rsplit("epoch", 1)[1].removesuffix(".pt"))
        assert after >= 5  # its curve had flattened: copies of it came before
        assert r.parent == 0 and r.morph.startswith(
            f"{GROWN_FROM_RUNNING} 0 after its epoch {after}: "
        )
        assert r.recipe["parent_weights"]["name"].startswith(f"fork{r.id}-trial0-")
        assert r.recipe["steps"] >= 1 and r.arch_hash != seed.arch_hash
        assert (r.lineage_start, r.lineage_epochs) == (seed.lineage_start, after)
        # the worker's replay of the recipe: the growth steps from the seed's architecture
        rng, spec = random.Random(r.recipe["seed"]), IMAGE.arch(seed.arch)
        for _ in range(r.recipe["steps"]):
            spec = IMAGE.plan(spec, rng, DIGITS["max_params"])[0]
        assert spec.content_hash() == r.arch_hash
    # a copy of it came before it flattened, or where it is already as large as one worker can
    # still train (recomputed from the store, as growth.worker_room computes it)
    start, run_length, epochs = store.segments()[0].start, 360.0, store.epochs()
    for r in rows.values():
        if not r.morph.startswith(FORK) or int(r.morph.rsplit(" ", 1)[1]) < 5:
            continue
        t = r.t_created - start
        room = sum(e.ops for e in epochs if e.t_end <= r.t_created) / t / 2 * (run_length - t)
        assert Sizes(IMAGE, DIGITS).min_train_ops(IMAGE.arch(seed.arch)) >= room


def test_without_keeping_or_with_one_worker_the_leaders_plateau_ends_it(tmp_path):
    for name, store in (
        ("off", _kept_run(tmp_path / "off", keep_leader=False)),
        ("one worker", _kept_run(tmp_path / "one", slots=1)),
    ):
        rows = store.trials()
        seed = rows[0]
        assert seed.status == TrialStatus.COMPLETED, name
        assert seed.reason.startswith("plateau: epochs 3-5"), (name, seed.reason)
        assert not [r for r in rows if r.morph.startswith(GROWN_FROM_RUNNING)], name
