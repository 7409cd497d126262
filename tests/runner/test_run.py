"""``aihpc run`` end to end, as a user types it: a real master, real Dask workers, real processes."""

from __future__ import annotations

import json
import math
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from aihpc.results.mlperf import check_compliance

# A small, quick search: digits, short trials.
QUICK = {
    "dataset": "digits",
    "workers": 2,
    "threads_per_worker": 1,
    "epochs_min": 1,
    "epochs_max": 2,
    "batch_sizes": [64, 128],
    "report_seconds": 5.0,
    "min_accuracy": 0.3,
}


def _toml(values: dict) -> str:
    lines = []
    for k, v in values.items():
        if isinstance(v, str):
            lines.append(f'{k} = "{v}"')
        elif isinstance(v, list):
            lines.append(f"{k} = [{', '.join(str(x) for x in v)}]")
        else:
            lines.append(f"{k} = {v}")
    return "\n".join(lines) + "\n"


def aihpc(*args: str, timeout: float = 240, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "aihpc", *args], capture_output=True, text=True, timeout=timeout, **kw
    )


@pytest.fixture
def quick_config(tmp_path: Path) -> Path:
    path = tmp_path / "run.toml"
    path.write_text(_toml(QUICK))
    return path


def _check_results(run_dir: Path) -> dict:
    results = json.loads((run_dir / "results.json").read_text())
    assert results["schema_version"] == 1
    text = (run_dir / "results.json").read_text()
    assert text == json.dumps(results, sort_keys=True, indent=2) + "\n"  # sorted keys
    score = results["score"]
    assert score["ops"] > 0 and score["ops_per_second"] > 0
    assert score["ops"] == sum(t["ops"]["total"] for t in results["trials"])
    assert score["ops_per_second"] == pytest.approx(score["ops"] / score["wall_seconds"])
    # the score's wiring, recomputed from the file's own fields
    n_val = results["data"]["num_val"]
    best = max(t["best_val_accuracy"] for t in results["trials"] if t["best_val_accuracy"] is not None)
    assert score["best_accuracy"] == best
    capped = min(best, 1 - 0.5 / n_val)
    assert score["regulated_score"] == pytest.approx(score["ops_per_second"] * abs(math.log(1 - capped)))
    peak = results["peak"]
    assert score["peak_flops_per_s"] == peak["total_flops_per_s"]
    # the peak is every worker's at once, measured before the run and again after it
    assert peak["workers"] == len(peak["per_worker"]) == len(results["workers"])
    assert peak["total_flops_per_s"] == pytest.approx(sum(p["flops_per_s"] for p in peak["per_worker"]))
    assert peak["after"]["workers"] == peak["workers"]
    assert peak["drift"] == pytest.approx(peak["after"]["total_flops_per_s"] / peak["total_flops_per_s"] - 1)
    assert score["peak_fraction"] == pytest.approx(score["ops_per_second"] / score["peak_flops_per_s"])
    for t in results["trials"]:
        for e in t["epochs"]:
            ops = round(e["train_samples"] * t["ops_per_sample"]["train"]) + round(
                e["val_samples"] * t["ops_per_sample"]["eval"]
            )
            assert e["ops"] == ops
    env = results["environment"]
    assert env["torch_version"] and "git_commit" in env and "hostname" in env
    ok, output = check_compliance(run_dir / "mlperf.log")
    assert ok, output
    return results


@pytest.mark.slow
def test_full_run_scores_and_logs(tmp_path: Path, quick_config: Path) -> None:
    run_dir = tmp_path / "run"
    proc = aihpc("run", "--minutes", "0.4", "--config", str(quick_config), "--out", str(run_dir), "--seed", "1")
    assert proc.returncode == 0, proc.stderr
    assert "score" in proc.stdout and "VALID" in proc.stdout
    results = _check_results(run_dir)
    done = [t for t in results["trials"] if t["status"] in ("completed", "early_stopped")]
    assert done, [t["status"] for t in results["trials"]]
    assert results["score"]["valid"] and results["score"]["best_accuracy"] >= 0.3
    # bookkeeping: every child names a parent that existed before it, architectures are unique
    ids = {t["id"] for t in results["trials"]}
    for t in results["trials"]:
        assert t["parent"] is None if t["id"] == 0 else t["parent"] in ids and t["parent"] < t["id"]
    hashes = [t["arch_hash"] for t in results["trials"]]
    assert len(hashes) == len(set(hashes))
    # the report renders from a real run
    report = aihpc("report", str(run_dir))
    assert report.returncode == 0, report.stderr
    assert (run_dir / "report.html").stat().st_size > 10_000


def _finished_trials(db: Path) -> int:
    if not db.exists():
        return 0
    try:
        with sqlite3.connect(db) as con:
            return con.execute("SELECT COUNT(*) FROM epochs WHERE status = 'ok'").fetchone()[0]
    except sqlite3.Error:
        return 0


def _start_run(run_dir: Path, config: Path, minutes: float, epochs: int, **popen) -> subprocess.Popen:
    """Start ``aihpc run`` in the background; return once ``epochs`` trial-epochs have finished."""
    master = subprocess.Popen(
        [sys.executable, "-m", "aihpc", "run", "--minutes", str(minutes), "--config", str(config), "--out", str(run_dir)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        **popen,
    )
    t_end = time.time() + 120
    while _finished_trials(run_dir / "aihpc.sqlite") < epochs and time.time() < t_end and master.poll() is None:
        time.sleep(0.3)
    assert master.poll() is None, "the run ended before the test could act"
    return master


@pytest.mark.slow
def test_resume_after_killed_master(tmp_path: Path, quick_config: Path) -> None:
    run_dir = tmp_path / "run"
    master = _start_run(run_dir, quick_config, minutes=0.6, epochs=2, start_new_session=True)
    db = run_dir / "aihpc.sqlite"
    os.killpg(master.pid, signal.SIGKILL)  # the master and its workers die at once
    master.wait()
    with sqlite3.connect(db) as con:
        before = con.execute("SELECT trial_id, epoch, ops_train, ops_eval FROM epochs WHERE status = 'ok'").fetchall()
        (first_stop,) = con.execute("SELECT stop FROM segments").fetchone()
    assert len(before) >= 2
    assert not (run_dir / "results.json").exists()
    time.sleep(2.0)  # downtime

    proc = aihpc("run", "--resume", str(run_dir))
    assert proc.returncode == 0, proc.stderr
    results = _check_results(run_dir)
    assert results["config"]["dataset"] == "digits"  # the run's own configuration, not the defaults
    assert {t["arch"]["input_shape"][0] for t in results["trials"]} == {1}
    kept = {(t["id"], e["epoch"]): e["ops"] for t in results["trials"] for e in t["epochs"] if e["status"] == "ok"}
    for trial_id, epoch, ops_train, ops_eval in before:
        assert kept[(trial_id, epoch)] == ops_train + ops_eval
    segments = results["segments"]
    assert len(segments) == 2
    downtime = segments[1]["t_start"] - segments[0]["t_end"]
    assert downtime >= 2.0
    assert results["score"]["wall_seconds"] == pytest.approx(segments[1]["t_end"] - segments[0]["t_start"])
    assert first_stop > 0


@pytest.mark.slow
def test_killed_worker_epoch_is_requeued(tmp_path: Path, quick_config: Path) -> None:
    """SIGKILL a worker process mid-epoch: the master requeues that epoch and the run finishes."""
    import psutil

    run_dir = tmp_path / "run"
    master = _start_run(run_dir, quick_config, minutes=0.5, epochs=1)
    # The nannies run inside the master; each spawns its worker as a child process.
    workers = [
        p for p in psutil.Process(master.pid).children(recursive=True) if "spawn_main" in " ".join(p.cmdline())
    ]
    assert workers, "no worker processes found"
    time.sleep(0.5)  # let the next epochs start
    workers[0].kill()
    _, stderr = master.communicate(timeout=180)
    assert master.returncode == 0, stderr
    results = _check_results(run_dir)
    retried = [e for t in results["trials"] for e in t["epochs"] if e["attempt"] > 1]
    attempts = sum(t["attempts"] for t in results["trials"])
    assert attempts >= 1, "no epoch was lost to the killed worker"
    assert retried or any(t["status"] == "deadline" for t in results["trials"])


@pytest.mark.slow
def test_data_parallel_trials_with_gloo(tmp_path: Path, quick_config: Path) -> None:
    run_dir = tmp_path / "run"
    proc = aihpc("run", "--minutes", "0.3", "--config", str(quick_config), "--workers", "1",
                 "--procs-per-trial", "2", "--out", str(run_dir))  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    results = _check_results(run_dir)  # operations equal samples x per-sample counts: counted once
    assert results["config"]["procs_per_trial"] == 2
    assert any(e["status"] == "ok" for t in results["trials"] for e in t["epochs"])
