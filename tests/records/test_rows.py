"""The store's rows as records: read from the fixture run's store, validated on construction."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import pytest

from aihpc.base.errors import DataError
from aihpc.records.messages import WeightsRef
from aihpc.records.rows import EpochRow, TrialRow
from aihpc.records.store import RunStore
from aihpc.records.trial import Hyperparameters

FIXTURE = Path(__file__).parents[1] / "fixtures" / "run"


@pytest.fixture(scope="module")
def rows(tmp_path_factory):
    run = tmp_path_factory.mktemp("run")
    shutil.copy(FIXTURE / "aihpc.sqlite", run / "aihpc.sqlite")
    store = RunStore.read_only(run)
    try:
        yield store.trials(), store.epochs()
    finally:
        store.close()


def test_store_rows_are_typed_and_round_trip(rows):
    trials, epochs = rows
    assert trials and epochs
    assert all(isinstance(t.hparams, Hyperparameters) for t in trials)
    assert all(e.weights is None or isinstance(e.weights, WeightsRef) for e in epochs)
    assert [TrialRow.from_dict(t.to_dict()) for t in trials] == trials
    assert [EpochRow.from_dict(e.to_dict()) for e in epochs] == epochs


def test_store_rows_are_validated_on_construction(rows):
    trials, epochs = rows
    with pytest.raises(DataError, match="a trial's status is running or one of .*, got 'lost'"):
        dataclasses.replace(trials[0], status="lost")
    with pytest.raises(DataError, match="an epoch's number must be >= 1, got 0"):
        dataclasses.replace(epochs[0], epoch=0)
    with pytest.raises(DataError, match="an epoch's operations must be >= 0, got -1"):
        dataclasses.replace(epochs[0], ops_train=-1)
