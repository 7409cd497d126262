"""A real run of ``aihpc run`` for the verify, compare and rank tests, which tamper with copies.

``fixtures/run`` is a run directory that ``aihpc run`` wrote (its weights
left out: nothing checks them), kept so that the tests do not depend on how
many epochs a busy machine fits into a budget.  Regenerate it (after a change
to the store, results.json, the MLPerf log or operation counting) with::

    aihpc run --minutes 1 --config tests/fixtures/run.toml --seed 3 --no-live --out /tmp/run
    rm -rf tests/fixtures/run && mkdir tests/fixtures/run
    cp /tmp/run/{aihpc.sqlite,results.json,mlperf.log} tests/fixtures/run/
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

FIXTURES = Path(__file__).parent / "fixtures"


def aihpc(
    *args: str, timeout: float = 240, input: str | None = None, **kw: Any
) -> subprocess.CompletedProcess:
    """``python -m aihpc *args``, its output captured as text; ``kw`` goes to subprocess.Popen.

    A command still running after ``timeout`` seconds fails the test with every thread's Python
    stack: it runs with Python's fault handler on, and is stopped with SIGABRT, on which the
    handler prints them (a hang that happens once in many runs is then seen where it waits).
    """
    env = {**kw.pop("env", os.environ), "PYTHONFAULTHANDLER": "1"}
    command = [sys.executable, "-m", "aihpc", *args]
    with subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, **kw
    ) as proc:
        try:
            out, err = proc.communicate(input, timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGABRT)
            out, err = proc.communicate()
            pytest.fail(
                f"aihpc {' '.join(args)}: still running after {timeout:.0f} s; its output:\n"
                f"{out[-2000:]}\nits threads' stacks (SIGABRT):\n{err[-8000:]}"
            )
    return subprocess.CompletedProcess(command, proc.returncode, out, err)


# One interpreter runs every case through the CLI's entry point as ``python -m aihpc`` does
# (``raise SystemExit(main())``), each in its own working directory, and answers each case's exit
# code, stdout and stderr.
_CASES_DRIVER = """
import contextlib, io, json, os, sys
from aihpc.cli import main
answers = []
for argv, cwd in json.loads(sys.stdin.read()):
    if cwd is not None:
        os.chdir(cwd)
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as exc:
            code = exc.code
    answers.append([code, out.getvalue(), err.getvalue()])
print(json.dumps(answers))
"""


def aihpc_cases(
    cases: list[tuple[list[str], Path | None]], timeout: float = 240
) -> list[tuple[int, str, str]]:
    """Each ``(argv, cwd)`` through ``aihpc.cli.main`` in one interpreter (a command line each
    that fails before doing work costs no interpreter of its own): (exit code, stdout, stderr)
    a case."""
    proc = subprocess.run(
        [sys.executable, "-c", _CASES_DRIVER],
        input=json.dumps([[argv, None if cwd is None else str(cwd)] for argv, cwd in cases]),
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    answers = [(int(code or 0), out, err) for code, out, err in json.loads(proc.stdout)]
    assert len(answers) == len(cases)
    return answers


def aihpc_in_process(
    capsys: pytest.CaptureFixture[str], *args: str, cwd: Path | None = None
) -> subprocess.CompletedProcess:
    """:func:`aihpc_main` in the folder ``cwd`` (default: where the test is), as
    :func:`aihpc`'s CompletedProcess: for the tests of a command's output and exit code that need
    no interpreter of their own."""
    with contextlib.chdir(cwd or Path.cwd()):
        code, out, err = aihpc_main(capsys, *args)
    return subprocess.CompletedProcess(["aihpc", *args], code, out, err)


def aihpc_main(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """``aihpc *argv`` through the CLI's entry point in this process, as ``python -m aihpc`` calls
    it (an interpreter of its own would add only its imports): its exit code, stdout and stderr.

    The torch threads of this process (tests/conftest.py) are as before afterwards: a command
    sets them for its own work, as it may in a process of its own."""
    import torch

    from aihpc.cli import main

    threads = torch.get_num_threads()
    try:
        code = main(list(argv))
    except SystemExit as exc:  # argparse's own errors
        code = int(exc.code or 0)
    finally:
        torch.set_num_threads(threads)
    out, err = capsys.readouterr()
    return code, out, err


#: A machine's environment as a result document records it (the fields every one holds).
ENVIRONMENT: dict[str, Any] = {
    "hostname": "node1",
    "torch_version": "2.x",
    "python_version": "3.11.7",
    "cpu_model": None,
    "git_commit": None,
    "git_dirty": None,
    "gpus": [],
}


def results_head(doc: dict[str, Any]) -> Any:
    """The record of results.json's head ``doc`` (an image run's; ``trials`` dropped), the
    sections a test leaves out added empty."""
    from aihpc.records.codec import convert
    from aihpc.records.run_data import ImageDataRecord
    from aihpc.results.model import RunHead

    full = {
        "aihpc_version": None,
        "run_id": None,
        "config": {},
        "environment": ENVIRONMENT,
        "peak": None,
        "timeline": [],
        "workers": [],
        **{k: v for k, v in doc.items() if k != "trials"},
    }
    return convert(full, RunHead[ImageDataRecord], "a test's results")


def write_results_document(run_dir: Path, doc: dict[str, Any], **kw: Any) -> Path:
    """Write the results.json document ``doc`` (JSON objects, as a test edits it) into
    ``run_dir`` by the writer a run uses; the file written.  ``kw`` goes to write_results."""
    from aihpc.results.read import decode_results
    from aihpc.results.write import write_results

    results = decode_results(json.dumps(doc).encode(), "a test's results")
    return write_results(run_dir, results.head(), results.trials, **kw).path
