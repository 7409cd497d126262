"""benchmarks/scale_rehearsal.py at a reduced size: a whole run with simulated workers, then
``aihpc report``, ``verify`` and ``rank`` on it, and every column of its table."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import psutil
import pytest

import aihpc

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
SRC = Path(aihpc.__file__).resolve().parents[1]

# a whole run and three commands on it, about 40 s: the group of whole runs, one at a time
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("runs2")]  # beside "runs": see Makefile

WORKERS, MINUTES, EPOCH_SECONDS = 32, 5.0, 10.0  # 960 epochs: every stage, at a small size

# the rehearsal's scripts import aihpc from this checkout
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")])}


@pytest.fixture(scope="module")
def rehearsal(tmp_path_factory) -> tuple[Path, dict]:
    out = tmp_path_factory.mktemp("rehearsal")
    cmd = [
        sys.executable,
        str(BENCHMARKS / "scale_rehearsal.py"),
        "--out",
        str(out),
        "--sizes",
        str(WORKERS),
        "--minutes",
        str(MINUTES),
        "--epoch-seconds",
        str(EPOCH_SECONDS),
        "--weight-bytes",
        "4096",
        "--peak-seconds",
        "0.5",
    ]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=ENV)
    assert p.returncode == 0, p.stdout + p.stderr
    return out, json.loads((out / "rehearsal.json").read_text())


@pytest.fixture
def benchmarks(monkeypatch):
    """The benchmark's modules, imported as the script imports them (its folder on the path)."""
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    import rehearsal_table
    import scale_rehearsal

    return scale_rehearsal, rehearsal_table


def test_the_rehearsed_run_verifies_and_report_and_rank_accept_it(rehearsal):
    out, data = rehearsal
    (row,) = data["rows"]
    assert row["stages"] == dict.fromkeys(
        ("init", "master", "after", "results.json", "report", "verify", "rank"), "ok"
    )
    assert row["verify"]["passed"] and "VERIFIED" in row["verify"]["first_lines"][0]
    assert row["rank"]["passed"] and row["report"]["passed"]
    run_dir = out / f"w{WORKERS}"
    for name in ("results.json", "mlperf.log", "aihpc.sqlite", "report.html"):
        assert (run_dir / name).is_file(), name
    for name in ("rehearsal.md", "rehearsal.png", f"w{WORKERS}.log"):
        assert (out / name).is_file(), name
    assert "operations counted with aihpc." in (out / f"w{WORKERS}.log").read_text()


def test_every_column_has_a_plausible_number(rehearsal):
    _, data = rehearsal
    (row,) = data["rows"]
    m, files = row["master"], row["files"]
    expected = WORKERS * MINUTES * 60 / EPOCH_SECONDS
    assert row["expected_epochs"] == pytest.approx(expected)
    assert abs(row["epochs"] - expected) <= 0.05 * expected + 1
    assert 0 < row["trials"] <= row["epochs"]
    assert m["results"] >= row["epochs"] and m["counted"] >= row["trials"] - WORKERS
    assert m["results_per_s"] > 0 and m["master_s"] > 0
    assert 0 < m["latency_p50"] <= m["latency_p99"]
    assert m["peak_rss"] > 10**7 and row["tpe_peak_rss"] > 0
    assert row["needed_results_per_s"] == pytest.approx(WORKERS / EPOCH_SECONDS)
    for name in ("results_json", "store", "mlperf_log", "report_html"):
        assert files[name] > 0, name
    assert m["store_bytes"] > 0
    for weights in (m["weights_peak"], files["weights"]):
        # sparse: the apparent size is real, the blocks are not
        assert weights["files"] > 0 and weights["apparent"] == 4096 * weights["files"]
        assert weights["blocks"] < weights["apparent"]
    assert m["weights_peak"]["files"] >= files["weights"]["files"]
    times = row["results_json"]
    assert all(times[k] > 0 for k in ("build_s", "write_s", "mlperf_stop_s", "summary_s"))
    assert all(row[c]["seconds"] > 0 for c in ("report", "verify", "rank"))


def test_the_run_is_measured_tenth_by_tenth(rehearsal):
    _, data = rehearsal
    marks = data["rows"][0]["master"]["checkpoints"]
    assert [c["tenth"] for c in marks] == list(range(11))
    assert [c["virtual_s"] for c in marks] == pytest.approx(
        [MINUTES * 6.0 * k for k in range(11)], abs=1.3
    )
    for c in marks[1:]:
        assert c["results_per_s"] > 0 and c["rss"] > 0
        assert c["latency_p50"] is None or c["latency_p50"] <= c["latency_p99"]


def test_the_table_has_every_column(rehearsal):
    out, _ = rehearsal
    table = (out / "rehearsal.md").read_text()
    header = next(line for line in table.splitlines() if line.startswith("| workers | virtual min"))
    for column in (
        "epochs (expected)",
        "results.json",
        "store",
        "MLPerf log",
        "weights peak",
        "weights final",
        "results.json write",
        "report",
        "verify",
        "rank",
        "master peak RSS",
        "results/s (needed)",
        "decision p50 / p99",
    ):
        assert column in header, column
    assert "VERIFIED" in table and "per tenth" in table
    assert "—" not in next(line for line in table.splitlines() if line.startswith(f"| {WORKERS} |"))


def test_the_plot_is_written_by_hand_without_matplotlib(rehearsal, benchmarks, tmp_path):
    _, table = benchmarks
    _, data = rehearsal
    path = tmp_path / "rehearsal.svg"
    table.plot_svg(table.series(data["rows"]), path)
    svg = ET.parse(path).getroot()
    assert svg.tag.endswith("svg") and len(list(svg)) > 20


def test_a_stage_past_its_timeout_is_stopped_and_recorded(benchmarks, tmp_path):
    rehearsal, _ = benchmarks
    progress = tmp_path / "progress.json"
    child = (
        "import json, time\n"
        f"open({str(progress)!r}, 'w').write(json.dumps({{'stage': 'master', "
        "'stage_start': time.time()}))\n"
        "time.sleep(60)\n"
    )
    state = rehearsal.run_child([sys.executable, "-c", child], progress, tmp_path / "log", 1.0)
    assert state["stopped"] == "master"
    stages = rehearsal.child_stages(state, 1.0)
    assert stages == {
        "init": "ok",
        "master": "stopped after 1 s",
        "after": "not run",
        "results.json": "not run",
    }
    outcome = rehearsal.cli_stage("verify", tmp_path, 0.05)
    assert outcome["status"] == "stopped after 0.05 s" and not outcome["passed"]


def test_a_killed_rehearsal_master_resumes_with_every_committed_epoch(tmp_path: Path) -> None:
    """SIGKILL the master (the store batches nothing: each epoch is committed as it ends), resume
    it."""
    run_dir = tmp_path / "run"
    db = run_dir / "aihpc.sqlite"
    cmd = [
        sys.executable,
        str(BENCHMARKS / "rehearsal_run.py"),
        "--run-dir",
        str(run_dir),
        "--workers",
        "16",
        "--epoch-seconds",
        "10",
        "--minutes",
        "1",  # 96 epochs of 16 workers: 40 before the kill, the rest after the resume
        "--weight-bytes",
        "4096",
        "--peak-seconds",
        "0.5",
    ]
    master = subprocess.Popen(
        [*cmd, "--progress", str(tmp_path / "p1.json")],
        env=ENV,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    _kill_after(master, db, epochs=40)
    before = _committed(db)
    assert len(before) >= 40, master.stderr.read() if master.stderr else ""
    assert not (run_dir / "results.json").exists()
    # the master logs an epoch just after committing it: a kill in between leaves it out of the
    # log; make that happen for sure, to the last epoch logged, which the resume must log again
    dropped = _drop_the_last_logged_epoch(run_dir / "mlperf.log")
    assert dropped == 5  # epoch_start, epoch_stop, eval_start, eval_stop, eval_accuracy
    resumed = subprocess.run(
        [*cmd, "--resume", "--progress", str(tmp_path / "p2.json")],
        env=ENV,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert resumed.returncode == 0, resumed.stderr
    after = set(_committed(db))
    assert set(before) <= after and len(after) > len(before)  # every committed epoch, as it was
    results = json.loads((run_dir / "results.json").read_text())
    assert len(results["segments"]) == 2
    verify = subprocess.run(
        [sys.executable, "-m", "aihpc", "verify", str(run_dir)],
        env=ENV,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert verify.returncode == 0, verify.stdout + verify.stderr


def _committed(db: Path) -> list[tuple]:
    """The store's epochs as the master committed them (none before the store exists)."""
    if not db.exists():
        return []
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as con:
        try:
            return con.execute(
                "SELECT trial_id, epoch, ops_train, ops_eval, weights_digest FROM epochs"
            ).fetchall()
        except sqlite3.Error:
            return []


def _kill_after(master: subprocess.Popen, db: Path, epochs: int) -> None:
    """SIGKILL ``master`` once it has committed ``epochs`` epochs (or after 120 s), and its search
    processes: the rehearsal pauses them (SIGSTOP) while it does the workers' share, and a paused
    one whose master is killed stays stopped for good; a running one sees the pipe close and
    exits."""
    deadline = time.time() + 120
    while len(_committed(db)) < epochs and time.time() < deadline and master.poll() is None:
        time.sleep(0.05)
    search = psutil.Process(master.pid).children()
    master.send_signal(signal.SIGKILL)
    master.wait()
    for process in search:
        with contextlib.suppress(psutil.NoSuchProcess):
            process.kill()


def _drop_the_last_logged_epoch(log: Path) -> int:
    """Remove the MLPerf log's lines of the last epoch it logged an accuracy for; how many."""
    lines = log.read_text().splitlines(keepends=True)
    last = next(
        json.loads(line.split(" ", 1)[1])["metadata"]
        for line in reversed(lines)
        if '"eval_accuracy"' in line
    )

    def of_last(line: str) -> bool:
        meta = json.loads(line.split(" ", 1)[1]).get("metadata") or {}
        return (meta.get("trial_id"), meta.get("trial_epoch")) == (
            last["trial_id"],
            last["trial_epoch"],
        )

    kept = [line for line in lines if not of_last(line)]
    log.write_text("".join(kept))
    return len(lines) - len(kept)
