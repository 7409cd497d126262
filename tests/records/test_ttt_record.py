"""The train-to-target summary as records: to_dict writes ttt.json's keys, from_dict reads them."""

from __future__ import annotations

import json

import pytest

from aihpc.base.errors import DataError
from aihpc.records.ttt import TTTInstance, TTTRun, TTTSummary


def _instance(**changes) -> TTTInstance:
    fields = dict(
        run=0,
        instance=0,
        seed=1,
        reached=False,
        quality=0.5,
        best=0.4,
        epochs=2,
        time_to_train_s=3.0,
        staging_s=0.1,
        staged_bytes=100,
        run_start_ms=1000,
        run_stop_ms=4000,
        curve=((1, 1.5, 0.6), (2, 3.0, None)),
        train_ops_per_sample=10,
        eval_ops_per_sample=3,
        total_ops=1000,
        ops_per_s=333.3,
        mlperf_log="/o/mlperf_r0_i0.log",
        compliant=True,
    )
    return TTTInstance(**{**fields, **changes})


def _summary(runs: tuple[TTTRun, ...]) -> TTTSummary:
    return TTTSummary(
        workload="cosmoflow",
        benchmark="aihpc_cosmoflow",
        size="tiny",
        metric="mae",
        higher_is_better=False,
        target=0.2,
        reference_target=0.2,
        target_note="why",
        division="open",
        runs=runs,
        instances=1,
        runs_planned=2,
        runs_completed=len(runs),
        max_epochs=2,
        max_seconds=600.0,
        seed=0,
        time_to_train_s=3.0,
        time_to_train_aggregate="plain mean",
        staging_s=0.1,
        models_per_minute=20.0,
        models_per_minute_aggregate="plain mean",
        all_reached=False,
        all_compliant=True,
        generation_s=None,
        data_dir="/o/data",
        compliance_output={},
    )


def test_the_summary_round_trips_through_its_json() -> None:
    run = TTTRun(
        instances=(_instance(),),
        time_to_train_s=3.0,
        wall_s=3.0,
        models_per_minute=20.0,
        ops_per_s=333.3,
        reached=False,
    )
    summary = _summary((run,))
    d = json.loads(json.dumps(summary.to_dict()))
    assert d["runs"][0]["instances"][0]["curve"] == [[1, 1.5, 0.6], [2, 3.0, None]]
    assert len(d) == 26 and len(d["runs"][0]) == 6 and len(d["runs"][0]["instances"][0]) == 20
    assert TTTSummary.from_dict(d) == summary
    # a ttt.json from before instances named their host reads, the host unknown
    del d["runs"][0]["instances"][0]["host"]
    assert TTTSummary.from_dict(d).runs[0].instances[0].host is None
    assert summary.missed() == [run.instances[0]]


def test_records_are_validated_on_construction() -> None:
    with pytest.raises(DataError, match="run_stop_ms must be >= run_start_ms \\(1000\\), got 10"):
        _instance(run_stop_ms=10)
    with pytest.raises(DataError, match="epochs must be >= 0, got -1"):
        _instance(epochs=-1)
    with pytest.raises(DataError, match="needs >= 1 instance, got 0"):
        TTTRun(
            instances=(),
            time_to_train_s=0.0,
            wall_s=0.0,
            models_per_minute=None,
            ops_per_s=None,
            reached=True,
        )
    with pytest.raises(DataError, match="runs_completed must be in \\[1, 2\\], got 0"):
        _summary(())
    with pytest.raises(DataError, match="a TTTRun record needs wall_s"):
        TTTRun.from_dict({"instances": [], "time_to_train_s": 1.0})
