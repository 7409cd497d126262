"""Fixtures shared by every test directory: copies of the fixture run (see fixture_run.py)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from fixture_run import FIXTURES


@pytest.fixture
def finished_run(tmp_path: Path) -> Path:
    """A copy of the fixture run, as ``aihpc run`` left it."""
    return Path(shutil.copytree(FIXTURES / "run", tmp_path / "finished"))


@pytest.fixture
def run_copy(tmp_path: Path) -> Path:
    """Another copy of the fixture run, to tamper with."""
    return Path(shutil.copytree(FIXTURES / "run", tmp_path / "run"))
