"""The master's decision after a trial's epoch (aihpc.runner.search.lifecycle): the plateau rule,
successive halving's rungs, the order of the rules, and which strategies apply them."""

from __future__ import annotations

import dataclasses

import pytest
from runner_helpers import live_trial

from aihpc.records.rows import TRAINED_OUT, TrialEnd, TrialRow, TrialStatus
from aihpc.records.trial import Hyperparameters
from aihpc.runner.search.lifecycle import (
    MIN_PEERS,
    PLATEAU_EPOCHS,
    Epoch,
    Judge,
    Mechanisms,
    Rungs,
    decide,
    flattened,
    is_rung,
    plateaued,
    trial_budget,
)
from aihpc.runner.search.lineage import Lineage
from aihpc.runner.search.trials import LiveTrial
from aihpc.scoring.accuracy import Accuracy
from aihpc.tasks import read_config
from aihpc.tasks.language.quality import Loss

ALL = Mechanisms(True, True, True, True, True, True, until_deadline=False)
NONE = Mechanisms(False, False, False, False, False, False, until_deadline=False)
NO_HALVING = Mechanisms(True, True, True, False, True, True, until_deadline=False)


def _not_kept(trial: LiveTrial) -> bool:
    return False


def _epoch(**changes) -> Epoch:
    base = dict(
        done=2,
        budget=8,
        lineage_epochs=3,  # no rung
        goodness=0.6,
        best_before_window=0.5,
        best_after=0.6,
        since_best=0,
    )
    return Epoch(**{**base, **changes})


def test_the_resolution_is_one_standard_error_of_the_metric():
    # an accuracy over n samples: sqrt(p (1 - p) / n), at its largest (p = 1/2)
    assert Accuracy(val_samples=2500, min_accuracy=0.5).resolution == pytest.approx(0.01)
    assert Accuracy(val_samples=0, min_accuracy=0.5).resolution == 0.5  # no samples: one
    # a loss's is given (1 / sqrt(predicted tokens), aihpc.tasks.language.task)
    assert Loss(unigram=4.0, max_loss=3.0, floor=None, resolution=0.002).resolution == 0.002


def test_a_plateau_is_an_improvement_of_the_best_by_less_than_the_resolution():
    assert not plateaued(None, 0.3, 0.01)  # a first epoch: nothing to improve on
    assert plateaued(0.50, 0.505, 0.01)
    assert plateaued(0.50, 0.50, 0.01)  # no better
    assert not plateaued(0.50, 0.51, 0.01)  # exactly one standard error: it paid
    assert not plateaued(-2.40, -2.30, 0.05)  # a loss falling by 0.1 nats (goodness: negated)
    assert plateaued(-2.40, -2.39, 0.05)


def test_rungs_are_the_powers_of_two():
    assert [n for n in range(0, 40) if is_rung(n)] == [1, 2, 4, 8, 16, 32]


def test_a_rung_stops_nobody_until_it_holds_enough_peers():
    rungs = Rungs()
    for i in range(MIN_PEERS):
        assert rungs.judge(4, 0.1 * i) is None  # 0 and then 1 other trial there
    assert rungs.count(4) == MIN_PEERS
    assert rungs.judge(3, 0.0) is None and rungs.count(3) == 0  # no rung: nothing kept


@pytest.mark.parametrize(
    ("there", "kept"),
    [(3, 1), (4, 2), (5, 2), (6, 3), (9, 4)],
)
def test_only_the_better_half_of_the_trials_at_a_rung_goes_on(there: int, kept: int):
    """A trial reaching a rung with n - 1 others there goes on where its rank among the n is at
    most n // 2 (ASHA with a reduction factor of 2): checked for each rank it could take."""
    others = [float(v) for v in range(1, there)]  # ranks 1 .. n-1 already there
    for rank in range(1, there + 1):
        rungs = Rungs()
        for v in others:
            rungs.add(2, v)
        value = there - rank + 0.5  # exactly rank - 1 of the others are better
        reason = rungs.judge(2, value)
        assert (reason is None) == (rank <= kept), (there, rank, reason)
        if reason is not None:
            assert reason == (
                f"successive halving at 2 lineage epochs: ranked {rank} of the {there} trials "
                f"there, outside the better {there // 2}"
            )


def test_ties_at_a_rung_count_in_the_trials_favour():
    rungs = Rungs()
    for v in (0.5, 0.5, 0.5):
        rungs.add(1, v)
    assert rungs.judge(1, 0.5) is None  # 4 there, none strictly better: rank 1
    assert rungs.judge(1, 0.49) is not None


def test_the_budget_ends_a_trial_before_the_other_rules_and_the_rung_still_counts_it():
    rungs = Rungs()
    for v in (0.9, 0.8):
        rungs.add(4, v)
    epoch = _epoch(done=8, budget=8, lineage_epochs=4, goodness=0.1, best_before_window=0.1)
    assert decide(epoch, ALL, rungs, 0.01, patience=2) == (TrialStatus.COMPLETED, None)
    assert rungs.count(4) == 3


def test_successive_halving_stops_a_trailing_trial_with_its_reason():
    rungs = Rungs()
    for v in (0.9, 0.8):
        rungs.add(4, v)
    status, reason = decide(_epoch(lineage_epochs=4, goodness=0.6), ALL, rungs, 0.01, 2)
    assert status == TrialStatus.EARLY_STOPPED and "successive halving at 4" in reason
    assert decide(_epoch(lineage_epochs=4, goodness=0.6), NONE, rungs, 0.01, 2) is None


def test_a_plateau_ends_a_trial_as_completed_with_its_gain_and_the_resolution():
    flat = _epoch(done=5, goodness=0.504, best_before_window=0.5, best_after=0.504)
    status, reason = decide(flat, ALL, Rungs(), 0.01, patience=5)
    assert status == TrialStatus.COMPLETED
    assert reason == "plateau: epochs 3-5 improved its best by 0.004, less than the resolution 0.01"
    assert decide(flat, NONE, Rungs(), 0.01, patience=5) is None
    first = _epoch(done=1, lineage_epochs=5, goodness=0.1, best_before_window=None, best_after=0.1)
    assert decide(first, ALL, Rungs(), 0.01, patience=5) is None  # nothing to improve on yet


def test_a_kept_leader_trains_on_past_its_plateau_and_budget_but_not_past_a_rung():
    flat = _epoch(done=5, goodness=0.504, best_before_window=0.5, best_after=0.504, kept=True)
    assert decide(flat, ALL, Rungs(), 0.01, patience=5) is None
    spent = _epoch(done=8, budget=8, best_before_window=0.6, best_after=0.6, kept=True)
    assert decide(spent, ALL, Rungs(), 0.01, patience=2) is None
    rungs = Rungs()
    for v in (0.9, 0.8):
        rungs.add(4, v)
    trailing = _epoch(lineage_epochs=4, goodness=0.6, kept=True)
    assert decide(trailing, ALL, rungs, 0.01, 2)[0] == TrialStatus.EARLY_STOPPED


def test_a_curve_has_flattened_when_its_window_gained_less_than_the_resolution():
    assert not flattened([], 0.01)
    assert not flattened([0.5, 0.6, 0.6], 0.01)  # no epoch before the window
    assert not flattened([0.5, 0.55, 0.6, 0.61], 0.01)
    assert flattened([0.5, 0.6, 0.603, 0.605, 0.606], 0.01)
    assert flattened([0.6, 0.5, 0.55, 0.59], 0.01)  # no new best at all


def test_the_judge_asks_whether_a_trial_is_kept_only_where_the_run_keeps_its_leader():
    asked: list[int] = []

    def kept(trial: LiveTrial) -> bool:
        asked.append(trial.id)
        return True

    curve = [0.50, 0.55, 0.60, 0.601, 0.602, 0.603, 0.604]
    trial, judge = _live(1), Judge(NO_HALVING, 0.01, 100)
    for done, value in enumerate(curve, start=1):
        trial.epochs_done = done
        assert judge.after(trial, value, kept) is None  # kept: its plateau does not end it
    assert asked == [1] * len(curve)
    no_keeping = Mechanisms(True, True, True, False, True, False, until_deadline=False)
    trial, judge, asked[:] = _live(2), Judge(no_keeping, 0.01, 100), []
    for done, value in enumerate(curve, start=1):
        trial.epochs_done = done
        if judge.after(trial, value, kept) is not None:
            break
    assert done == 6 and asked == []


def test_patience_still_stops_a_trial_without_the_plateau_rule():
    stale = _epoch(done=5, goodness=0.4, best_before_window=0.6, best_after=0.6, since_best=2)
    assert decide(stale, NONE, Rungs(), 0.01, patience=2) == (TrialStatus.EARLY_STOPPED, None)
    assert decide(stale, NONE, Rungs(), 0.01, patience=3) is None
    # with it, the plateau decides: two epochs past a best that its window gained goes on
    rising = _epoch(done=5, goodness=0.58, best_before_window=0.5, best_after=0.6, since_best=2)
    assert decide(rising, ALL, Rungs(), 0.01, patience=2) is None


def test_each_decision_reads_back_from_the_stored_row_as_its_end():
    """A trial's end (what results.json's search gain asks of a seed-only trial) is read from the
    status and reason that :func:`decide` gave it."""
    rungs = Rungs()
    for v in (0.9, 0.8):
        rungs.add(4, v)
    stale = dict(goodness=0.4, best_before_window=0.6, best_after=0.6, since_best=2)
    decisions = {
        TrialEnd.BUDGET: decide(_epoch(done=8, budget=8), ALL, Rungs(), 0.01, 2),
        TrialEnd.HALVING: decide(_epoch(lineage_epochs=4), ALL, rungs, 0.01, 2),
        TrialEnd.PLATEAU: decide(_epoch(done=5, best_after=0.504), ALL, Rungs(), 0.01, 5),
        TrialEnd.PATIENCE: decide(_epoch(done=5, **stale), NONE, Rungs(), 0.01, 2),
        TrialEnd.DEADLINE: (TrialStatus.DEADLINE, None),  # the master's, at the deadline
        TrialEnd.FAILED: (TrialStatus.FAILED, "RuntimeError: out of memory"),
    }
    row = TrialRow(
        **dict.fromkeys(("parent", "hpo_number", "recipe", "t_end", "traceback", "reason")),
        id=0,
        arch_hash="h",
        arch={},
        morph="seed",
        hparams=Hyperparameters(lr=0.1, batch_size=32),
        budget=8,
        status="running",
        num_params=1,
        t_created=0.0,
        attempts=1,
    )
    for end, decision in decisions.items():
        assert decision is not None
        status, reason = decision
        assert dataclasses.replace(row, status=status, reason=reason).end() == end
    assert row.end() == TrialEnd.RUNNING
    assert set(TRAINED_OUT) == {TrialEnd.BUDGET, TrialEnd.PLATEAU, TrialEnd.PATIENCE, "deadline"}


def test_a_seed_strategy_trial_ends_only_at_the_deadline():
    seed = Mechanisms.of(read_config(dict(strategy="seed")))
    spent = _epoch(done=100, budget=0, lineage_epochs=4, best_before_window=0.6, since_best=50)
    assert decide(spent, seed, Rungs(), 0.01, patience=1) is None


def test_the_mechanisms_apply_to_the_strategies_that_morph():
    for strategy in ("evolution", "random"):
        assert Mechanisms.of(read_config(dict(strategy=strategy))) == ALL
        off = read_config(dict(strategy=strategy, lineage_schedule=False, early_stop=False))
        expected = Mechanisms(False, True, True, False, True, False, until_deadline=False)
        assert Mechanisms.of(off) == expected
    assert Mechanisms.of(read_config(dict(strategy="none"))) == NONE  # as it always trained
    # the seed baseline: one schedule from the run's start to its end, nothing else
    assert Mechanisms.of(read_config(dict(strategy="seed", lineage_schedule=False))) == Mechanisms(
        True, False, False, False, False, False, until_deadline=True
    )
    # a kept leader's flattened curve is what makes a child grow, and its schedule must run to
    # the deadline: without the plateau rule or the lineage's schedule, nothing is kept
    for off in ("grow_on_plateau", "lineage_schedule"):
        assert not Mechanisms.of(read_config({off: False})).keep_leader, off


def test_a_new_trials_budget_by_mechanism():
    config = read_config(dict(minutes=10.0, epochs_min=2, epochs_max=6))
    # drawn: from epochs_min at the start, never more than fit at 100 s an epoch
    assert trial_budget(config, NONE, 600.0, []) == 2
    assert trial_budget(config, NONE, 150.0, [100.0]) == 1
    assert trial_budget(config, ALL, 150.0, [100.0]) == 6  # its plateau ends it: epochs_max caps
    seed = Mechanisms.of(read_config(dict(strategy="seed")))
    assert trial_budget(config, seed, 150.0, [100.0]) == 0  # until the deadline


def _live(trial_id: int) -> LiveTrial:
    # its first epoch is its lineage's fourth: a rung
    return live_trial(id=trial_id, parent=2, lineage=Lineage(0.0, 3))


def test_the_judge_keeps_a_trials_best_and_decides_by_its_lineage_epochs():
    judge = Judge(ALL, resolution=0.01, patience=2)
    for v in (0.9, 0.8):
        judge.rungs.add(4, v)
    leader, trailer = _live(5), _live(6)
    leader.epochs_done = trailer.epochs_done = 1
    assert judge.after(leader, 0.95, _not_kept) is None  # first of 3 at rung 4
    assert (leader.best_goodness, leader.best_epoch) == (0.95, 1)
    status, reason = judge.after(trailer, 0.85, _not_kept)  # 3rd of 4 there: not the better 2
    assert status == TrialStatus.EARLY_STOPPED and "ranked 3 of the 4" in reason
    for done, value in ((2, 0.953), (3, 0.956)):  # lineage epochs 5, 6: no rungs
        leader.epochs_done = done
        assert judge.after(leader, value, _not_kept) is None  # under PLATEAU_EPOCHS + 1 epochs
    leader.epochs_done = 4
    # epochs 2-4 gained 0.009 over epoch 1's best
    status, reason = judge.after(leader, 0.959, _not_kept)
    assert status == TrialStatus.COMPLETED and reason.startswith("plateau: epochs 2-4")
    assert (leader.best_goodness, leader.best_epoch) == (0.959, 4)
    assert leader.history == [0.95, 0.953, 0.956, 0.959]
    assert judge.rungs.count(4) == 4 and judge.rungs.count(5) == 0


def _judged(curve: list[float], resolution: float = 0.01) -> tuple[int, str | None] | None:
    """The epoch at which a trial of this curve (goodness by epoch) ends by the judge's rules
    with every mechanism but early stopping, and its reason (None: it trains on)."""
    judge = Judge(NO_HALVING, resolution, 100)
    trial = _live(1)
    for done, value in enumerate(curve, start=1):
        trial.epochs_done = done
        ended = judge.after(trial, value, _not_kept)
        if ended is not None:
            return done, ended[1]
    return None


def test_the_plateau_window_lets_a_slow_steady_gain_go_on_and_ends_a_flat_curve():
    assert PLATEAU_EPOCHS == 3
    # gaining 0.4 of the resolution each epoch: under it each epoch, over it in three
    assert _judged([0.5 + 0.004 * e for e in range(7)]) is None  # (its budget is 8)
    # one noisy epoch (a dip, then no new best) does not end a rising trial
    assert _judged([0.50, 0.52, 0.515, 0.54, 0.56, 0.58]) is None
    # a curve that flattens after its third epoch ends three epochs later
    done, reason = _judged([0.50, 0.55, 0.60, 0.601, 0.602, 0.603, 0.604])
    assert done == 6 and reason.startswith("plateau: epochs 4-6 improved its best by 0.003")
    # a loss (goodness negated) flattening likewise
    assert _judged([-2.5, -2.4, -2.3, -2.299, -2.298, -2.297], resolution=0.005)[0] == 6


def test_a_resumed_trial_judges_its_window_with_the_epochs_before_the_resume():
    trial = _live(1)
    trial.history = [0.5, 0.55, 0.6]
    trial.epochs_done = 4
    judge = Judge(NO_HALVING, 0.01, 100)
    assert judge.after(trial, 0.601, _not_kept) is None  # epochs 2-4 gained 0.051 over epoch 1
    trial.epochs_done = 5
    assert judge.after(trial, 0.602, _not_kept) is None  # epochs 3-5: 0.052 over 0.55
    trial.epochs_done = 6
    assert judge.after(trial, 0.603, _not_kept)[1].startswith("plateau: epochs 4-6")
