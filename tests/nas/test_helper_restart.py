"""A hyperparameter search process started again, as a record: validated, read back from JSON."""

from __future__ import annotations

import json

import pytest

from aihpc.base.errors import DataError
from aihpc.nas.helper_restart import HelperRestart

RESTART = {
    "t": 1_700_000_000.5,
    "stream": 1,
    "pid": 4242,
    "how": "was killed by signal 9",
    "history": 37,
}


def test_a_helper_restart_reads_back_its_own_json():
    record = HelperRestart.from_dict(RESTART)
    assert record == HelperRestart(1_700_000_000.5, 1, 4242, "was killed by signal 9", 37)
    assert HelperRestart.from_dict(json.loads(json.dumps(record.to_dict()))) == record
    assert record.to_dict() == RESTART


@pytest.mark.parametrize(
    "data, message",
    [
        ({"t": 1.0, "stream": 0}, r"^a helper restart lacks pid, how, history: \{"),
        ({**RESTART, "signal": 9}, r"^a helper restart has unknown fields signal: \{"),
        (
            {"stream": 0, "extra": 1},
            r"^a helper restart lacks t, pid, how, history and has unknown fields extra: ",
        ),
        ({**RESTART, "t": -1.0}, r"^a helper restart's time must be a number >= 0, got -1.0$"),
        ({**RESTART, "t": "now"}, r"^a helper restart's time must be a number >= 0, got 'now'$"),
        ({**RESTART, "stream": -1}, r"^a helper restart's stream must be an integer >= 0, got -1$"),
        ({**RESTART, "pid": 0}, r"^a helper restart's pid must be an integer >= 1, got 0$"),
        (
            {**RESTART, "history": True},
            r"^a helper restart's history must be an integer >= 0, got True$",
        ),
        (
            {**RESTART, "history": 2.0},
            r"^a helper restart's history must be an integer >= 0, got 2.0$",
        ),
        ({**RESTART, "how": ""}, r"^a helper restart's how must be one line of text, got ''$"),
        (
            {**RESTART, "how": "died\nhard"},
            r"^a helper restart's how must be one line of text, got 'died\\nhard'$",
        ),
        ([1, 2], r"^a helper restart must be an object, got \[1, 2\]$"),
    ],
)
def test_a_broken_helper_restart_is_one_line(data, message):
    with pytest.raises(DataError, match=message) as caught:
        HelperRestart.from_dict(data)
    assert "\n" not in str(caught.value)
