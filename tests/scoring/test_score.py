import math
import os

import pytest

from aihpc.base.errors import DataError
from aihpc.scoring.accuracy import Accuracy
from aihpc.scoring.score import Score, Segment, active_seconds, compute_score, wall_seconds


def test_score_against_a_hand_computation():
    # 3.0e12 operations in 300 s -> 1.0e10 OPS; best accuracy 0.95 over 1000 val samples
    s = compute_score(
        ops=3_000_000_000_000,
        wall_seconds=300.0,
        best=0.95,
        quality=Accuracy(1000, 0.5),
        peak_flops_per_s=4.0e10,
    )
    assert s.ops_per_second == pytest.approx(1.0e10)
    assert s.error_percent == pytest.approx(5.0)
    # |ln(1 - 0.95)| = ln 20 = 2.995732...
    assert s.regulated_score == pytest.approx(1.0e10 * 2.995732273553991)
    assert s.peak_fraction == pytest.approx(0.25)
    assert s.valid is True and s.invalid_reason is None


def test_below_minimum_accuracy_is_invalid_with_reason():
    s = compute_score(ops=10, wall_seconds=1.0, best=0.3, quality=Accuracy(100, 0.5))
    assert s.valid is False
    assert "0.3000 is below the minimum 0.5000" in s.invalid_reason
    assert s.peak_fraction is None


def test_no_evaluation_is_invalid():
    s = compute_score(ops=0, wall_seconds=10.0, best=None, quality=Accuracy(100, 0.0))
    assert s.valid is False and s.error_percent == 100.0 and s.regulated_score == 0.0


def test_perfect_accuracy_is_capped_at_half_a_sample():
    s = compute_score(ops=100, wall_seconds=1.0, best=1.0, quality=Accuracy(50, 0.5))
    assert math.isfinite(s.regulated_score)
    assert s.regulated_score == pytest.approx(100 * math.log(100))  # 1 - 0.5/50 = 0.99


def test_score_round_trips_through_results_json_block():
    s = compute_score(ops=10, wall_seconds=2.0, best=0.9, quality=Accuracy(100, 0.5))
    block = {**s.to_dict(), "trials_completed": 3, "screening_ops": 0}
    assert len(s.to_dict()) == 14 and Score.from_dict(block) == s
    older = {k: v for k, v in block.items() if k not in Score.ADDED_LATER}  # a file before them
    assert len(older) == 13 and Score.from_dict(older) == s


def test_the_share_of_the_nominal_peak_beside_the_measured_one():
    s = compute_score(
        ops=3_000_000_000_000,
        wall_seconds=300.0,
        best=0.95,
        quality=Accuracy(1000, 0.5),
        peak_flops_per_s=4.0e10,
        nominal_peak_flops_per_s=5.0e10,
    )
    assert s.peak_fraction == pytest.approx(0.25) and s.nominal_peak_fraction == pytest.approx(0.2)
    assert s.nominal_peak_flops_per_s == 5.0e10 and s.peak_warning is None
    unknown = compute_score(
        ops=10,
        wall_seconds=1.0,
        best=0.9,
        quality=Accuracy(10, 0.5),
        peak_flops_per_s=100.0,
        nominal_peak_flops_per_s=None,
    )
    assert unknown.nominal_peak_fraction is None and unknown.peak_fraction == pytest.approx(0.1)


def test_a_share_of_the_measured_peak_above_100_percent_is_flagged():
    at = compute_score(
        ops=100, wall_seconds=1.0, best=0.9, quality=Accuracy(10, 0.5), peak_flops_per_s=100.0
    )
    assert at.peak_fraction == 1.0 and at.peak_warning is None
    over = compute_score(
        ops=104, wall_seconds=1.0, best=0.9, quality=Accuracy(10, 0.5), peak_flops_per_s=100.0
    )
    assert over.peak_warning is not None
    assert "104.0 % of the measured peak" in over.peak_warning and "unreliable" in over.peak_warning
    assert Score.from_dict(over.to_dict()).peak_warning == over.peak_warning


def test_score_is_validated_on_construction():
    s = compute_score(ops=10, wall_seconds=2.0, best=0.9, quality=Accuracy(100, 0.5))
    with pytest.raises(DataError, match="valid exactly when it has no invalid_reason"):
        Score.from_dict({**s.to_dict(), "valid": False})
    with pytest.raises(DataError, match="ops must be >= 0, got -1"):
        Score.from_dict({**s.to_dict(), "ops": -1})
    with pytest.raises(DataError, match=r"best_accuracy must be in \[0, 1\], got 1.5"):
        Score.from_dict({**s.to_dict(), "best_accuracy": 1.5})


def test_segment_is_written_relative_to_the_run_start_and_validated():
    segment = Segment(100.0, 160.0)
    assert segment.to_dict(t0=40.0) == {"t_start": 60.0, "t_end": 120.0}
    assert Segment.from_dict(segment.to_dict(t0=40.0), t0=40.0) == segment
    with pytest.raises(DataError, match="stops at or after it starts, got 2.0..1.0"):
        Segment(2.0, 1.0)


def test_wall_clock_counts_downtime_budget_does_not():
    segments = [Segment(100.0, 160.0), Segment(400.0, 640.0)]  # killed at 160, resumed at 400
    assert wall_seconds(segments) == 540.0
    assert active_seconds(segments) == 300.0
    assert wall_seconds([]) == 0.0


def _peaks(**flops: float) -> dict:
    """A run's peak as the store keeps it, for the workers named, each at its FLOP/s."""
    per_worker = [{"worker": name, "flops_per_s": f} for name, f in flops.items()]
    return {
        "total_flops_per_s": sum(flops.values()),
        "workers": len(flops),
        "per_worker": per_worker,
    }


def test_peak_drift_is_flagged_past_ten_percent():
    from aihpc.runner.measure import peak_drift
    from aihpc.scoring.peak import PEAK_DRIFT

    before = _peaks(a=60e9, b=40e9)
    steady = peak_drift(before, _peaks(a=57e9, b=38e9))
    assert steady["drift"] == pytest.approx(-0.05) and steady["drift_warning"] is None
    assert steady["drift_workers"] == ["a", "b"]
    slowed = peak_drift(before, _peaks(a=50e9, b=35e9))
    assert slowed["drift"] == pytest.approx(-0.15) and PEAK_DRIFT == 0.10
    assert slowed["drift_warning"].startswith(
        "the machine's peak changed by -15.0 % during the run"
    )
    assert slowed["after"] == _peaks(a=50e9, b=35e9)


def test_peak_drift_compares_the_workers_measured_both_times_each_with_its_own_peak():
    # b was lost during the run and c joined it, each on a node of its own: the drift is a's
    # alone, +5 %, where the totals (63 against 100) would say -37 %
    from aihpc.runner.measure import peak_drift

    drift = peak_drift(_peaks(a=60e9, b=40e9), _peaks(a=63e9, c=50e9))
    assert drift["drift"] == pytest.approx(0.05) and drift["drift_workers"] == ["a"]
    assert drift["drift_warning"] is None
    unknown = peak_drift(_peaks(a=60e9, b=40e9), _peaks(c=50e9))
    assert unknown["drift"] is None and unknown["drift_workers"] == []
    assert unknown["drift_warning"] == (
        "none of the 2 worker(s) measured before the run was measured after it beside the same "
        "workers of its node (workers were lost or joined): the peak's drift is not known"
    )


def test_peak_drift_leaves_out_the_node_of_a_lost_worker():
    # a and b share node x, d is alone on y; b was lost: a measured alone on x (+50 %: the
    # node's cores to itself) is no drift of the machine, d is compared
    from aihpc.runner.measure import peak_drift

    hosts = {"a": "x", "b": "x", "d": "y"}
    drift = peak_drift(_peaks(a=40e9, b=40e9, d=40e9), _peaks(a=60e9, d=38e9), hosts)
    assert drift["drift_workers"] == ["d"] and drift["drift"] == pytest.approx(-0.05)
    alone = peak_drift(_peaks(a=40e9, b=40e9), _peaks(a=60e9), {"a": "x", "b": "x"})
    assert alone["drift"] is None and alone["drift_workers"] == []


def test_peak_after_a_run_that_lost_a_worker_is_measured_on_those_left_without_waiting(tmp_path):
    # The run began on workers 0 and 1, each on a node of its own; only 0 is alive at its end (1
    # lost with its node): the peak after is measured on 0 at once (it used to wait 30 s for 1,
    # then give up), and its drift is 0's own, against 0's peak before.
    import time

    import aihpc.runner.measure as measure
    from aihpc.launch.executor import local_executor, local_layout
    from aihpc.records.meta import MetaKey
    from aihpc.records.store import RunStore

    environ = dict(os.environ)  # Dask's nanny sets OMP_NUM_THREADS=1 & co. in this very process
    store = RunStore(tmp_path)
    store.set_meta(MetaKey.PEAK, _peaks(**{"0": 2e9, "1": 5e9}))
    nodes = [{"worker": "0", "host": "node-a"}, {"worker": "1", "host": "node-b"}]
    store.set_meta(MetaKey.DEVICES, {"workers": nodes})
    layout = local_layout(1, 1, "cpu")
    executor = local_executor(layout)
    try:
        executor.wait_for_workers(1, timeout=120)
        began = time.monotonic()
        measure.record_peak_after(store, executor, layout, 0.2, ("matmul",))
        seconds = time.monotonic() - began
    finally:
        executor.close()
        store.close()
        os.environ.clear()
        os.environ.update(environ)
    store = RunStore(tmp_path)
    peak = store.meta().peak
    store.close()
    # the old path could not end before it had waited the whole time for worker 1
    assert seconds < measure.PLACED_WAIT_SECONDS, seconds
    (after,) = peak["after"]["per_worker"]
    assert after["worker"] == "0" and peak["drift_workers"] == ["0"]
    assert peak["drift"] == pytest.approx(after["flops_per_s"] / 2e9 - 1)
    assert peak["total_flops_per_s"] == 7e9  # the peak before, kept as it was


def test_the_peak_before_the_run_waits_for_every_placed_worker(monkeypatch):
    # A worker the scheduler dropped for a moment (a heartbeat missed under load) is waited for:
    # measuring the workers alive at that moment would under-count the machine's peak, and
    # measuring none used to fail the run as a user's mistake ("a run's peak needs at least
    # one worker's"). Here 2 were placed and 1 is alive: WorkersLost, a machine failure.
    import aihpc.runner.measure as measure
    from aihpc.base.errors import WorkersLost
    from aihpc.launch.executor import local_executor, local_layout

    monkeypatch.setattr(measure, "PLACED_WAIT_SECONDS", 0.5)
    environ = dict(os.environ)
    layout = local_layout(1, 1, "cpu")
    executor = local_executor(layout)
    try:
        with pytest.raises(WorkersLost, match="no 2 Dask worker"):
            measure.measure_run_peak(executor, layout, 0.2, 1, workers=2)
        peak = measure.measure_run_peak(executor, layout, 0.2, 1, workers=1)
    finally:
        executor.close()
        os.environ.clear()
        os.environ.update(environ)
    assert peak.workers == 1 and peak.total_flops_per_s > 0


def test_the_peak_before_the_run_is_measured_again_when_a_worker_missed_it(monkeypatch):
    """As on a loaded SLURM node: both placed workers had joined, but the scheduler's list lacked
    one at the moment the peak was asked for (CI: the two-node run's peak had its lost worker
    alone).  The peak is measured again once both are there, so it holds every placed device."""
    import aihpc.runner.measure as measure
    from aihpc.launch.executor import local_executor, local_layout

    environ = dict(os.environ)
    layout = local_layout(2, 1, "cpu")
    executor = local_executor(layout)
    answered = executor.run_on_each
    calls: list[int] = []

    def one_missing_at_first(fn, *args):  # the first answer lacks the last worker's
        answers = answered(fn, *args)
        calls.append(len(answers))
        return answers[:-1] if len(calls) == 1 else answers

    executor.run_on_each = one_missing_at_first  # type: ignore[method-assign]
    try:
        peak = measure.measure_run_peak(executor, layout, 0.2, 1, workers=2)
    finally:
        executor.close()
        os.environ.clear()
        os.environ.update(environ)
    assert calls == [2, 2] and peak.workers == 2
    assert len({w.worker for w in peak.per_worker}) == 2
