"""Fixtures shared by every test directory: copies of the fixture run (see fixture_run.py) and
the SLURM cluster (see slurm_cluster.py)."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from pathlib import Path

import pytest

import slurm_cluster
from fixture_run import FIXTURES

# The verdicts `aihpc verify` records (aihpc.verify.verdicts) go to a folder of this test process,
# not the user's cache; subprocesses inherit it.  It goes when the process ends.
os.environ["AIHPC_CACHE_DIR"] = tempfile.mkdtemp(prefix="aihpc-cache-")
atexit.register(shutil.rmtree, os.environ["AIHPC_CACHE_DIR"], ignore_errors=True)


def pytest_configure(config: pytest.Config) -> None:
    """Under xdist each test process keeps torch to its share of the cores (one thread where the
    Makefile runs a process more than cores), as ``aihpc run``'s workers do: OpenMP threads of
    several processes on too few cores wait on each other, and a batch-1 forward that takes
    1 ms took 75 ms so."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "0"))
    if workers:
        import torch

        torch.set_num_threads(max(1, (os.cpu_count() or 1) // workers))


# The order in which the xdist groups of whole runs start (seconds by group: benchmarks/
# test_groups.py on a --junitxml file).  The Makefile runs pytest-xdist without its reordering of
# groups by their number of tests, so the groups start in this order, before the single tests.
# The four longest start at once (make test runs 4 processes on 2 cores).  xdist gives the next
# group to the first process left with 2 tests or fewer: soon the one running "large" (2 tests),
# so "faults" (2) follows it there and then "ranks" (4), while "install" and "verify" go to the
# processes that finish their long group first.  A long group that started last would run on
# alone while the other processes idle.
GROUP_ORDER = ("slurm", "runs", "runs2", "large", "faults", "ranks", "install", "verify")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The tests of the groups first, group by group in ``GROUP_ORDER``'s order (a group not named
    there after those that are), each group's in the order collected; then the tests of no group,
    in the order collected."""

    def rank(item: pytest.Item) -> int:
        mark = item.get_closest_marker("xdist_group")
        if mark is None:
            return len(GROUP_ORDER) + 1
        name = mark.args[0] if mark.args else mark.kwargs.get("name")
        return GROUP_ORDER.index(name) if name in GROUP_ORDER else len(GROUP_ORDER)

    items.sort(key=rank)  # stable: each group keeps the order collected


@pytest.fixture
def finished_run(tmp_path: Path) -> Path:
    """A copy of the fixture run, as ``aihpc run`` left it."""
    return Path(shutil.copytree(FIXTURES / "run", tmp_path / "finished"))


@pytest.fixture
def run_copy(tmp_path: Path) -> Path:
    """Another copy of the fixture run, to tamper with."""
    return Path(shutil.copytree(FIXTURES / "run", tmp_path / "run"))


@pytest.fixture(scope="session")
def slurm_up() -> slurm_cluster.Cluster:
    """The running SLURM cluster: this host and two namespace nodes (only this host where
    namespaces cannot be made); skips with the reason where SLURM cannot start.  Once per
    session: the SLURM tests share one xdist group, so one process."""
    was_up = slurm_cluster.controller_answers()
    yield slurm_cluster.start_cluster()
    if not was_up:
        slurm_cluster.stop()
