"""The learning-rate schedule along a lineage (aihpc.runner.search.lineage): its positions against
an exact reference, and the rate a step trains at, parent to child, against the schedule of the
run's clock."""

from __future__ import annotations

import math
import random
from fractions import Fraction

import pytest
from runner_helpers import live_trial

from aihpc.records.trial import Hyperparameters
from aihpc.runner.search.lineage import (
    MARGIN,
    MIN_SHARE,
    Lineage,
    expected_seconds,
    last_share,
    positions,
    steady_seconds,
)
from aihpc.runner.search.proposals import Moment
from aihpc.runner.search.work import Work
from aihpc.tasks import read_config
from aihpc.train.optim import learning_rate, step_position


def _exact(start: float, t: float, run_length: float) -> float:
    """The position at run time ``t`` in exact arithmetic, held within [0, 1], of a schedule that
    ends with the run."""
    end = Fraction(run_length)
    if end <= Fraction(start):
        return 1.0
    f = (Fraction(t) - Fraction(start)) / (end - Fraction(start))
    return float(min(max(f, Fraction(0)), Fraction(1)))


def test_positions_match_exact_arithmetic():
    rng = random.Random(7)
    for _ in range(2000):
        run_length = rng.uniform(10.0, 7200.0)
        start = rng.uniform(0.0, run_length * 0.99)
        t = rng.uniform(start, run_length * 1.1)
        seconds = rng.uniform(0.0, run_length / 4)
        reached = rng.choice([0.0, rng.uniform(0.0, 1.0)])  # where the lineage's last epoch ended
        at, end = positions(start, t, seconds, run_length, reached)
        exact = max(_exact(start, t, run_length), reached)
        assert at == pytest.approx(exact, rel=1e-12, abs=1e-15)
        assert end == pytest.approx(
            max(_exact(start, t + seconds, run_length), exact), rel=1e-12, abs=1e-15
        )
        assert 0.0 <= at <= end <= 1.0


def test_positions_at_the_edges():
    """The schedule ends with the run: an epoch that ends at the deadline (a last one, sized to
    the time left) ends annealed."""
    assert positions(0.0, 0.0, 10.0, 100.0) == (0.0, 0.1)  # a root at the run's start
    assert positions(40.0, 40.0, 30.0, 100.0) == (0.0, 0.5)  # a root that starts later
    assert positions(0.0, 90.0, 10.0, 100.0) == (0.9, 1.0)  # an epoch that ends at the deadline
    assert positions(0.0, 85.0, 10.0, 100.0) == pytest.approx((0.85, 0.95))
    assert positions(0.0, 95.0, 10.0, 100.0) == (0.95, 1.0)  # one the deadline cuts
    assert positions(100.0, 100.0, 5.0, 100.0) == (1.0, 1.0)  # nothing left of the run
    # ahead of the clock: it starts where the last epoch ended and holds until the clock is there
    assert positions(0.0, 10.0, 10.0, 100.0, reached=0.4) == (0.4, 0.4)
    assert positions(0.0, 10.0, 40.0, 100.0, reached=0.4) == (0.4, 0.5)


def test_a_last_epoch_is_sized_to_end_its_validation_before_the_deadline():
    """An epoch of 20 s (4 of them validating) sent 11 s before the deadline trains the share of
    its 16 s of steps that ends validation MARGIN of the 11 s early: (11 * 0.9 - 4) / 16."""
    assert last_share(20.0, 4.0, 25.0) == 1.0  # it ends in time
    share = last_share(20.0, 4.0, 11.0)
    assert share == pytest.approx((11.0 * (1 - MARGIN) - 4.0) / 16.0)
    assert share * 16.0 + 4.0 == pytest.approx(11.0 * (1 - MARGIN))
    # what is left after a sized epoch (about MARGIN of it) sizes no second one: sent whole
    assert last_share(20.0, 4.0, 1.1) == 1.0
    assert last_share(20.0, 0.0, 20.0 * MIN_SHARE / (1 - MARGIN) * 0.99) == 1.0  # under MIN_SHARE
    assert last_share(20.0, 0.0, 20.0 * MIN_SHARE / (1 - MARGIN) * 1.01) >= MIN_SHARE
    assert last_share(20.0, 25.0, 10.0) == 1.0  # not even the validation would end in time


def test_a_lineage_passes_its_epochs_on():
    root = Lineage(start=12.5, epochs=0)
    child = root.after(3)
    assert child == Lineage(12.5, 3) and child.after(2) == Lineage(12.5, 5)


def test_the_expected_seconds_come_from_the_best_evidence_at_hand():
    assert expected_seconds(4.0, 9.0, [1.0, 2.0, 30.0], 100.0, 5) == 4.0  # its own last epoch
    assert expected_seconds(None, 9.0, [1.0, 2.0, 30.0], 100.0, 5) == 9.0  # from its parent's
    assert expected_seconds(None, None, [1.0, 2.0, 30.0], 100.0, 5) == 2.0  # the run's median
    assert expected_seconds(None, None, [], 100.0, 5) == 20.0  # the run left over its epochs
    assert expected_seconds(None, None, [], 100.0, 0) == 100.0


def test_a_lineages_steps_follow_one_schedule_of_the_run_clock_through_a_child():
    """A root starts at t = 20 s of a 300 s run; it trains two epochs of 30 s, its child (grown,
    so 45 s an epoch) three, each epoch 50 steps, every epoch as long as expected.  The rate of
    every step, as a worker computes it from its task's two positions, equals the cosine
    schedule with warm-up at that step's run time: one schedule, one warm-up, no restart."""
    run_length, start, steps = 300.0, 20.0, 50
    hp = Hyperparameters(lr=1e-3, batch_size=16, optimizer="adamw", warmup=0.05)
    lineage, t = Lineage(start, 0), start
    rates, reference = [], []
    for seconds, epochs in ((30.0, 2), (45.0, 3)):  # the root, then the child
        for _ in range(epochs):
            a, b = positions(lineage.start, t, seconds, run_length)
            for i in range(steps):
                rates.append(learning_rate(hp, step_position(a, b, i, steps)))
                f = _exact(start, t + seconds * i / steps, run_length)
                warm = hp.lr * 0.5 * (1 + math.cos(math.pi * hp.warmup))
                reference.append(
                    warm * f / hp.warmup
                    if f < hp.warmup
                    else hp.lr * 0.5 * (1 + math.cos(math.pi * f))
                )
            t += seconds
        lineage = lineage.after(epochs)
    assert rates == pytest.approx(reference, rel=1e-9, abs=1e-15)
    # one warm-up, from 0 until 5 % of the lineage's schedule of 280 s (it ends with the run:
    # t = 34 s, step 23.3 of the first epoch's 0.6 s steps), then a decay that never rises
    # again, also across the growth
    peak = rates.index(max(rates))
    assert rates[0] == 0.0 and peak in (23, 24)
    assert rates[:peak] == sorted(rates[:peak])
    assert rates[peak:] == sorted(rates[peak:], reverse=True)


def test_a_next_epoch_is_expected_to_take_its_last_less_what_it_paid_once():
    phases = {"forward": 3.0, "backward": 4.0, "other": 2.5, "compile": 1.5}
    assert steady_seconds(12.0, phases) == 8.0  # building, counting, compiling: not again
    assert steady_seconds(12.0, {}) == 12.0  # nothing timed by phase
    assert steady_seconds(3.0, {"other": 3.0}) == 3.0  # nothing else timed: all of it


@pytest.mark.parametrize("along_lineage", [True, False])
def test_the_master_sizes_an_epoch_that_would_end_after_the_deadline(along_lineage, tmp_path):
    """Sent 11 s before the end of a 60 s run, an epoch of 20 s trains the share that ends it in
    time; along a lineage it ends at the schedule's end (a trial's own schedule keeps its own
    positions).  Sent 30 s before, it is whole."""
    work = Work(read_config(dict(minutes=1.0)), str(tmp_path), None, along_lineage)
    trial = live_trial(id=3, epoch_seconds=20.0, eval_seconds=4.0)  # 4 s of it validating
    task = work.epoch(trial, 1, deadline=0.0)
    late = work.scheduled(task, trial, Moment(49.0, 11.0, None), [])
    assert late.share == last_share(20.0, 4.0, 11.0) and 0.0 < late.share < 1.0
    if along_lineage:
        assert (late.schedule_from, late.schedule_to) == pytest.approx((49.0 / 60.0, 1.0))
    else:
        assert late.positions() == (0.0, 1.0 / 8.0)  # epoch 1 of its own 8
    early = work.scheduled(task, trial, Moment(30.0, 30.0, None), [])
    assert early.share == 1.0
    if along_lineage:
        assert early.positions() == pytest.approx((0.5, 50.0 / 60.0))
