"""Faults injected for real into ``aihpc run``: trials too large for their workers, a disk that
fills up.

(Killed workers and a killed master: tests/runner/test_run.py; cancelled SLURM
jobs: tests/launch/test_slurm.py.)
"""

from __future__ import annotations

import functools
import json
import re
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

# whole timed runs that fail on purpose: under pytest-xdist (make test) one at a time, in a group of
# their own beside the other runs' ("runs"), so that the whole runs split between the cores
pytestmark = pytest.mark.xdist_group("faults")


REFUSED = re.compile(
    r"not sent: it needs an estimated (\d+\.\d\d) GiB of host memory; worker 0 has "
    r"(\d+\.\d\d) GiB for it \(its (\d+\.\d\d) GiB limit: \d+\.\d\d GiB before its nanny "
    r"restarts it, less \d+\.\d\d GiB it holds\)"
)


@pytest.mark.slow
def test_a_worker_limited_as_on_the_h200_refuses_the_trials_it_cannot_hold_and_the_run_goes_on(
    tmp_path: Path,
) -> None:
    """The H200's failure, on this CPU.  There Dask's "auto" limit gave the one-thread worker of a
    16-core node a sixteenth of the node's memory, and the language run's first grown child took
    more: its nanny killed the worker twice, the child was left ``deadline``.  Here one worker is
    given that limit, this node's memory / 16 (as --worker-memory), and half the trials need more
    than it holds: batch 1024 of 32x32 images (batch 16 the other half).  Sent as before, such a
    trial loses its worker (shown at the end, on a cluster of the same limit); now it is never
    sent, failed with one line naming its need and the worker's limit, no worker is lost, and the
    search goes on.  (Without --worker-memory the worker's limit is the node's less a reserve:
    tests/launch/test_worker_limits.py.)"""
    from distributed.system import MEMORY_LIMIT

    limit = MEMORY_LIMIT // 16
    cfg = tmp_path / "run.toml"
    cfg.write_text(
        'dataset = "synthetic"\nbatch_sizes = [16, 1024]\n'
        "epochs_min = 1\nepochs_max = 1\npeak_seconds = 0.2\n"
        "inherit_hparams = false\n"  # TPE draws each trial's batch, so both sizes come
        "[data_options]\nnum_samples = 1500\nimage_size = 32\n"
    )
    run_dir = tmp_path / "run"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "aihpc",
            "run",
            "--minutes",
            "0.75",  # a batch-16 epoch of 1,200 images within it, beside a loaded suite
            "--workers",
            "1",
            "--threads-per-worker",
            "1",
            "--worker-memory",
            str(limit),
            "--config",
            str(cfg),
            "--out",
            str(run_dir),
            "--no-live",
        ],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert proc.returncode == 0, proc.stderr
    results = json.loads((run_dir / "results.json").read_text())
    trials = results["trials"]
    refused = [t for t in trials if t["hparams"]["batch_size"] == 1024]
    trained = [t for t in trials if t["hparams"]["batch_size"] == 16]
    shown = [(t["id"], t["hparams"]["batch_size"], t["status"]) for t in trials]
    assert refused and any(t["status"] == "completed" for t in trained), shown
    assert max(t["id"] for t in trained) > min(t["id"] for t in refused), shown  # it went on
    for t in refused:
        assert t["status"] == "failed" and t["attempts"] == 0 and t["epochs"] == [], t
        figures = REFUSED.fullmatch(t["reason"])
        assert figures is not None, t["reason"]
        need, room, limit_gib = (float(g) for g in figures.groups())
        assert need > room and limit_gib == round(limit / 2**30, 2)
    assert results["losses"] == []  # no worker was lost
    (worker,) = results["worker_memory"]["workers"]
    assert worker["limit_bytes"] == limit and worker["node_bytes"] == MEMORY_LIMIT
    assert f"worker memory    1 workers, a limit of {limit / 2**30:.2f} GiB each" in proc.stdout
    assert "worker lost" not in proc.stdout
    from aihpc.results.read import trial_arch

    first = {**refused[0], "arch": trial_arch({t["id"]: t for t in trials}, refused[0]["id"])}
    _sent_as_before_it_loses_its_worker(first, results["config"], limit, tmp_path)


def _sent_as_before_it_loses_its_worker(
    trial: dict, config_dict: dict, limit: int, tmp_path: Path
) -> None:
    """The refused trial's first epoch, sent anyway to a worker of the same limit: its nanny kills
    the worker, and the loss is recorded with the worker's memory against its limit."""
    import time

    from aihpc.launch.executor import local_executor, local_layout
    from aihpc.launch.memory import MEMORY_KILL
    from aihpc.records.messages import DataRef, EpochTask
    from aihpc.records.trial import Hyperparameters
    from aihpc.tasks import read_config, task_of
    from aihpc.train.worker import run_epoch

    config = read_config(config_dict)
    task = EpochTask(
        trial_id=trial["id"],
        epoch=1,
        epochs=1,
        arch=trial["arch"],
        hparams=Hyperparameters.from_dict(trial["hparams"]),
        data=DataRef.of(config),
        deadline=time.time() + 120,
        seed=1,
        weights_dir=str(tmp_path),
        device="cpu",
        threads=1,
    )
    executor = local_executor(local_layout(1, 1, "cpu"), str(limit))
    try:
        future = executor.submit(
            functools.partial(run_epoch, task_of(config.run.task)), task, "as-before"
        )
        with pytest.raises(Exception) as lost:
            future.result()
        cause = executor.memory_kill(lost.value)
    finally:
        executor.close()
    assert type(lost.value).__name__ == "KilledWorker"
    assert cause is not None and cause.startswith(f"{MEMORY_KILL}: "), cause


@pytest.mark.slow
def test_disk_full_is_one_clear_line_and_the_store_stays_readable(tmp_path: Path) -> None:
    # RLIMIT_FSIZE caps every file the run writes at 768 KiB (Python ignores
    # SIGXFSZ, so writes past it fail with EFBIG, as on a full disk).  The
    # first trials' weight files (about 370 KB) fit, so their epochs finish;
    # the store's write-ahead log (about 150 KiB when the run starts, 30-40 KiB
    # more per epoch) outgrows the cap some epochs later.  The disk, not
    # the budget, ends this run: with no epoch finishing at all, the log still
    # grows 8 KiB a second from the segment clock (the segment's row and its
    # digest-chain link) and passes the cap within about 80 s, so the
    # 3-minute budget is never reached.  (At 512 KiB the log filled in 45 s,
    # before a busy machine finished a first epoch; 1 MiB took a third more epochs.)
    cfg = tmp_path / "run.toml"
    cfg.write_text(
        'dataset = "digits"\nepochs_min = 1\nepochs_max = 2\n'
        "batch_sizes = [64]\nworkers = 2\npeak_seconds = 0.2\n"
    )
    run_dir = tmp_path / "run"
    cmd = (
        f"ulimit -f 768 && exec {sys.executable} -m aihpc run --minutes 3"
        f" --config {cfg} --out {run_dir} --no-live"
    )
    proc = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True, timeout=240)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert "cannot write" in lines[0] and str(run_dir) in lines[0]
    with sqlite3.connect(f"file:{run_dir / 'aihpc.sqlite'}?mode=ro", uri=True) as con:
        assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        assert (
            con.execute("SELECT COUNT(*) FROM epochs WHERE status = 'ok'").fetchone()[0] > 0
        )  # what finished is kept
