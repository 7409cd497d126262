"""A trial's records: the hyperparameters keep the JSON the store and results.json hold."""

from __future__ import annotations

import json

import pytest

from aihpc.base.errors import DataError
from aihpc.records.trial import Hyperparameters

STORED = (
    '{"batch_size": 128, "dropout": 0.4540407931943971, "lr": 0.0036872064985112177, '
    '"momentum": 0.7363383118184481, "optimizer": "sgd", "schedule": "cosine", '
    '"weight_decay": 8.824113086725108e-06}'
)  # a trial's row in tests/fixtures/run


def test_hyperparameters_round_trip_the_stored_json():
    hp = Hyperparameters.from_dict(json.loads(STORED))
    assert hp.batch_size == 128 and hp.optimizer == "sgd"
    assert json.dumps(hp.to_dict(), sort_keys=True) == STORED


def test_hyperparameters_not_given_are_the_trainers_defaults():
    hp = Hyperparameters(lr=0.1, batch_size=32)
    assert (hp.momentum, hp.weight_decay, hp.dropout, hp.optimizer, hp.schedule) == (
        0.9,
        0.0,
        0.0,
        "sgd",
        "cosine",
    )


@pytest.mark.parametrize(
    "change, message",
    [
        ({"lr": 0.0}, "the learning rate must be > 0, got 0.0"),
        ({"batch_size": 0}, "the batch size must be >= 1, got 0"),
        ({"dropout": 1.0}, r"dropout must be in \[0, 1\), got 1.0"),
        ({"weight_decay": -1.0}, "weight decay must be >= 0, got -1.0"),
        ({"optimizer": "lbfgs"}, "unknown optimizer 'lbfgs'"),
        ({"schedule": "linear"}, "unknown schedule 'linear'"),
        ({"beta": 0.5}, r"no hyperparameters named \['beta'\]"),
    ],
)
def test_hyperparameters_are_validated_on_construction(change, message):
    with pytest.raises(DataError, match=message):
        Hyperparameters.from_dict({"lr": 0.1, "batch_size": 32, **change})
