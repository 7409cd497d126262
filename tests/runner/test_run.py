"""``aihpc run`` end to end, as a user types it: a real master, real Dask workers, real
processes."""

from __future__ import annotations

import json
import math
import os
import signal
import sqlite3
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest
from runner_helpers import query_store

from aihpc.mlperf.check import check_compliance
from aihpc.results.read import trial_arch
from aihpc.runner.search.proposals import FORK
from fixture_run import aihpc, aihpc_main

# whole timed runs: one group under pytest-xdist (make test), so they run one at a time; the other
# groups of whole runs (faults, slurm, verify) may run beside them, on the other core
# Each test is a whole run, in a group of whole runs (Makefile): "runs", or "runs2" beside it.
RUNS = pytest.mark.xdist_group("runs")

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
    "peak_seconds": 0.2,  # the peak's figures are checked, not its precision
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


@pytest.fixture
def quick_config(tmp_path: Path) -> Path:
    path = tmp_path / "run.toml"
    path.write_text(_toml(QUICK))
    return path


def _check_results(run_dir: Path) -> dict:
    """results.json of a finished run, checked against itself, and its MLPerf log; returned."""
    results = json.loads((run_dir / "results.json").read_text())
    assert results["schema_version"] == 3
    _check_layout(run_dir, results)
    _check_score(results)
    _check_peak(results)
    _check_energy(results)
    _check_devices(results)
    _check_worker_memory(results)
    ok, output = check_compliance(run_dir / "mlperf.log")
    assert ok, output
    return results


def _check_layout(run_dir: Path, results: dict) -> None:
    """A line per top-level field (sorted) and per trial."""
    lines = (run_dir / "results.json").read_text().splitlines()
    trials = results["trials"]
    assert (
        len(lines) == 2 + len(results) - 1 + len(trials) + 2
        and lines[0] == "{"
        and lines[-1] == "}"
    )
    fields = [json.loads(line.split(":", 1)[0]) for line in lines[1:-1] if line.startswith('"')]
    assert fields == sorted(results)
    assert [
        json.loads(line.rstrip(",")) for line in lines[fields.index("trials") + 2 :][: len(trials)]
    ] == trials


def _check_score(results: dict) -> None:
    """The score's wiring, recomputed from the file's own fields."""
    score = results["score"]
    assert score["ops"] > 0 and score["ops_per_second"] > 0
    # a proxy screening's operations count like an epoch's (0 in a run without screening)
    assert (
        score["ops"] == sum(t["ops"]["total"] for t in results["trials"]) + score["screening_ops"]
    )
    assert score["screening_ops"] == sum(s["ops"] for s in results["screenings"])
    assert score["ops_per_second"] == pytest.approx(score["ops"] / score["wall_seconds"])
    n_val = results["data"]["num_val"]
    best = max(
        t["best_val_accuracy"] for t in results["trials"] if t["best_val_accuracy"] is not None
    )
    assert score["best_accuracy"] == best
    capped = min(best, 1 - 0.5 / n_val)
    assert score["regulated_score"] == pytest.approx(
        score["ops_per_second"] * abs(math.log(1 - capped))
    )
    assert score["peak_flops_per_s"] == results["peak"]["total_flops_per_s"]
    assert score["peak_fraction"] == pytest.approx(
        score["ops_per_second"] / score["peak_flops_per_s"]
    )
    for t in results["trials"]:
        for e in t["epochs"]:
            ops = round(e["train_samples"] * t["ops_per_sample"]["train"]) + round(
                e["val_samples"] * t["ops_per_sample"]["eval"]
            )
            assert e["ops"] == ops


def _check_peak(results: dict) -> None:
    """The peak is every worker's at once, measured before the run and again after it (on the
    workers left: a worker killed near the end may not be back), its drift over the workers
    measured both times beside the same workers of their node (here all on this one: every
    worker, or none); each worker's is the sum of its processes' (one each, or procs_per_trial),
    all measured at once."""
    peak = results["peak"]
    assert peak["workers"] == len(peak["per_worker"]) == len(results["workers"])
    assert peak["total_flops_per_s"] == pytest.approx(
        sum(p["flops_per_s"] for p in peak["per_worker"])
    )
    before = {p["worker"]: p["flops_per_s"] for p in peak["per_worker"]}
    after = {p["worker"]: p["flops_per_s"] for p in peak["after"]["per_worker"]}
    both = peak["drift_workers"]
    assert len({w["host"] for w in results["devices"]["workers"]}) == 1
    assert set(after) <= set(before)
    assert both == (sorted(after) if after.keys() == before.keys() else [])
    drift = sum(after[w] for w in both) / sum(before[w] for w in both) - 1 if both else None
    assert peak["drift"] == (pytest.approx(drift) if both else None)
    procs = results["config"]["procs_per_trial"]
    for p in peak["per_worker"]:
        assert len(p["parts"]) == procs and p["flops_per_s"] == pytest.approx(
            sum(q["flops_per_s"] for q in p["parts"])
        )


def _check_devices(results: dict) -> None:
    """The worker-to-device mapping: every worker, its host, a device per process (the CPU
    here)."""
    env = results["environment"]
    assert env["torch_version"] and "git_commit" in env and "hostname" in env
    procs = results["config"]["procs_per_trial"]
    mapping = results["devices"]["workers"]
    assert sorted(w["worker"] for w in mapping) == sorted(
        str(p["worker"]) for p in results["peak"]["per_worker"]
    )
    assert all(
        w["host"] == env["hostname"] and w["devices"] == [{"device": "cpu"}] * procs
        for w in mapping
    )
    assert sorted(w["slot"] for w in mapping) == list(
        range(len(mapping))
    )  # one host, one set of GPUs: numbered


def _check_worker_memory(results: dict) -> None:
    """Every placed worker's memory limit (the node's share: these runs give no --worker-memory)
    and what it held before its first trial."""
    from aihpc.launch.memory import node_share

    block = results["worker_memory"]
    workers = block["workers"]
    assert [w["worker"] for w in workers] == [w["worker"] for w in results["devices"]["workers"]]
    for w in workers:
        assert w["limit_bytes"] == node_share(w["node_bytes"], len(workers))
        assert 0 < w["rss_bytes"] < w["limit_bytes"]
    assert block["terminate_fraction"] == 0.95 and "less a reserve" in block["rule"]


def _check_energy(results: dict) -> None:
    """This VM has no RAPL and no GPU: the energy block is null with the reason, never an
    estimate."""
    energy = results["energy"]
    assert set(energy) == {"devices", "complete", "reason", "notes", "interval_s", "total"}
    assert energy["notes"] == []  # no worker restarted
    if Path("/sys/class/powercap").exists() or results["environment"].get("gpus"):
        return  # a machine with counters: the figures are checked in tests/energy
    total = energy["total"]
    assert (total["joules"], total["watts"], total["ops_per_joule"], total["gops_per_watt"]) == (
        None,
    ) * 4
    assert energy["complete"] is False and energy["reason"]
    if "resumed" not in energy["reason"]:
        assert energy["devices"] == [
            {
                "device": "CPU packages",
                "host": results["environment"]["hostname"],
                "source": "rapl",
                "joules": None,
                "seconds": None,
                "watts": None,
                "samples": 0,
                "max_interval_s": None,
                "wraps": 0,
                "resets": 0,
                "reason": "no RAPL: /sys/class/powercap does not exist "
                "(no powercap in this kernel, or not exposed to "
                "this host)",
            }
        ]


@pytest.mark.slow
@RUNS
def test_full_run_scores_and_logs(
    tmp_path: Path, quick_config: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """One run, with proxy screening, read by everything that only reads a run: its score and
    log, inference of its best model, the report, and verify (which then catches an edit).  The
    run is a process of its own; the commands that read it go through the CLI's entry point in
    this one."""
    run_dir = tmp_path / "run"
    proc = aihpc(
        "run",
        "--minutes",
        "0.4",
        "--config",
        str(quick_config),
        "--out",
        str(run_dir),
        "--seed",
        "1",
        "--screen",
        "2",
    )
    assert proc.returncode == 0, proc.stderr
    assert "score" in proc.stdout and "VALID" in proc.stdout
    results = _check_results(run_dir)
    energy = [line for line in proc.stdout.splitlines() if line.startswith("  energy ")]
    assert energy == [
        f"  energy           not measured: {results['energy']['reason']}"
    ]  # one line, with the reason
    done = [t for t in results["trials"] if t["status"] in ("completed", "early_stopped")]
    assert done, [t["status"] for t in results["trials"]]
    assert results["score"]["valid"] and results["score"]["best_accuracy"] >= 0.3
    # bookkeeping: every child names a parent that existed before it; architectures are unique,
    # but for forks of a running leader, which keep their parent's
    trials = {t["id"]: t for t in results["trials"]}
    for t in results["trials"]:
        parent = t["parent"]
        assert parent is None if t["id"] == 0 else parent in trials and parent < t["id"]
    forks = [t for t in results["trials"] if t["morph"].startswith(FORK)]
    assert all(t["arch_hash"] == trials[t["parent"]]["arch_hash"] for t in forks)
    hashes = [t["arch_hash"] for t in results["trials"] if t not in forks]
    assert len(hashes) == len(set(hashes))
    _check_served(run_dir, results, capsys)
    _check_verify_with_screening(run_dir, results, capsys)


def _check_served(run_dir: Path, results: dict, capsys: pytest.CaptureFixture[str]) -> None:
    """The run's best trial serves under LoadGen (the server's rate search: the scenarios one by
    one are tests/infer's), its accuracy in float32 its own; the run's report shows the run and
    its inference."""
    code, _, err = aihpc_main(
        capsys,
        "infer",
        str(run_dir),
        "--scenario",
        "server",
        "--samples",
        "128",
        "--seconds",
        "1",  # rates down to 160 queries/s (640 in 4 s): the best model of a busy suite's run
        "--server-steps",
        "2",
        "--latency-ms",
        "1000",  # the plumbing, not the latency: a loaded machine stalls a process 200 ms at times
        "--threads",
        "1",  # this process's share of the cores (tests/conftest.py)
        "--peak-seconds",
        "0.2",
    )
    assert code == 0, err
    infer = json.loads((run_dir / "infer" / "infer.json").read_text())["data"]
    best = max(t["best_val_accuracy"] or 0 for t in results["trials"])
    assert (
        infer["quality"]["measure"] == "accuracy" and infer["source"]["best_val_accuracy"] == best
    )
    assert infer["valid"] and infer["scenarios"]["server"]["max_qps"] > 0
    assert aihpc_main(capsys, "verify", str(run_dir / "infer"))[0] == 0
    code, _, err = aihpc_main(capsys, "report", str(run_dir))
    assert code == 0, err
    page = (run_dir / "report.html").read_text()
    assert len(page) > 10_000 and "Inference under MLPerf LoadGen" in page


def _check_verify_with_screening(
    run_dir: Path, results: dict, capsys: pytest.CaptureFixture[str]
) -> None:
    """A fresh run with proxy screening (however few epochs a busy machine fits in) verifies; a
    screening's operations edited afterwards are found by the recount and the chain.
    (_check_results checked that the aihpc_screening events pass MLPerf's checker.)"""
    code, out, err = aihpc_main(capsys, "verify", str(run_dir))
    assert code == 0, out + err
    assert out.startswith(f"aihpc verify {run_dir}: VERIFIED\n")
    assert results["screenings"] and "proxy screenings" in out
    assert results["score"]["screening_ops"] > 0
    with sqlite3.connect(run_dir / "aihpc.sqlite") as db:
        db.execute("UPDATE screenings SET ops = ops + 1 WHERE id = 0")
    code, out, _ = aihpc_main(capsys, "verify", str(run_dir))
    assert code == 4
    assert "proxy screening 0: operations logged" in out
    assert "proxy screening 0 differs from the record committed during the run" in out


POLL_SECONDS = 0.3  # how often the tests look at a running run's store and processes
LOSS_SECONDS = (
    5.0  # a killed worker's epoch shows in the store as lost within this (measured: 0.3 s)
)


def _ok_epochs(db: Path) -> int:
    """Trial-epochs the run has finished and committed."""
    rows = query_store(db, "SELECT COUNT(*) FROM epochs WHERE status = 'ok'")
    return rows[0][0] if rows else 0


def _poll(condition, timeout: float, run: subprocess.Popen | None = None):
    """``condition()``'s first truthy value, polled until ``timeout`` seconds pass or ``run`` ends;
    else its last value.

    Once ``run`` has ended the condition is looked at once more, so what the run did before
    ending counts.
    """
    t_end = time.monotonic() + timeout
    while True:
        ended = run is not None and run.poll() is not None
        value = condition()
        if value or ended or time.monotonic() >= t_end:
            return value
        time.sleep(POLL_SECONDS)


def _wait_for(condition, what: str, timeout: float, run: subprocess.Popen | None = None):
    """``condition()``'s first truthy value; fails, naming ``what``, if ``timeout`` passes or
    ``run`` ends first."""
    value = _poll(condition, timeout, run)
    if not value:
        if run is not None and run.poll() is not None:
            pytest.fail(f"the run ended (exit status {run.returncode}) before {what}")
        pytest.fail(f"{what} did not happen within {timeout:.0f} s")
    return value


def _start_run(
    run_dir: Path, config: Path, minutes: float, epochs: int, **popen
) -> subprocess.Popen:
    """Start ``aihpc run`` in the background; return once ``epochs`` trial-epochs have finished.

    The run is still going when this returns (its ``minutes`` must leave time for what the
    test does next).
    """
    master = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "aihpc",
            "run",
            "--minutes",
            str(minutes),
            "--config",
            str(config),
            "--out",
            str(run_dir),
            "--no-live",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        **popen,
    )
    db = run_dir / "aihpc.sqlite"
    _wait_for(
        lambda: _ok_epochs(db) >= epochs, f"{epochs} trial-epochs finished", timeout=180, run=master
    )
    assert master.poll() is None, "the run ended before the test could act"
    return master


def _worker_processes(master: subprocess.Popen) -> list[psutil.Process]:
    """The Dask worker processes of a local run: the master's descendants that serve a TCP port.

    The nannies, inside the master, start one worker each, forked from the
    master's fork server (aihpc.launch.dask_settings); the master's other
    children, the HPO search and the fork server, serve no TCP port.
    """
    workers = []
    for p in psutil.Process(master.pid).children(recursive=True):
        try:
            if any(c.status == psutil.CONN_LISTEN for c in p.net_connections(kind="tcp")):
                workers.append(p)
        except psutil.Error:  # gone (a worker restarting) since it was listed
            pass
    return workers


def _busy_worker(
    master: subprocess.Popen, window: float = 0.5, share: float = 0.2
) -> psutil.Process | None:
    """The worker process that used the most CPU over the next ``window`` seconds, if that is at
    least ``share`` of a core (it is training: an idle Dask worker uses about 1 %); else None."""

    def cpu_seconds(p: psutil.Process) -> float:
        t = p.cpu_times()
        return t.user + t.system

    start = {}
    for p in _worker_processes(master):
        try:
            start[p] = cpu_seconds(p)
        except psutil.Error:
            pass
    time.sleep(window)  # the interval the CPU use is measured over
    used = {}
    for p, t in start.items():
        try:
            used[p] = cpu_seconds(p) - t
        except psutil.Error:
            pass
    busiest = max(used, key=used.get, default=None)
    return busiest if busiest is not None and used[busiest] >= share * window else None


def _trials_that_lost_an_epoch(db: Path) -> list[int]:
    """Trials for which the master has recorded a lost epoch (``trials.attempts``, lost
    attempts)."""
    return [
        row[0] for row in query_store(db, "SELECT id FROM trials WHERE attempts > 0 ORDER BY id")
    ]


def _kill_worker_mid_epoch(master: subprocess.Popen, db: Path, kills: int = 3) -> int:
    """SIGKILL a worker while it trains; return the trial whose epoch the master then records as
    lost.

    A worker killed in the instant between two epochs (its result sent, its
    next task not yet there) loses nothing; if the store shows no lost epoch
    within ``LOSS_SECONDS`` of a kill, another busy worker is killed, up to ``kills`` times.
    """
    for _ in range(kills):
        worker = _wait_for(
            lambda: _busy_worker(master), "a worker training (using CPU)", timeout=60, run=master
        )
        worker.kill()
        lost = _poll(lambda: _trials_that_lost_an_epoch(db), LOSS_SECONDS, run=master)
        if lost:
            return lost[0]
    pytest.fail(
        f"the store recorded no lost epoch after {kills} workers were killed while training"
    )


@pytest.mark.slow
@RUNS
def test_a_run_survives_a_killed_worker_search_process_and_master(
    tmp_path: Path, quick_config: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Three faults in one run, each a SIGKILL as an out-of-memory killer sends it.

    A worker process killed mid-epoch: the master requeues that epoch, and it
    finishes on a later attempt.  Then the search process (named aihpc-hpo-0 in
    ps): a new one is started, told the finished trials, and proposes the next.
    Then the master and its workers at once: ``aihpc run --resume`` continues
    the run in its own configuration, keeping every committed epoch, and the
    score's clock counts the time no master ran.  The finished run verifies.
    """
    run_dir = tmp_path / "run"
    db = run_dir / "aihpc.sqlite"
    master = _start_run(
        run_dir, quick_config, minutes=0.6, epochs=1, start_new_session=True
    )  # past the peak: workers train
    trial = _kill_worker_mid_epoch(master, db)
    # The requeued epoch runs on the surviving worker (or the restarted one) within an epoch or
    # two; its row, ok or cut short by the deadline, records the attempt that finished it.
    _wait_for(
        lambda: query_store(db, "SELECT 1 FROM epochs WHERE trial_id = ? AND attempt > 1", trial),
        f"trial {trial}'s lost epoch finished on a later attempt",
        timeout=180,
        run=master,
    )
    search = _kill_search_process(master)
    _wait_for(
        lambda: _trial_created_after_a_restart(db),
        "a trial proposed by the restarted search process",
        timeout=120,
        run=master,
    )
    killed = _kill_master(master, db)
    time.sleep(2.0)  # downtime, on purpose: the score's clock must count it
    resumed_at = time.time()
    proc = aihpc("run", "--resume", str(run_dir))
    assert proc.returncode == 0, proc.stderr
    results = _check_results(run_dir)
    _check_resumed(results, killed, resumed_at)
    _check_requeued(results, trial)
    _check_search_restarted(results, search.pid, proc.stdout)
    assert aihpc_main(capsys, "verify", str(run_dir))[0] == 0


def _trial_created_after_a_restart(db: Path) -> bool:
    """Whether the store records a restarted search process and a trial created after it."""
    rows = query_store(db, "SELECT value FROM meta WHERE key = 'helper_restarts'")
    restarts = json.loads(rows[0][0]) if rows else []
    return bool(restarts) and bool(
        query_store(db, "SELECT 1 FROM trials WHERE t_created > ?", restarts[0]["t"])
    )


@dataclass(frozen=True)
class _Killed:
    """What the store held when the test killed the master: its committed epochs (trial, epoch,
    training and evaluation operations) and its one segment; and when the master was gone."""

    epochs: list[tuple[int, int, int, int]]
    segment: tuple[float, float]
    at: float


def _kill_master(master: subprocess.Popen, db: Path) -> _Killed:
    """SIGKILL the master and its workers at once (its process group), while the run goes on."""
    assert master.poll() is None, "the run ended before the test could kill its master"
    os.killpg(master.pid, signal.SIGKILL)
    master.wait()
    killed_at = time.time()
    with sqlite3.connect(db) as con:
        epochs = con.execute(
            "SELECT trial_id, epoch, ops_train, ops_eval FROM epochs WHERE status = 'ok'"
        ).fetchall()
        (segment,) = con.execute("SELECT start, stop FROM segments").fetchall()
    assert len(epochs) >= 2
    assert not (db.parent / "results.json").exists()
    assert segment[1] <= killed_at
    return _Killed(epochs, segment, killed_at)


def _check_resumed(results: dict, killed: _Killed, resumed_at: float) -> None:
    """The resumed run kept its configuration and every epoch committed before the kill; its
    clock counts the downtime between the dead master's segment and the new one."""
    assert results["config"]["dataset"] == "digits"  # the run's own configuration, not the defaults
    trials = {t["id"]: t for t in results["trials"]}
    assert {trial_arch(trials, i)["input_shape"][0] for i in trials} == {1}
    kept = {
        (t["id"], e["epoch"]): e["ops"]
        for t in results["trials"]
        for e in t["epochs"]
        if e["status"] == "ok"
    }
    for trial_id, epoch, ops_train, ops_eval in killed.epochs:
        assert kept[(trial_id, epoch)] == ops_train + ops_eval
    segments = results["segments"]
    assert len(segments) == 2
    first_start, first_stop = killed.segment
    assert segments[0]["t_end"] == pytest.approx(
        first_stop - first_start
    )  # the dead master's segment, unchanged
    # the gap between the segments covers at least the time the test saw no master (>= the 2 s
    # slept)
    downtime = segments[1]["t_start"] - segments[0]["t_end"]
    assert downtime >= resumed_at - killed.at >= 2.0
    assert results["score"]["wall_seconds"] == pytest.approx(
        segments[1]["t_end"] - segments[0]["t_start"]
    )


def _kill_search_process(master: subprocess.Popen) -> psutil.Process:
    """SIGKILL the run's hyperparameter search process; return it once it is gone."""
    (search,) = [p for p in psutil.Process(master.pid).children() if p.name() == "aihpc-hpo-0"]
    search.send_signal(signal.SIGKILL)
    search.wait(10)
    return search


def _check_requeued(results: dict, trial: int) -> None:
    """``trial`` lost an epoch to a killed worker, recorded with that worker, and finished it on a
    later attempt."""
    (lost,) = [t for t in results["trials"] if t["id"] == trial]
    assert lost["attempts"] >= 1
    assert any(e["attempt"] > 1 for e in lost["epochs"]), lost["epochs"]
    # the loss is recorded with the worker Dask last ran the epoch on (KilledWorker names it)
    losses = [loss for loss in results["losses"] if loss["trial_id"] == trial]
    workers = {w["worker"] for w in results["devices"]["workers"]}
    assert losses and losses[0]["requeued"] and str(losses[0]["worker"]) in workers, (
        losses,
        workers,
    )
    assert losses[0]["reason"].startswith("KilledWorker")


def _check_search_restarted(results: dict, pid: int, stdout: str) -> None:
    """The search process ``pid`` was restarted once, the run's summary (``stdout``) says so, and
    the new one proposed trials."""
    (restart,) = results["helper_restarts"]
    assert (restart["stream"], restart["pid"], restart["how"]) == (0, pid, "was killed by signal 9")
    assert 0 < restart["t"] < results["score"]["wall_seconds"]
    # the search went on: trials proposed after the restart, with hyperparameters from the new
    # process
    assert [
        t for t in results["trials"] if t["t_start"] is not None and t["t_start"] > restart["t"]
    ]
    assert (
        "helper restarted hyperparameter search process 0 "
        f"(pid {pid}) was killed by signal 9 at "
        f"{restart['t']:.1f} s; a new one was told {restart['history']} finished trials"
    ) in stdout, stdout


@pytest.mark.slow
@pytest.mark.xdist_group("runs2")
def test_data_parallel_trials_with_gloo(tmp_path: Path, quick_config: Path) -> None:
    # The worker's two rank processes start while the peak is measured, before the run's clock;
    # a digits epoch then takes 1-3 s on a busy 2-core machine.
    run_dir = tmp_path / "run"
    proc = aihpc(
        "run",
        "--minutes",
        "0.4",
        "--config",
        str(quick_config),
        "--workers",
        "1",
        "--procs-per-trial",
        "2",
        "--out",
        str(run_dir),
    )
    assert proc.returncode == 0, proc.stderr
    results = _check_results(run_dir)  # operations equal samples x per-sample counts: counted once
    assert results["config"]["procs_per_trial"] == 2
    epochs = [(e["status"], round(e["t_end"], 1)) for t in results["trials"] for e in t["epochs"]]
    assert any(status == "ok" for status, _ in epochs), f"no data-parallel epoch finished: {epochs}"
