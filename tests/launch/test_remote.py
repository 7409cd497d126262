"""A task's failure on a worker comes back as a value; the master logs its traceback and raises one
line."""

from __future__ import annotations

from pathlib import Path

import pytest

from aihpc.base.errors import DataError, WorkerFailed
from aihpc.launch.remote import LOG_FILE, Failed, contained, unwrap


def _bad_data() -> None:
    raise DataError("no files in /data/train")


def _bug() -> None:
    raise KeyError("sample")


def test_a_task_that_raises_comes_back_as_a_value() -> None:
    assert contained(lambda x: x + 1, 1) == 2
    failed = contained(_bad_data)
    assert isinstance(failed, Failed) and isinstance(failed.error, DataError)
    assert failed.summary == "DataError: no files in /data/train"
    assert "in _bad_data" in failed.traceback and failed.worker  # outside Dask: host:pid


def test_an_aihpc_error_keeps_its_kind_and_names_the_worker(tmp_path: Path) -> None:
    failed = Failed(
        "3", DataError("no files in /data/train"), "DataError: no files", "Traceback ...\n"
    )
    with pytest.raises(DataError) as info:
        unwrap([1, failed], tmp_path)
    assert (
        str(info.value)
        == f"worker 3: no files in /data/train (its traceback: {tmp_path / LOG_FILE})"
    )
    assert (tmp_path / LOG_FILE).read_text() == "worker 3: DataError: no files\nTraceback ...\n\n"


def test_any_other_exception_is_the_workers_failure(tmp_path: Path) -> None:
    failed = contained(_bug)
    with pytest.raises(WorkerFailed, match=r"^worker .+: KeyError: 'sample' \(its traceback: "):
        unwrap([failed, failed], tmp_path)
    assert (tmp_path / LOG_FILE).read_text().count("in _bug") == 2  # every failure is logged
    assert unwrap([1, 2], tmp_path) == [1, 2]
