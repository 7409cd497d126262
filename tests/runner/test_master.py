"""The master with a deterministic in-process executor: real trials, no Dask."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from runner_helpers import (
    DIGITS,
    InProcessExecutor,
    StepClock,
    image_master,
    scripted_epoch,
)

from aihpc.base.config import RunConfig
from aihpc.records.meta import MetaKey
from aihpc.records.store import RunStore
from aihpc.tasks import read_config, task_of
from aihpc.tasks.image.build import SpecNet
from aihpc.tasks.image.spec import ArchSpec

# one process runs the module under pytest-xdist: its fixture (the killed run) is made once
pytestmark = pytest.mark.xdist_group("master")


def _store(tmp_path: Path, **config) -> tuple[RunConfig, RunStore]:
    """A minute's run of one-epoch trials on digits (``config`` changes it), and its new store."""
    cfg = read_config(
        dict(
            dataset="digits",
            batch_sizes=(128,),
            report_seconds=60,
            **{"minutes": 1.0, "epochs_min": 1, "epochs_max": 1, **config},
        )
    )
    store = RunStore(tmp_path / "run")
    store.set_meta(MetaKey.CONFIG, cfg.to_dict())
    return cfg, store


def _run(tmp_path: Path, **config) -> tuple[RunStore, dict]:
    """Run the master with 2 slots; every task takes 10 s of its clock, so 6 tasks fit in a
    minute."""
    cfg, store = _store(tmp_path, **config)
    clock = StepClock(10.0)
    master = image_master(cfg, store, InProcessExecutor(clock, slots=2), clock)
    return store, master.run()


def test_strategy_none_retrains_the_seed_from_fresh_weights(tmp_path: Path) -> None:
    store, score = _run(tmp_path, strategy="none")
    trials = store.trials()
    assert len(trials) == 6
    assert {t.arch_hash for t in trials} == {trials[0].arch_hash}  # every trial is the seed network
    assert all(t.parent is None and t.morph == "seed" for t in trials)
    # each trial starts from its own initialisation: their first-epoch results differ
    firsts = [store.epochs(t.id)[0].metrics["train_loss"] for t in trials if store.epochs(t.id)]
    assert len(set(firsts)) == len(firsts)
    assert score.ops == store.total_ops() > 0


def test_evolution_morphs_children_from_finished_parents(tmp_path: Path) -> None:
    # without grow_on_plateau, every child grows (with it, a child of a parent already large
    # enough keeps its architecture: tests/runner/test_search_mechanisms.py)
    store, _ = _run(tmp_path, strategy="evolution", grow_on_plateau=False)
    trials = store.trials()
    assert len(trials) == 6
    assert trials[0].parent is None and trials[0].morph == "seed"
    hashes = [t.arch_hash for t in trials]
    assert len(set(hashes)) == len(hashes)  # no architecture is trained twice
    for t in trials[1:]:
        assert t.parent is not None and t.parent < t.id and t.morph != "seed"


@pytest.mark.parametrize("screen", [0, 2])
def test_a_search_with_no_new_architecture_left_goes_on_over_hyperparameters(
    tmp_path: Path, screen: int
) -> None:
    """Within ``max_params`` every architecture was tried (here: the seed is as large as
    allowed, so no child fits; no child keeps its parent's architecture, as with
    grow_on_plateau): the run does not end there; each new trial trains the seed afresh with
    hyperparameters of its own, as with no architecture search, and says why."""
    seed = task_of("image").seed_arch(DIGITS)
    cfg, store = _store(tmp_path, strategy="evolution", screen=screen, grow_on_plateau=False)
    clock = StepClock(10.0)
    data = {**DIGITS, "max_params": seed.num_params()}
    master = image_master(cfg, store, InProcessExecutor(clock, slots=2), clock, data)
    score = master.run()
    trials = store.trials()
    assert len(trials) == 6 and score.ops > 0
    assert {t.arch_hash for t in trials} == {seed.content_hash()} and trials[0].morph == "seed"
    for t in trials[1:]:
        assert t.parent is None and t.morph.startswith("seed (no new architecture within"), t.morph
    assert len({t.hparams for t in trials}) > 1  # the search went on over hyperparameters


@pytest.mark.parametrize("name", ["none", "evolution", "random"])
def test_every_strategy_is_a_valid_configuration(name: str) -> None:
    assert read_config(dict(strategy=name)).search.strategy == name


def _scripted(tmp_path: Path, accuracy, lost=lambda task: False, step: float = 10.0, **config):
    """A master on the scripted trainer: each task takes ``step`` seconds of the master's clock."""
    cfg = read_config(
        dict(
            dataset="digits",
            report_seconds=600,
            batch_sizes=(32, 64, 128),  # the CPU default
            **{"minutes": 1.0, "epochs_min": 1, "epochs_max": 1, **config},
        )
    )
    store = RunStore(tmp_path / "run")
    clock = StepClock(step)
    executor = InProcessExecutor(clock, slots=1, script=scripted_epoch(accuracy, lost))
    master = image_master(cfg, store, executor, clock)
    return store, master.run(), executor


def test_lost_epochs_are_requeued_up_to_max_attempts(tmp_path: Path) -> None:
    store, score, executor = _scripted(
        tmp_path, lambda t, e: 0.5, lost=lambda task: task.trial_id == 1, max_attempts=3
    )
    rows = {t.id: t for t in store.trials()}
    assert executor.keys[:5] == [
        "trial0-epoch1-try1",
        "trial1-epoch1-try1",
        "trial1-epoch1-try2",
        "trial1-epoch1-try3",
        "trial2-epoch1-try1",
    ]
    assert rows[1].status == "failed" and rows[1].attempts == 3
    assert rows[1].reason == "3 attempts failed; last: RuntimeError: worker lost trial 1 epoch 1"
    assert "Traceback" in rows[1].traceback and "RuntimeError: worker lost" in rows[1].traceback
    assert store.epochs(1) == []  # a lost epoch records nothing, and counts no operations
    # ... but the loss itself: when, which epoch and attempt, why, and whether it was sent again
    losses = store.losses()
    assert [(loss.trial_id, loss.epoch, loss.attempt, loss.requeued) for loss in losses] == [
        (1, 1, 1, True),
        (1, 1, 2, True),
        (1, 1, 3, False),
    ]
    assert {(loss.worker, loss.address, loss.reason) for loss in losses} == {
        (None, None, "RuntimeError: worker lost trial 1 epoch 1")
    }  # no KilledWorker: no worker named
    assert [loss.t for loss in losses] == sorted(loss.t for loss in losses)
    assert rows[0].status == rows[2].status == "completed" and rows[0].traceback is None
    assert score.ops == 1100 * len(store.epochs())


def test_a_lost_epoch_is_sent_again_before_the_epochs_waiting(tmp_path: Path) -> None:
    """A node lost with its worker leaves the run one slot: the lost epoch goes first, not behind
    the next epoch of the trial that finished beside it (near the run's end it would never go)."""

    def lost(task) -> bool:
        if (task.trial_id, task.epoch, task.attempt) != (1, 1, 1):
            return False
        executor._slots = 1  # its worker is gone with it
        return True

    cfg, store = _store(tmp_path, epochs_min=2, epochs_max=2)
    clock = StepClock(10.0)
    executor = InProcessExecutor(clock, slots=2, script=scripted_epoch(lambda t, e: 0.5, lost))
    image_master(cfg, store, executor, clock).run()
    assert executor.keys[:4] == [
        "trial0-epoch1-try1",
        "trial1-epoch1-try1",
        "trial1-epoch1-try2",  # before trial 0's second epoch, which was waiting
        "trial1-epoch2-try1",
    ]


def test_early_stopping_after_patience_epochs_without_improvement(tmp_path: Path) -> None:
    curve = [0.50, 0.60, 0.55, 0.58, 0.70]
    store, _, _ = _scripted(
        tmp_path,
        lambda t, e: curve[e - 1] if t == 0 else 0.1,
        minutes=3.0,
        epochs_min=5,
        epochs_max=5,
        patience=2,
        grow_on_plateau=False,  # else the first epoch without a gain ends it at once
    )
    first = store.trials()[0]
    assert first.status == "early_stopped" and first.budget == 5
    assert [e.metrics["val_accuracy"] for e in store.epochs(0)] == curve[
        :4
    ]  # epoch 2 best; 3, 4 no better


def test_epoch_budget_ramps_from_epochs_min_to_epochs_max(tmp_path: Path) -> None:
    # One slot, 6 s a task, a 4-minute run: a new trial's budget is
    # epochs_min + int(progress * (max - min + 1)), but no more epochs than fit
    # in the time left at 6 s an epoch (once an epoch's duration is known).
    store, _, _ = _scripted(
        tmp_path,
        lambda t, e: 0.5 + 0.01 * e,
        step=6.0,
        minutes=4.0,
        epochs_min=1,
        epochs_max=4,
        patience=10,
        grow_on_plateau=False,  # with it, a trial's budget is epochs_max: its plateau ends it
    )
    trials = store.trials()
    start = store.segments()[0].start
    expected = []
    for t in trials:
        left = start + 240.0 - t.t_created
        budget = min(4, 1 + int((1.0 - left / 240.0) * 4))
        expected.append(budget if t.id == 0 else min(budget, max(1, int(left / 6.0))))
    assert [t.budget for t in trials] == expected
    assert set(expected) == {1, 2, 3, 4} and expected[0] == 1


def test_run_ends_at_the_deadline_and_closes_running_trials(tmp_path: Path) -> None:
    store, score, executor = _scripted(
        tmp_path,
        lambda t, e: 0.5,
        step=10.0,
        minutes=1.0,
        epochs_min=100,
        epochs_max=100,
        patience=1000,
        grow_on_plateau=False,  # a flat curve would end the trial at its second epoch
    )
    assert len(executor.keys) == 6  # 60 s of clock at 10 s a task
    (trial,) = store.trials()
    assert trial.status == "deadline" and len(store.epochs(0)) == 6
    # each epoch's file supersedes the one before: only the last is kept, and its row names it
    assert [p.name for p in store.weights_dir.iterdir()] == ["trial0-epoch6-try1.pt"]
    assert store.epochs(0)[-1].weights.name == "trial0-epoch6-try1.pt"
    assert score.ops == 6 * 1100 and score.best_accuracy == 0.5


class _MasterDies(BaseException):
    """Raised inside the executor: unwinds the master as a kill would, past its exception
    handlers."""


@pytest.fixture(scope="module")
def killed_run(tmp_path_factory) -> tuple[Path, RunConfig, float]:
    """A real run (one slot, 3 epochs a trial, 10 s of clock a task) whose master dies submitting
    its eighth task: trials 0 and 1 are done, trial 2 has finished epoch 1.  Returns the run
    directory (copy it before use), the configuration and the clock's time of death."""
    from aihpc.train.worker import run_epoch

    cfg = read_config(
        dict(
            dataset="digits",
            minutes=2.0,
            epochs_min=3,
            epochs_max=3,
            patience=10,
            batch_sizes=(128,),
            report_seconds=600,
            # every trial trains its 3 epochs, however well its real epochs went (a resume with the
            # mechanisms at work: tests/runner/test_search_mechanisms.py)
            grow_on_plateau=False,
            early_stop=False,
        )
    )
    run_dir = tmp_path_factory.mktemp("killed") / "run"
    store = RunStore(run_dir)
    store.set_meta(MetaKey.CONFIG, cfg.to_dict())
    clock = StepClock(10.0)
    executor = InProcessExecutor(clock, slots=1)

    def dies(task):
        if len(executor.keys) > 7:
            raise _MasterDies
        return run_epoch(task_of("image"), task)

    executor.script = dies
    with pytest.raises(_MasterDies):
        image_master(cfg, store, executor, clock).run()
    store.close()
    return run_dir, cfg, clock.now


def _copy(killed_run, tmp_path: Path) -> tuple[RunStore, RunConfig, StepClock]:
    run_dir, cfg, now = killed_run
    shutil.copytree(run_dir, tmp_path / "run")
    clock = StepClock(10.0)
    clock.now = now
    return RunStore(tmp_path / "run"), cfg, clock


def test_restore_continues_the_running_trial_from_its_last_epoch(
    tmp_path: Path, killed_run
) -> None:
    from aihpc.train.weights import load

    store, cfg, clock = _copy(killed_run, tmp_path)
    rows = store.trials()
    assert [r.status for r in rows] == ["completed", "completed", "running"]
    master = image_master(cfg, store, InProcessExecutor(clock), clock)
    master.deadline = clock.now + 60.0  # run() sets it before restoring
    master._restore()
    assert master.next_id == 3 and master.epoch_counter == 7 and master.ops == store.total_ops()
    assert master.proposer.seen_hashes == {r.arch_hash for r in rows}
    assert [c.trial_id for c in master.parents.window] == [0, 1]
    assert master.parents.files() == {store.epochs(i)[-1].weights.name for i in (0, 1)}
    assert master.best == max(e.metrics["val_accuracy"] for e in store.epochs())
    (trial,) = master.running.values()
    assert (
        trial.id == 2
        and trial.epochs_done == 1
        and trial.budget == 3
        and trial.hparams == rows[2].hparams
    )
    (task,) = master.pending
    assert (task.trial_id, task.epoch, task.attempt, task.morph) == (2, 2, 1, None)
    assert task.start == store.epochs(2)[0].weights and task.start.name == "trial2-epoch1-try1.pt"
    state, optimizer = load(Path(task.weights_dir), task.start)
    assert optimizer["state"] and set(state) == set(
        SpecNet(ArchSpec.from_dict(trial.arch)).state_dict()
    )  # weights and momentum


def test_resumed_run_gets_the_remaining_budget_and_new_ids(tmp_path: Path, killed_run) -> None:
    store, cfg, clock = _copy(killed_run, tmp_path)
    clock.now += 100.0  # the master was down for 100 s of clock
    (first,) = store.segments()
    assert first.stop - first.start == 70.0  # seven tasks of 10 s, the last one touched
    executor = InProcessExecutor(clock, slots=1, script=scripted_epoch(lambda t, e: 0.5))
    resumed = clock.now
    master = image_master(cfg, store, executor, clock)
    master.run()
    assert master.deadline == resumed + 120.0 - 70.0
    assert executor.keys[:3] == ["trial2-epoch2-try1", "trial2-epoch3-try1", "trial3-epoch1-try1"]
    assert len(executor.keys) == 5  # 50 s of budget at 10 s a task: trial 3 gets the last three
    rows = store.trials()
    assert [r.id for r in rows] == [0, 1, 2, 3] and len({r.arch_hash for r in rows}) == 4
    assert rows[3].parent in (0, 1, 2) and rows[3].status == "completed"
    assert rows[2].status == "completed" and [e.epoch for e in store.epochs(2)] == [1, 2, 3]


def test_the_run_places_workers_that_join_before_their_slots_are_filled(tmp_path: Path) -> None:
    """A worker that joins mid-run (a batch job that started late) is placed on its device before
    the master gives it a task: ``workers_joined`` is called whenever the slots grow, first."""
    cfg, store = _store(tmp_path)
    clock = StepClock(10.0)
    trainer = scripted_epoch(lambda t, e: 0.5)

    def epoch_then_a_join(task):
        if len(executor.keys) == 2:
            executor._slots = 2  # a second worker joined during the second task
        return trainer(task)

    executor = InProcessExecutor(clock, slots=1, script=epoch_then_a_join)
    joined: list[tuple[int, int]] = []  # the tasks submitted and the slots, at each call
    master = image_master(
        cfg,
        store,
        executor,
        clock,
        workers_joined=lambda: joined.append((len(executor.keys), executor.slots())),
    )
    master.run()
    assert joined == [(0, 1), (2, 2)]  # at the start, and once the slots grew, before a task
    assert len(executor.keys) > 3
