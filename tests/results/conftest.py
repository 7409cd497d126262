"""One real, short ``aihpc run`` shared by the verify and rank tests (they tamper with copies of it)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

# digits, one worker, one-epoch trials: several trials finish within the budget on a busy 2-core machine
QUICK = """dataset = "digits"
workers = 1
threads_per_worker = 1
epochs_min = 1
epochs_max = 2
batch_sizes = [64, 128]
report_seconds = 5.0
min_accuracy = 0.3
"""
MINUTES = "0.35"


def aihpc(*args: str, timeout: float = 240) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "aihpc", *args], capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="session")
def finished_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished run directory with at least two finished epochs of two trials; do not modify it (copy it)."""
    root = tmp_path_factory.mktemp("verify-run")
    (root / "run.toml").write_text(QUICK)
    run_dir = root / "run"
    proc = aihpc("run", "--minutes", MINUTES, "--config", str(root / "run.toml"), "--out", str(run_dir),
                 "--seed", "3", "--no-live")
    assert proc.returncode == 0, proc.stderr
    results = json.loads((run_dir / "results.json").read_text())
    ok = {(t["id"], e["epoch"]) for t in results["trials"] for e in t["epochs"] if e["status"] == "ok"}
    assert len({trial for trial, _ in ok}) >= 2, f"the run finished too few epochs to tamper with: {sorted(ok)}"
    return run_dir


@pytest.fixture
def run_copy(finished_run: Path, tmp_path: Path) -> Path:
    """A copy of the finished run to tamper with."""
    return Path(shutil.copytree(finished_run, tmp_path / "run"))
