"""A real run of ``aihpc run`` for the verify and rank tests, which tamper with copies of it.

``fixtures/run`` is a run directory that ``aihpc run`` wrote (its weights
left out: nothing checks them), kept so that the tests do not depend on how
many epochs a busy machine fits into a budget.  Regenerate it (after a change
to the store, results.json, the MLPerf log or operation counting) with::

    aihpc run --minutes 1 --config tests/results/fixtures/run.toml --seed 3 --no-live --out /tmp/run
    rm -rf tests/results/fixtures/run && mkdir tests/results/fixtures/run
    cp /tmp/run/{aihpc.sqlite,results.json,mlperf.log} tests/results/fixtures/run/
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

FIXTURES = Path(__file__).parent / "fixtures"


def aihpc(*args: str, timeout: float = 240) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "aihpc", *args], capture_output=True, text=True, timeout=timeout)


@pytest.fixture
def finished_run(tmp_path: Path) -> Path:
    """A copy of the fixture run, as ``aihpc run`` left it."""
    return Path(shutil.copytree(FIXTURES / "run", tmp_path / "finished"))


@pytest.fixture
def run_copy(tmp_path: Path) -> Path:
    """Another copy of the fixture run, to tamper with."""
    return Path(shutil.copytree(FIXTURES / "run", tmp_path / "run"))
