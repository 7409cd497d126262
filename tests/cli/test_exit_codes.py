"""Errors by kind, as a user types the command: each kind's exit code, one line, no traceback.

2 is the user's mistake (tests/cli/test_bad_input.py holds the table of those),
3 the machine's failure, 4 a measurement that fails its check; a bug keeps
its traceback.  A task that fails inside a Dask worker is one line naming
the worker, its traceback in the output folder's ``worker-errors.log``.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from aihpc.base import errors
from aihpc.cli import main


def _aihpc(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "aihpc", *args], capture_output=True, text=True, timeout=300, cwd=cwd
    )


@pytest.mark.parametrize(
    "kind, code",
    [
        (errors.ConfigError, 2),
        (errors.DataError, 2),
        (errors.StorageError, 2),
        (errors.ModelError, 2),
        (errors.WorkersLost, 3),
        (errors.OutOfMemory, 3),
        (errors.WorkerFailed, 3),
        (errors.RunFailure, 3),
        (errors.TargetNotReached, 4),
        (errors.VerificationFailed, 4),
    ],
)
def test_each_kind_is_one_line_and_its_exit_code(kind, code, monkeypatch, capsys) -> None:
    import aihpc.cli.models

    def fail(args) -> int:
        raise kind("what failed, named")

    monkeypatch.setattr(aihpc.cli.models, "run", fail)
    assert main(["models"]) == code
    assert capsys.readouterr().err == "aihpc models: error: what failed, named\n"


def test_a_bug_keeps_its_traceback(monkeypatch) -> None:
    import aihpc.cli.models

    def bug(args) -> int:
        raise KeyError("a bug")

    monkeypatch.setattr(aihpc.cli.models, "run", bug)
    with pytest.raises(KeyError, match="a bug"):  # not caught: Python prints it and exits 1
        main(["models"])


def test_a_child_run_fails_with_the_kind_of_its_exit_code() -> None:
    assert errors.kind_of_exit(2) is errors.AihpcError
    assert (
        errors.kind_of_exit(3) is errors.RunFailure and errors.kind_of_exit(1) is errors.RunFailure
    )
    assert errors.kind_of_exit(4) is errors.CheckFailed


def test_out_of_memory_is_exit_3(tmp_path: Path) -> None:
    proc = _aihpc(
        "bench",
        "network",
        "--model",
        "digits_cnn",
        "--input",
        "1x100000x100000",
        "--device",
        "cpu",
        "--out",
        "n.json",
        cwd=tmp_path,
    )
    assert proc.returncode == 3, proc.stderr
    assert (
        proc.stderr.count("\n") == 1
        and "needs about" in proc.stderr
        and "Traceback" not in proc.stderr
    )
    assert not (tmp_path / "n.json").exists()


def test_a_failure_inside_a_worker_is_one_line_naming_it_and_a_log(tmp_path: Path) -> None:
    """A worker's DataError (no data files where the instance staged them): exit 2, the user's
    mistake, in one line that names the worker; Dask's "Compute Failed" and the quoted traceback
    stay off the terminal."""
    for split in ("train", "validation"):
        (tmp_path / "data" / split).mkdir(parents=True)
    proc = _aihpc(
        "train-to-target",
        "--workload",
        "cosmoflow",
        "--size",
        "tiny",
        "--runs",
        "1",
        "--data-dir",
        "data",
        "--out",
        "out",
        cwd=tmp_path,
    )
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count("\n") == 1, proc.stderr
    assert proc.stderr.startswith(
        "aihpc train-to-target: error: worker 0: no .hdf5 or .h5 or .tfrecord files in "
    )
    assert "Traceback" not in proc.stderr and "Compute Failed" not in proc.stderr
    log = tmp_path / "out" / "worker-errors.log"
    assert f"(its traceback: out/{log.name})" in proc.stderr
    text = log.read_text()
    assert (
        text.startswith("worker 0: DataError: no .hdf5")
        and "Traceback (most recent call last)" in text
    )
    assert "in split_files" in text  # the remote frames, where the error was raised
