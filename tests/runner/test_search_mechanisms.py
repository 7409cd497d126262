"""The search's mechanisms at work in the master, and each flag turning its mechanism off: a
scripted trainer (runner_helpers.scripted_epoch) on a step clock, so what the master decides is
checked against the store, recomputed independently of the master."""

from __future__ import annotations

import random
import shutil
from pathlib import Path

import pytest
from runner_helpers import (
    DIGITS,
    InProcessExecutor,
    StepClock,
    image_master,
    scripted_epoch,
    scripted_master,
)

from aihpc.base.config import SearchSection
from aihpc.records.rows import TrialEnd, TrialStatus
from aihpc.records.store import RunStore
from aihpc.results.gain import seed_only
from aihpc.runner.search.growth import MAX_STEPS, Sizes
from aihpc.runner.search.lifecycle import MIN_PEERS, Rungs, is_rung
from aihpc.runner.search.proposals import EXPLOIT
from aihpc.tasks import task_of

OFF = {"lineage_schedule": False, "inherit_hparams": False, "grow_on_plateau": False}
IMAGE = task_of("image")


def _run(tmp_path: Path, accuracy, **kw):
    master, store, executor = scripted_master(tmp_path, accuracy, **kw)
    score = master.run()
    return master, store, executor, score


def _rising(t: int, e: int) -> float:
    """Every epoch better by 0.05 (more than the digits' resolution, 0.5 / sqrt(359) = 0.026)."""
    return min(0.2 + 0.05 * e + 0.001 * t, 0.99)


# -- the lineage schedule ----------------------------------------------------------------------
def test_a_lineage_trains_on_one_schedule_from_its_roots_start_to_the_runs_end(tmp_path):
    """Every task's positions recomputed from the store: from the clock's position when it was
    sent (or where its lineage's last epoch ended, if later: the schedule never runs back) to
    the clock's position at its expected end (its trial's last epoch's 10 s; a child's first:
    its parent's, scaled by their operations per sample; the run's very first: the time left
    over epochs_max)."""
    master, store, executor, _ = _run(tmp_path, _rising, samples=1438, early_stop=False)
    start, run_length = store.segments()[0].start, 120.0
    rows = {r.id: r for r in store.trials()}
    assert len(rows) >= 3 and all(r.lineage_start == 0.0 for r in rows.values())  # one lineage
    assert {r.lineage_epochs for r in rows.values()} > {0}
    reached: dict[int, float] = {}
    for task in executor.tasks:
        epoch = next(e for e in store.epochs(task.trial_id) if e.epoch == task.epoch)
        row = rows[task.trial_id]
        t = epoch.t_start - start  # when it was sent, on the run's clock
        if task.epoch > 1:
            seconds, before = 10.0, reached[row.id]
        elif row.parent is not None:
            scale = IMAGE.recount_per_sample(IMAGE.arch(row.arch), 1, 0.0)[0]
            scale /= store.epochs(row.parent)[-1].ops_per_sample["train"]
            seconds, before = 10.0 * scale, reached[row.parent]
        else:
            seconds, before = (run_length - t) / 3, 0.0
        if task.share < 1.0:  # a last epoch, sized to end with the run
            seconds = run_length - t
        end = run_length  # the schedule ends with the run
        at = max(min(t / end, 1.0), before)
        assert task.schedule_from == pytest.approx(at)
        assert task.schedule_to == pytest.approx(max(min((t + seconds) / end, 1.0), at))
        reached[row.id] = task.schedule_to
        # the worker recorded the positions its steps went between
        recorded = (epoch.metrics["schedule_from"], epoch.metrics["schedule_to"])
        assert recorded == (task.schedule_from, task.schedule_to)
    for row in rows.values():  # a child's epochs count on from its parent's along the lineage
        if row.parent is not None:
            parent = rows[row.parent]
            assert row.lineage_epochs == parent.lineage_epochs + len(store.epochs(parent.id))
    positions = [t.schedule_from for t in executor.tasks]
    assert positions == sorted(positions)  # one lineage, one worker: it never runs back


def test_a_childs_first_epoch_expects_its_parents_validation_seconds_scaled(tmp_path):
    """Before its first epoch, a child is expected to validate for as long as its parent's last
    epoch did, scaled by their training operations per sample (what sizes a last epoch)."""
    script = scripted_epoch(_rising, samples=1438, phase_seconds={"eval": 2.0})
    master, store, _ = scripted_master(tmp_path, _rising, script=script, early_stop=False)
    made = []  # each new trial's parent, architecture and expected validation seconds
    propose = master.proposer.trial

    def recorded(*args, **kwargs):
        trial = propose(*args, **kwargs)
        made.append((trial.parent, trial.arch, trial.eval_seconds))
        return trial

    master.proposer.trial = recorded
    master.run()
    children = [m for m in made if m[0] is not None]
    assert children and made[0][2] is None  # the seed: nothing measured yet
    for parent, arch, eval_seconds in children:
        scale = IMAGE.recount_per_sample(IMAGE.arch(arch), 1, 0.0)[0]
        scale /= store.epochs(parent)[-1].ops_per_sample["train"]
        assert eval_seconds == pytest.approx(2.0 * scale)


def test_without_the_lineage_schedule_each_trial_runs_its_own(tmp_path):
    _, store, executor, _ = _run(tmp_path, _rising, lineage_schedule=False, early_stop=False)
    assert all(t.schedule_from is None and t.schedule_to is None for t in executor.tasks)
    for t in executor.tasks:  # the worker's default: epoch e of E from (e - 1) / E to e / E
        epoch = next(e for e in store.epochs(t.trial_id) if e.epoch == t.epoch)
        expected = ((t.epoch - 1) / t.epochs, t.epoch / t.epochs)
        assert (epoch.metrics["schedule_from"], epoch.metrics["schedule_to"]) == expected
    # and a strategy that does not morph never keeps one
    _, _, none, _ = _run(tmp_path / "none", _rising, strategy="none")
    assert all(t.schedule_from is None for t in none.tasks)


# -- hyperparameters inherited -----------------------------------------------------------------
def test_a_child_inherits_its_parents_hyperparameters_perturbed_and_tpe_hears_of_it(tmp_path):
    master, store, _, _ = _run(tmp_path, _rising, early_stop=False)
    rows = {r.id: r for r in store.trials()}
    children = [r for r in rows.values() if r.parent is not None]
    # the run's first trial starts from the task's defaults; a child of a parent in the worse
    # half of the window draws from TPE instead (inherit.worth_inheriting)
    assert children and rows[0].hparams_origin == "default"
    inherited = [c for c in children if c.hparams_origin != "tpe"]
    assert inherited
    for child in inherited:
        parent = rows[child.parent].hparams
        assert child.hparams_origin == f"inherited from trial {child.parent}"
        wd = child.hparams.weight_decay / parent.weight_decay
        assert wd == pytest.approx(0.8) or wd == pytest.approx(1.25)
        assert (child.hparams.lr, child.hparams.batch_size, child.hparams.momentum) == (
            parent.lr,
            parent.batch_size,
            parent.momentum,
        )
        assert child.hparams.dropout == parent.dropout
    # TPE was told every trial's result, the inherited ones too (its history: params, best)
    told = sorted(acc for _, acc in master.hpo.history())
    best = sorted(max(e.metrics["val_accuracy"] for e in store.epochs(r)) for r in rows)
    assert told == pytest.approx(best)


def test_without_inheritance_every_trial_draws_from_tpe(tmp_path):
    _, store, _, _ = _run(tmp_path, _rising, inherit_hparams=False, early_stop=False)
    rows = store.trials()
    assert len(rows) >= 3 and {r.hparams_origin for r in rows} == {"tpe"}


# -- the plateau, and growth towards the compute-optimal size ------------------------------------
def _flat_after_two(t: int, e: int) -> float:
    return 0.3 + 0.05 * min(e, 2)  # epoch 3 on gains nothing: epochs 3-5 are its plateau


def test_a_trial_ends_at_its_plateau_and_its_child_grows_to_the_room(tmp_path):
    """Each trial ends at its fifth epoch (epochs 3-5 gained nothing: its plateau), before its
    budget of epochs_max; a
    child is grown while its size fits what one worker can still do (recomputed here from the
    store: the operations before it over the run's clock, times the time left), or keeps its
    parent's architecture where the parent is already that large."""
    master, store, _, _ = _run(
        tmp_path, _flat_after_two, samples=1438, epochs_max=8, early_stop=False, minutes=3.0
    )
    start, run_length = store.segments()[0].start, 180.0
    rows = {r.id: r for r in store.trials()}
    epochs = store.epochs()
    sizes = Sizes(IMAGE, DIGITS)
    finished = [r for r in rows.values() if r.status != TrialStatus.DEADLINE]
    for row in finished:
        assert row.status == TrialStatus.COMPLETED and row.budget == 8
        assert row.reason.startswith("plateau: epochs 3-5 improved its best by 0")
    kinds = set()
    for row in rows.values():
        if row.parent is None:
            continue
        t = row.t_created - start
        done = sum(e.ops for e in epochs if e.t_end <= row.t_created)
        room = done / t * (run_length - t)
        parent = IMAGE.arch(rows[row.parent].arch)
        child = IMAGE.arch(row.arch)
        steps = row.recipe["steps"]
        if steps == 0:
            kinds.add("exploit")
            assert row.morph == EXPLOIT and row.arch_hash == rows[row.parent].arch_hash
            assert sizes.min_train_ops(parent) >= room
            continue
        kinds.add("grown")
        assert sizes.min_train_ops(parent) < room
        assert steps == 1 or sizes.min_train_ops(child) <= room
        if steps == MAX_STEPS:
            continue  # as far as one child grows
        rng = random.Random(row.recipe["seed"])
        spec = parent
        for _ in range(steps):
            spec = IMAGE.plan(spec, rng, DIGITS["max_params"])[0]
        assert spec.content_hash() == row.arch_hash  # the worker's replay
        after = IMAGE.plan(spec, rng, DIGITS["max_params"])[0]
        assert sizes.min_train_ops(after) > room  # one step more would not have fitted
    assert kinds == {"exploit", "grown"}, kinds
    assert any(r.recipe and r.recipe["steps"] > 1 for r in rows.values())  # several steps at once


def _rising_for_twelve(t: int, e: int) -> float:
    return 0.2 + 0.03 * min(e, 12)  # 0.09 a window of 3 epochs until epoch 12, then nothing


def test_by_default_a_still_rising_trial_trains_past_8_epochs_to_its_plateau(tmp_path):
    """With the default ``epochs_max`` (successive halving's largest rung, 32), the seed trains
    on while each 3 epochs gain more than the resolution, and ends at its plateau (epochs 13-15),
    where a cap of 8 epochs would have ended it rising and made its child grow."""
    default = SearchSection().epochs_max
    assert default >= 16 and is_rung(default)
    _, store, _, _ = _run(
        tmp_path, _rising_for_twelve, epochs_max=default, early_stop=False, minutes=4.0
    )
    seed = store.trials()[0]
    assert seed.status == TrialStatus.COMPLETED and seed.budget == default
    assert seed.reason.startswith("plateau: epochs 13-15 improved its best by 0")
    assert len(store.epochs(seed.id)) == 15


def test_without_the_plateau_rule_a_trial_trains_its_budget_and_a_child_grows_one_step(tmp_path):
    _, store, _, _ = _run(tmp_path, _flat_after_two, samples=1438, grow_on_plateau=False)
    rows = store.trials()
    done = [r for r in rows if r.status != TrialStatus.DEADLINE]
    assert done and all(r.status == TrialStatus.COMPLETED and r.reason is None for r in done)
    assert all(len(store.epochs(r.id)) == r.budget for r in done)
    assert all(r.recipe["steps"] == 1 for r in rows if r.parent is not None)
    assert len({r.arch_hash for r in rows}) == len(rows)


# -- successive halving --------------------------------------------------------------------
def _mixed(t: int, e: int) -> float:
    """Trials of a random quality (fixed by their id), each epoch a little better."""
    return 0.2 + 0.6 * random.Random(t).random() + 0.04 * e


def _asha_replayed(store: RunStore) -> dict[int, int]:
    """ASHA recomputed from the store: trial -> the epoch at which it had to stop."""
    lineage = {r.id: r.lineage_epochs for r in store.trials()}
    budget = {r.id: r.budget for r in store.trials()}
    there: dict[int, list[float]] = {}
    stops: dict[int, int] = {}
    order = [
        tuple(r) for r in store.db.execute("SELECT trial_id, epoch FROM epochs ORDER BY rowid")
    ]
    rows = {(e.trial_id, e.epoch): e for e in store.epochs()}
    for e in (rows[key] for key in order):  # as the master committed them: its order of decisions
        rung = lineage[e.trial_id] + e.epoch
        if not is_rung(rung) or e.trial_id in stops:
            continue
        value, others = e.metrics["val_accuracy"], there.setdefault(rung, [])
        rank = 1 + sum(v > value for v in others)
        last = budget[e.trial_id] and e.epoch >= budget[e.trial_id]  # completed before judged
        if len(others) >= MIN_PEERS and rank > (len(others) + 1) // 2 and not last:
            stops[e.trial_id] = e.epoch
        others.append(value)
    return stops


def test_trials_trailing_their_peers_at_a_rung_stop_and_their_workers_train_leaders_children(
    tmp_path,
):
    _, store, _, _ = _run(tmp_path, _mixed, slots=2, minutes=6.0, grow_on_plateau=False)
    rows = {r.id: r for r in store.trials()}
    stops = _asha_replayed(store)
    assert stops, "no trial trailed at a rung"
    stopped = {
        i
        for i, r in rows.items()
        if r.status == TrialStatus.EARLY_STOPPED and (r.reason or "").startswith("successive")
    }
    assert stopped == set(stops)
    for trial_id, epoch in stops.items():
        assert len(store.epochs(trial_id)) == epoch  # stopped right there
        assert rows[trial_id].reason.startswith("successive halving at ")
    # each freed slot went to a new child at once (the stopped trial's last epoch is the last
    # task of its slot before the child's first)
    later = [r for r in rows.values() if r.id > min(stopped)]
    assert later and all(r.parent is not None for r in later)


def test_without_successive_halving_no_trial_is_stopped(tmp_path):
    _, store, _, _ = _run(
        tmp_path, _mixed, slots=2, minutes=6.0, grow_on_plateau=False, early_stop=False
    )
    rows = store.trials()
    assert _asha_replayed(store) and not [r for r in rows if r.status == "early_stopped"]


# -- the seed baseline -------------------------------------------------------------------------
def test_strategy_seed_trains_the_seed_once_per_worker_until_the_deadline(tmp_path):
    master, store, executor, score = _run(tmp_path, _rising, slots=2, minutes=1.0, strategy="seed")
    rows = store.trials()
    start = store.segments()[0].start
    defaults = IMAGE.default_hparams(master.config)
    assert [r.id for r in rows] == [0, 1] and len(executor.tasks) == 6
    for row in rows:
        assert row.parent is None and row.morph == "seed" and row.budget == 0
        assert row.status == TrialStatus.DEADLINE and row.hparams == defaults
        assert row.hparams_origin == "default" and row.lineage_start == row.t_created - start
        assert len(store.epochs(row.id)) == 3
    assert [r.lineage_start for r in rows] == [0.0, 10.0]  # the second slot filled 10 s later
    reached = {0: 0.0, 1: 0.0}
    for task in executor.tasks:  # one schedule each, from its start to an epoch before the end
        epoch = next(e for e in store.epochs(task.trial_id) if e.epoch == task.epoch)
        begun = rows[task.trial_id].lineage_start
        # the schedule ends an epoch before the run's end, so it is ahead of the whole run's
        at = max((epoch.t_start - start - begun) / (60 - begun), reached[task.trial_id])
        assert task.schedule_from >= at - 1e-9 and task.schedule_to >= task.schedule_from
        reached[task.trial_id] = task.schedule_to
    assert max(reached.values()) == 1.0  # the last epoch sent ends at the schedule's end
    # the search's figure against itself: every trial is seed-only
    assert seed_only(store, score) == {
        "seed_only_best": score.best_accuracy,
        "seed_only_trial": 1,  # trial 1 scores more at every epoch
        "seed_only_end": "deadline",
        "search_gain": 0.0,
        "seed_only_epochs": 3,  # ... and reached it at its last
        "best_lineage_epochs": 3,
    }


def test_the_search_gain_is_the_best_less_the_best_seed_only_trial(tmp_path):
    _, store, _, score = _run(tmp_path, _rising, early_stop=False)
    seed_best = max(e.metrics["val_accuracy"] for e in store.epochs(0))
    figure = seed_only(store, score)
    assert figure["seed_only_trial"] == 0 and figure["seed_only_best"] == seed_best
    assert figure["search_gain"] == pytest.approx(score.best_accuracy - seed_best)
    assert figure["search_gain"] > 0
    # the training behind each side: the seed's epochs to its best, the best trial's lineage's
    ok = [e for e in store.iter_epochs() if e.status == "ok"]
    seed_epoch = next(
        e.epoch for e in ok if e.trial_id == 0 and e.metrics["val_accuracy"] == seed_best
    )
    best = next(e for e in ok if e.metrics["val_accuracy"] == score.best_accuracy)
    lineage = {t.id: t for t in store.trials()}
    along, trial = best.epoch, lineage[best.trial_id]
    # each ancestor's epochs, back to the lineage's root (a child made before its parent had
    # finished starts from the parent's first weights: a root of its own)
    while trial.parent is not None and (lineage[trial.parent].t_end or 1e18) <= trial.t_created:
        along += len([e for e in ok if e.trial_id == trial.parent])
        trial = lineage[trial.parent]
    assert figure["seed_only_epochs"] == seed_epoch
    assert figure["best_lineage_epochs"] == along > seed_epoch
    assert figure["seed_only_end"] == store.trials()[0].end().value


def test_no_search_gain_against_a_seed_that_successive_halving_stopped(tmp_path):
    """A seed-only trial that successive halving stopped beside its peers did not train as far as
    the seed can: its end is given, no gain over it (the run's seed, closed again as a rung would
    have closed it: which trial a two-worker run's rungs stop depends on which epoch arrives
    first)."""
    _, store, _, score = _run(tmp_path, _rising, early_stop=False)
    before = seed_only(store, score)
    assert before["seed_only_trial"] == 0 and before["search_gain"] is not None
    rungs = Rungs()
    rungs.add(1, 0.99)
    reason = rungs.judge(1, 0.2)
    store.finish_trial(0, TrialStatus.EARLY_STOPPED, store.trials()[0].t_end or 0.0, reason)
    assert store.trials()[0].end() == TrialEnd.HALVING
    after = seed_only(store, score)
    assert after == before | {"seed_only_end": "successive halving", "search_gain": None}


def test_epochs_that_finish_together_are_judged_in_the_order_they_were_sent(tmp_path):
    """Two workers' epochs that finish together (the in-process executor's always do) are
    collected in the order they were sent, so the same run decides the same every time (taken in
    a set's order, by memory address, three runs in one process had ended three ways)."""
    outcomes = set()
    for i in range(3):
        _, store, _, _ = _run(tmp_path / str(i), _rising, slots=2, epochs_max=32)
        trials = store.trials()
        outcomes.add(tuple((r.parent, r.status, r.reason, len(store.epochs(r.id))) for r in trials))
    assert len(outcomes) == 1


# -- resume --------------------------------------------------------------------------------------
class _Dies(BaseException):
    """Raised inside the executor: unwinds the master as a kill would."""


def test_a_resumed_master_rebuilds_lineages_rungs_and_positions(tmp_path):
    trainer = scripted_epoch(_mixed, samples=1438)
    holder: dict = {}

    def dies(task):
        if len(holder["executor"].keys) > 13:
            raise _Dies
        return trainer(task)

    master, store, executor = scripted_master(
        tmp_path, _mixed, slots=2, minutes=3.0, script=dies, grow_on_plateau=False
    )
    holder["executor"] = executor
    with pytest.raises(_Dies):
        master.run()
    died_at, rungs = executor.clock.now, master.judge.rungs
    running = {i: (t.lineage, t.hparams, t.hparams_origin) for i, t in master.running.items()}
    store.close()
    shutil.copytree(tmp_path / "run", tmp_path / "copy")
    clock = StepClock(10.0)
    clock.now = died_at + 50.0  # down for 50 s
    executor = InProcessExecutor(clock, slots=2, script=trainer)
    resumed = image_master(master.config, RunStore(tmp_path / "copy"), executor, clock)
    resumed.deadline = clock.now + 60.0  # run() sets it before restoring
    resumed._restore()
    assert {i: (t.lineage, t.hparams, t.hparams_origin) for i, t in resumed.running.items()} == (
        running
    )
    for rung in (1, 2, 4, 8):  # every finished epoch's value, at its place along its lineage
        assert resumed.judge.rungs.count(rung) == rungs.count(rung)
    assert sum(rungs.count(r) for r in (1, 2, 4, 8)) > 0
    t = 180.0 - 60.0  # the run's clock at the resume
    assert len(resumed.pending) == len(running) > 0
    for task in map(resumed._scheduled, resumed.pending):  # as each would be sent now
        trial = resumed.running[task.trial_id]
        epochs = resumed.store.epochs(trial.id)
        # where its last epoch ended, as its worker recorded it (the clock is past it: 50 s down)
        assert trial.reached == (epochs[-1].metrics["schedule_to"] if epochs else 0.0)
        if epochs:  # expected to last as long as its last epoch, 10 s
            span = 180.0 - trial.lineage.start
            clock = (t - trial.lineage.start) / span
            assert task.schedule_from == pytest.approx(max(clock, trial.reached))
            end = min(clock + 10.0 / span, 1.0)  # the clock at its expected end, or no further back
            assert task.schedule_to == pytest.approx(max(end, task.schedule_from))
        else:  # a child's first epoch: at the clock, on a schedule that ends with the run
            assert (t - trial.lineage.start) / (180.0 - trial.lineage.start) <= task.schedule_from
