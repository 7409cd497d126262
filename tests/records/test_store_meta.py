"""The store's typed seams: its metadata as a RunMeta, the states as enums whose values are the
strings stores hold, screenings and epochs in and out as records, byte for byte as before."""

from __future__ import annotations

import dataclasses
import json
import shutil
import sqlite3
from pathlib import Path

import pytest

from aihpc.base.errors import DataError
from aihpc.records.messages import EpochResult, EpochStatus, ScreenStatus, WeightsRef
from aihpc.records.meta import MetaKey, RunMeta
from aihpc.records.rows import FINISHED, Candidate, ScreeningRow, TrialRow, TrialStatus
from aihpc.records.store import RunDirState, RunStore, read_meta, run_dir_state

FIXTURE = Path(__file__).parents[1] / "fixtures" / "run"


def test_the_states_are_the_strings_stores_hold() -> None:
    assert [s.value for s in TrialStatus] == [
        "running",
        "completed",
        "early_stopped",
        "deadline",
        "diverged",
        "failed",
    ]
    assert set(FINISHED) == set(TrialStatus) - {TrialStatus.RUNNING}
    assert [s.value for s in EpochStatus] == ["ok", "deadline", "diverged", "failed"]
    assert [s.value for s in ScreenStatus] == ["ok", "failed"]
    assert [s.value for s in RunDirState] == ["new", "run", "other"]
    assert TrialStatus.EARLY_STOPPED == "early_stopped" and f"{EpochStatus.OK}" == "ok"
    assert json.dumps({TrialStatus.FAILED: [EpochStatus.DIVERGED]}) == '{"failed": ["diverged"]}'


def test_every_meta_key_is_a_field_of_run_meta() -> None:
    assert {f.name for f in dataclasses.fields(RunMeta)} == {k.value for k in MetaKey}


def test_an_old_store_reads_typed_with_the_defaults_of_what_it_lacks(tmp_path: Path) -> None:
    """The fixture run's store predates devices, energy, staging and helper restarts."""
    run = tmp_path / "run"
    run.mkdir()
    shutil.copy(FIXTURE / "aihpc.sqlite", run / "aihpc.sqlite")
    assert run_dir_state(run) == RunDirState.RUN
    meta = read_meta(run / "aihpc.sqlite")
    assert meta.finished is True and meta.store_format >= 1
    assert meta.config is not None and meta.config["dataset"]
    assert isinstance(meta.peak_flops_per_s, float) and meta.peak is not None
    assert (meta.devices, meta.energy, meta.staging) == (None, None, None)
    assert meta.helper_restarts == []
    store = RunStore.read_only(run)
    try:
        assert store.meta() == meta
        trials = store.trials()
        assert {t.status for t in trials} <= set(TrialStatus)
        assert all(type(t.status) is TrialStatus for t in trials)
        assert all(type(e.status) is EpochStatus for e in store.epochs())
        assert store.screenings() == []  # no screenings table
    finally:
        store.close()


def test_a_store_without_a_key_gives_its_default(tmp_path: Path) -> None:
    store = RunStore(tmp_path)
    try:
        assert store.meta() == RunMeta()
        assert store.meta().store_format == 1 and store.meta().finished is False
        store.set_meta(MetaKey.RUN_ID, "r1")
        store.set_meta(MetaKey.HELPER_RESTARTS, [{"t": 1.0}])
        with store.db:  # a key this aihpc does not know (a newer one's) is left out
            store.db.execute("INSERT INTO meta (key, value) VALUES ('someday', '1')")
        meta = store.meta()
        assert meta.run_id == "r1" and meta.helper_restarts == [{"t": 1.0}]
        raw = dict(store.db.execute("SELECT key, value FROM meta"))
        assert raw["run_id"] == '"r1"'  # the JSON as before
    finally:
        store.close()
    assert read_meta(tmp_path / "aihpc.sqlite") == meta


def _screening(status: ScreenStatus) -> ScreeningRow:
    ok = status == ScreenStatus.OK
    candidates = tuple(
        Candidate(
            arch={"layers": [i]},
            arch_hash=f"h{i}",
            morph="widen",
            ops=10 * i if ok else 0,
            predicted=0.5 + i if ok else None,
            proxies={"synflow": 1.0, "snip": None} if ok else None,
        )
        for i in range(2)
    )
    return ScreeningRow(
        id=0,
        parent=0,
        trial=1 if ok else None,
        status=status,
        worker="w0",
        t_start=1.0,
        t_end=2.0,
        batch=64,
        ops=sum(c.ops for c in candidates),
        chosen=1 if ok else None,
        candidates=candidates,
        reason=None if ok else "RuntimeError: no",
    )


@pytest.mark.parametrize("status", list(ScreenStatus))
def test_a_screening_is_stored_as_before_and_read_back(tmp_path: Path, status) -> None:
    row = _screening(status)
    store = RunStore(tmp_path)
    try:
        store.add_screening(row)
        assert store.screenings() == [row]
        raw = store.raw_rows("screenings")[0]
        candidates = [
            {
                "arch": c.arch,
                "arch_hash": c.arch_hash,
                "morph": c.morph,
                "predicted": c.predicted,
                "proxies": c.proxies,
                "ops": c.ops,
            }
            for c in row.candidates
        ]
        assert raw["candidates"] == json.dumps(candidates, sort_keys=True)
        assert type(raw["status"]) is str and raw["status"] == status.value
    finally:
        store.close()


def test_bad_screening_rows_are_data_errors() -> None:
    with pytest.raises(DataError, match="a screening's status is one of .*, got 'lost'"):
        dataclasses.replace(_screening(ScreenStatus.OK), status="lost")
    with pytest.raises(DataError, match="a screening candidate has the fields"):
        Candidate.from_dict({"arch": {}, "arch_hash": "h"})


def test_an_epoch_is_stored_with_plain_strings_and_read_back_typed(tmp_path: Path) -> None:
    result = EpochResult(
        3,
        1,
        "ok",
        "w0",
        1.0,
        2.0,
        ops_train=7,
        ops_eval=3,
        metrics={"val_accuracy": 0.5},
        weights=WeightsRef("t3-e1.pt", "abc"),
    )
    assert result.status is EpochStatus.OK and result.ops == 10
    store = RunStore(tmp_path)
    try:
        store.add_epoch(result, attempt=2)
        (row,) = store.epochs(3)
        assert row.status is EpochStatus.OK and row.attempt == 2
        assert (row.trial_id, row.ops, row.weights, row.metrics) == (
            3,
            10,
            result.weights,
            result.metrics,
        )
        query = "SELECT typeof(status), status FROM epochs"
        assert tuple(store.db.execute(query).fetchone()) == ("text", "ok")
    finally:
        store.close()
    with pytest.raises(DataError, match="an epoch's status is one of .*, got 'lost'"):
        dataclasses.replace(result, status="lost")


def test_a_trial_row_takes_its_status_as_the_stored_string() -> None:
    store_row = sqlite3.connect(":memory:")  # the value as SQLite gives it back: a str
    (status,) = store_row.execute("SELECT 'early_stopped'").fetchone()
    fields = {f.name: None for f in dataclasses.fields(TrialRow)}
    row = TrialRow(**{**fields, "status": status, "attempts": 0})
    assert row.status is TrialStatus.EARLY_STOPPED
