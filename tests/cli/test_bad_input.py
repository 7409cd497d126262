"""Bad input, as a user types it: one clear line on stderr, exit 2, no traceback, nothing lost.

One table across the commands (``run``, ``count``, ``export``, ``report``,
``scaling``); each row names what it gets wrong and a fragment of the line
the user must see.  ``{tmp}`` in arguments is the row's folder, prepared by
:func:`_prepare` with the files the rows refer to.  The rows go through the CLI's
entry point in one interpreter; a reader that leaves early is a real ``python -m
aihpc`` of its own.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

from aihpc.records.meta import MetaKey
from aihpc.records.store import RunStore
from fixture_run import aihpc_cases

CASES = [
    # -- aihpc run: configuration values
    ("run", ["--minutes", "-1"], "minutes must be > 0, got -1.0"),
    ("run", ["--workers", "0"], "workers must be >= 1, got 0"),
    (
        "run",
        ["--worker-memory", "300MiB"],
        "worker_memory must be at least 512MiB (a worker with torch loaded, before it trains), "
        "got '300MiB'",
    ),
    (  # this machine's memory (below 2 TiB) over 4096 workers: less than any worker starts in
        "run",
        ["--workers", "4096", "--dataset", "digits"],
        "each worker's memory limit must be at least 512.00 MiB (a worker with torch loaded, "
        "before it trains), got",
    ),
    (
        "run",
        ["--strategy", "bayes"],
        "strategy must be one of evolution, random, none, seed, got 'bayes'",
    ),
    ("run", ["--screen", "1"], "screen must be 0 (off) or in [2, 16], got 1"),
    ("run", ["--min-accuracy", "1.5"], "min_accuracy must be in [0, 1), got 1.5"),
    ("run", ["--seed-width", "0"], "seed_width must be a whole number >= 1, got 0"),
    ("run", ["--shift", "-1"], "shift must be a whole number of pixels >= 0, got -1"),
    (
        "run",
        ["--dataset", "digits", "--max-params", "5000"],
        "max_params must be at least the seed network's 42938",
    ),
    (
        "run",
        ["--scheduler", "localhost:8786"],
        "scheduler must be an address like tcp://HOST:PORT, got 'localhost:8786'",
    ),
    ("run", ["--config", "{tmp}/unknown_key.toml"], "unknown key epochs in"),
    ("run", ["--config", "{tmp}/wrong_type.toml"], "batch_sizes must be of type tuple, got 'big'"),
    (
        "run",
        ["--config", "{tmp}/unknown_option.toml"],
        "unknown option(s) for data set 'synthetic': colour",
    ),
    ("run", ["--config", "{tmp}/broken.toml"], "invalid TOML in"),
    ("run", ["--config", "{tmp}/missing.toml"], "config file not found"),
    # -- aihpc run: data
    ("run", ["--dataset", "imagenet"], "unknown data set 'imagenet'"),
    (
        "run",
        ["--dataset", "imagefolder", "--data-path", "/nonexistent/photos"],
        "/nonexistent/photos",
    ),
    (
        "run",
        ["--dataset", "npz", "--data-path", "{tmp}/corrupt.npz"],
        "corrupt.npz is not an .npz archive",
    ),
    # -- aihpc run: run directories and resume
    ("run", ["--dataset", "digits", "--out", "{tmp}/a_file/run"], "cannot create run directory"),
    ("run", ["--dataset", "digits", "--out", "{tmp}/not_empty"], "is not empty"),
    ("run", ["--resume", "{tmp}/nowhere"], "no run to resume in"),
    ("run", ["--resume", "{tmp}/finished"], "the run has finished"),
    ("run", ["--resume", "{tmp}/no_config"], "holds no run configuration"),
    ("run", ["--resume", "{tmp}/not_a_store"], "cannot resume"),
    ("run", ["--resume", "{tmp}/old_format"], "its store has format 1, written by an older aihpc"),
    (
        "run",
        ["--resume", "{tmp}/finished", "--out", "{tmp}/elsewhere"],
        "--resume continues the run in its own directory",
    ),
    # -- aihpc count
    ("count", ["--model", "resnet5"], "unknown model 'resnet5'"),
    (
        "count",
        ["--model", "resnet18", "--input", "3x-224x224"],
        "--input must be positive integers joined by 'x'",
    ),
    ("count", ["--model", "resnet18", "--batch", "0"], "batch must be >= 1, got 0"),
    ("count", ["--spec", "{tmp}/missing.json"], "missing.json"),
    ("count", ["--spec", "{tmp}/broken.json"], "broken.json"),
    # -- aihpc export
    ("export", ["--model", "resnet5", "{tmp}/m.onnx"], "unknown model 'resnet5'"),
    ("export", ["--model", "digits_cnn", "{tmp}/a_file/m.onnx"], "not a directory"),
    # -- aihpc report
    ("report", ["{tmp}/nowhere"], "run directory or result file not found"),
    ("report", ["{tmp}/not_empty"], "results file not found"),
    ("report", ["{tmp}/corrupt_results"], "results.json"),
    ("report", ["{tmp}/future_results"], "unsupported results schema_version 99"),
    # -- aihpc scaling
    (
        "scaling",
        ["--workers", "1,a", "--out", "{tmp}/scaling"],
        "workers must be a comma-separated list of integers",
    ),
    (
        "scaling",
        ["--workers", "0,1", "--out", "{tmp}/scaling"],
        "workers must be integers >= 1, got '0,1'",
    ),
    ("scaling", ["--minutes", "0", "--out", "{tmp}/scaling"], "minutes must be > 0, got 0.0"),
]


def _prepare(tmp: Path) -> None:
    (tmp / "unknown_key.toml").write_text("minutes = 1\nepochs = 3\n")
    (tmp / "wrong_type.toml").write_text('batch_sizes = "big"\n')
    (tmp / "unknown_option.toml").write_text('[data_options]\ncolour = "red"\n')
    (tmp / "broken.toml").write_text("minutes = = 1\n")
    (tmp / "corrupt.npz").write_bytes(b"this is not a zip archive")
    (tmp / "a_file").write_text("a file, not a directory")
    (tmp / "not_empty").mkdir()
    (tmp / "not_empty" / "precious.txt").write_text("keep me")
    (tmp / "broken.json").write_text("{not json")
    finished = RunStore(tmp / "finished")
    finished.set_meta(MetaKey.CONFIG, {"minutes": 1.0})
    finished.set_meta(MetaKey.FINISHED, True)
    finished.close()
    RunStore(tmp / "no_config").close()
    old = RunStore(tmp / "old_format")  # stopped, but written before weights moved to the workers
    old.set_meta(MetaKey.CONFIG, {"minutes": 1.0})
    old.close()
    (tmp / "not_a_store").mkdir()
    (tmp / "not_a_store" / "aihpc.sqlite").write_bytes(b"not a database " * 100)
    (tmp / "corrupt_results").mkdir()
    (tmp / "corrupt_results" / "results.json").write_text('{"schema_version": 1, "trials": [')
    (tmp / "future_results").mkdir()
    (tmp / "future_results" / "results.json").write_text(json.dumps({"schema_version": 99}))


def _snapshot(folder: Path) -> dict[str, str]:
    """Every file under ``folder`` with a digest of its content."""
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def test_bad_input_is_one_line_exit_2_and_nothing_lost(tmp_path: Path) -> None:
    """Every case in a folder of its own, prepared alike, as its working directory; one
    interpreter runs them all through the CLI's entry point (they fail before doing any work),
    then each is checked, and every case that fails is named."""
    cases = []
    for i, (command, args, message) in enumerate(CASES):
        folder = tmp_path / f"{command}-{i}"
        folder.mkdir()
        _prepare(folder)
        argv = [command, *(a.replace("{tmp}", str(folder)) for a in args)]
        cases.append((argv, folder, message, _snapshot(folder)))
    answers = aihpc_cases([(argv, folder) for argv, folder, _, _ in cases])
    wrong = [
        (argv, code, stderr)
        for (argv, folder, message, before), (code, _, stderr) in zip(cases, answers, strict=True)
        if not _one_line_and_nothing_lost(code, stderr, message, folder, before)
    ]
    assert not wrong, "\n".join(
        f"{argv}: exit {code}, stderr {stderr!r}" for argv, code, stderr in wrong
    )


def _one_line_and_nothing_lost(
    code: int, stderr: str, message: str, folder: Path, before: dict[str, str]
) -> bool:
    """Exit 2, one line on stderr holding ``message``, no traceback; nothing in ``folder``
    written, changed or removed, and no default run directory made."""
    lines = stderr.strip().splitlines()
    return (
        code == 2
        and "Traceback" not in stderr
        and len(lines) == 1
        and message in lines[0]
        and _snapshot(folder) == before
        and not (folder / "runs").exists()
    )


def test_at_least_twenty_bad_inputs_across_the_commands() -> None:
    assert len(CASES) >= 20
    assert {c[0] for c in CASES} == {"run", "count", "export", "report", "scaling"}


def test_a_reader_that_leaves_early_is_no_traceback() -> None:
    # `aihpc models --json | head -1`: the pipe's reading end closes before aihpc writes
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "aihpc", "models", "--json"],
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            timeout=120,
        )
    finally:
        os.close(write_end)
    assert proc.returncode == 141 and proc.stderr == "", proc.stderr
