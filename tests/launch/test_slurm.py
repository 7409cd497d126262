"""aihpc.launch.slurm against a real SLURM cluster, on this host's node (tests/slurm_cluster.py).

The fast tests check argument validation and srun's environment without
SLURM.  The slow ones run on the session's cluster (the ``slurm_up`` fixture),
in its default partition, this host (the run inside an allocation across the
namespace nodes, where the cluster has them); where it cannot start they skip
with the reason.  tests/runner/test_multinode.py runs on its namespace nodes.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import slurm_cluster
from aihpc.base.errors import ConfigError
from aihpc.launch import jobqueue, slurm

# The one-node cluster's jobs and runs: under pytest-xdist (make test) one test at a time, in a
# group of their own beside the local runs' ("runs"), so that the two kinds of whole run split
# between the cores.
pytestmark = pytest.mark.xdist_group("slurm")

_sh, _queued, _wait = slurm_cluster.sh, slurm_cluster.queued, slurm_cluster.wait


@pytest.fixture(scope="module")
def two_workers(slurm_up, tmp_path_factory):
    """jobqueue_cluster("slurm", workers=2) and a client with both workers up."""
    from distributed import Client

    logs = tmp_path_factory.mktemp("slurm-logs")
    cluster = jobqueue.jobqueue_cluster(
        "slurm",
        2,
        cores_per_worker=1,
        memory_per_worker="512MiB",
        walltime="00:10:00",
        log_directory=logs,
        key_dir=logs / "tls",
    )
    client = Client(cluster)
    try:
        client.wait_for_workers(2, timeout=60)
    except TimeoutError:
        client.close()
        cluster.close()
        pytest.fail(f"2 SLURM workers not up within 60 s; squeue: {_sh('squeue').stdout!r}")
    yield cluster, client
    client.close()
    cluster.close()


# ---------------------------------------------------------------------------
# Fast: no SLURM needed.


def test_in_allocation_follows_slurm_job_id(monkeypatch):
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    assert not slurm.in_allocation()
    with pytest.raises(ConfigError, match="SLURM_JOB_ID"):
        slurm.current_task()
    monkeypatch.setenv("SLURM_JOB_ID", "42")
    monkeypatch.setenv("SLURM_PROCID", "5")
    monkeypatch.setenv("SLURM_NTASKS", "8")
    monkeypatch.setenv("SLURM_LOCALID", "1")
    monkeypatch.setenv("SLURM_JOB_NUM_NODES", "2")
    monkeypatch.setenv("SLURM_CPUS_PER_TASK", "4")
    assert slurm.in_allocation()
    assert slurm.current_task() == slurm.SlurmTask(
        "42", rank=5, ntasks=8, local_id=1, nodes=2, cpus_per_task=4
    )


def test_worker_env_pins_one_gpu_per_local_task(monkeypatch):
    task = slurm.SlurmTask("1", rank=6, ntasks=8, local_id=2, nodes=2, cpus_per_task=8)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1,2,3")
    assert slurm._worker_env(task) == {"OMP_NUM_THREADS": "8", "CUDA_VISIBLE_DEVICES": "2"}
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3")  # srun --gpus-per-task=1 already bound it
    assert slurm._worker_env(task) == {"OMP_NUM_THREADS": "8"}


def test_worker_env_gives_a_two_gpu_worker_two_gpus(monkeypatch):
    task = slurm.SlurmTask("1", rank=3, ntasks=4, local_id=1, nodes=2, cpus_per_task=8)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1,2,3")
    assert slurm._worker_env(task, 2) == {"OMP_NUM_THREADS": "8", "CUDA_VISIBLE_DEVICES": "2,3"}
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,5")  # srun --gpus-per-task=2 already bound them
    assert slurm._worker_env(task, 2) == {"OMP_NUM_THREADS": "8"}


def test_default_scheduler_file_names_job_and_step(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SLURM_STEP_ID", "3")
    assert slurm.default_scheduler_file("42") == tmp_path / "aihpc-scheduler-42.3.json"
    assert slurm.default_scheduler_file("42", step_id="0") == tmp_path / "aihpc-scheduler-42.0.json"


# ---------------------------------------------------------------------------
# Slow: a real cluster.


@pytest.mark.slow
def test_sinfo_shows_this_node(slurm_up):
    rows = [line.split() for line in _sh("sinfo", "-h", "-N", "-o", "%N %P %T").stdout.splitlines()]
    assert [slurm_up.host, "debug*"] in [row[:2] for row in rows]
    assert {row[2] for row in rows if row[0] == slurm_up.host} <= {
        "idle",
        "mixed",
        "allocated",
        "completing",
    }


@pytest.mark.slow
def test_unknown_partition_is_a_config_error(slurm_up):
    with pytest.raises(
        ConfigError, match=r"partition must exist, got 'nope' \(known: debug, netns\)"
    ):
        jobqueue.jobqueue_cluster(
            "slurm", 1, cores_per_worker=1, memory_per_worker="1GiB", queue="nope"
        )


@pytest.mark.slow
def test_two_jobs_two_workers(two_workers):
    cluster, client = two_workers
    ids = jobqueue.job_ids(cluster)
    assert len(ids) == 2
    assert _queued(ids) == {ids[0]: "RUNNING", ids[1]: "RUNNING"}
    # Each worker runs inside its own job: the job ids seen by the workers are squeue's.
    seen = client.run(lambda: os.environ.get("SLURM_JOB_ID"))
    assert sorted(seen.values(), key=int) == sorted(ids, key=int)
    # asked of the workers and the scheduler: Client.scheduler_info answers from a cache that
    # its periodic refresh, asking for no workers, can empty (aihpc.launch.executor.alive)
    assert sorted(client.run(lambda dask_worker: dask_worker.name).values()) == [
        "slurm-0",
        "slurm-1",
    ]
    assert list(client.nthreads().values()) == [1, 1]
    assert client.gather([client.submit(pow, 2, k, pure=False) for k in range(4)]) == [1, 2, 4, 8]


@pytest.mark.slow
def test_scancel_one_job_then_close(two_workers):
    cluster, client = two_workers
    ids = jobqueue.job_ids(cluster)
    by_job = {job: addr for addr, job in client.run(lambda: os.environ.get("SLURM_JOB_ID")).items()}
    assert _sh("scancel", ids[0]).returncode == 0
    _wait(
        lambda: len(client.nthreads()) == 1,
        30,
        "one worker left after scancel",
    )
    assert list(client.nthreads()) == [by_job[ids[1]]]
    assert client.submit(sum, [1, 2, 3], pure=False).result(timeout=30) == 6
    client.close()
    cluster.close()
    _wait(lambda: not _queued(ids), 30, f"jobs {ids} gone from squeue after close")


@pytest.mark.slow
def test_runner_context_under_srun(slurm_up, tmp_path):
    """srun -n 2: rank 0 = scheduler + master + worker slurm-0, rank 1 = worker slurm-1."""
    program = tmp_path / "prog.py"
    program.write_text(
        "import os\n"
        "from aihpc.launch.slurm import runner_context\n"
        "def main():\n"
        f"    with runner_context(scheduler_file={str(tmp_path / 'scheduler.json')!r}) as client:\n"
        "        client.wait_for_workers(2, timeout=60)\n"
        "        names = sorted(client.run(lambda dask_worker: dask_worker.name).values())\n"
        "        ranks = sorted(client.run(lambda: os.environ['SLURM_PROCID']).values())\n"
        "        print('RESULT', names, ranks, client.submit(divmod, 17, 5).result(), flush=True)\n"
        "if __name__ == '__main__':\n"
        "    main()\n"
    )
    out = tmp_path / "job.out"
    wrap = f"srun --kill-on-bad-exit=1 {sys.executable} {program}"
    job = _sh(
        "sbatch",
        "--parsable",
        "-n",
        "2",
        "-c",
        "1",
        "--mem=1G",
        "-t",
        "5",
        "-o",
        str(out),
        "--wrap",
        wrap,
    )
    assert job.returncode == 0, job.stderr
    job_id = job.stdout.strip().split(";")[0]
    _wait(lambda: not _queued([job_id]), 60, f"srun job {job_id} finished")
    text = out.read_text()
    assert "RESULT ['slurm-0', 'slurm-1'] ['0', '1'] (3, 2)" in text, text[-2000:]
    assert not (tmp_path / "scheduler.json").exists()  # rank 0 removed it


# ---------------------------------------------------------------------------
# `aihpc run` with SLURM workers, as a user types it.

QUICK_TOML = (
    'dataset = "digits"\nepochs_min = 1\nepochs_max = 2\nbatch_sizes = [64, 128]\n'
    "report_seconds = 5.0\nmin_accuracy = 0.3\npeak_seconds = 0.2\n"
)


def _workers_with_epochs(run_dir: Path) -> set[str]:
    import sqlite3

    try:
        with sqlite3.connect(f"file:{run_dir / 'aihpc.sqlite'}?mode=ro", uri=True) as con:
            return {r[0] for r in con.execute("SELECT DISTINCT worker FROM epochs")}
    except sqlite3.Error:
        return set()


def _jobs_named(name: str) -> list[str]:
    out = _sh("squeue", "-h", "-n", name, "-o", "%i").stdout
    return [line.strip() for line in out.splitlines() if line.strip()]


@pytest.mark.slow
def test_aihpc_run_slurm_survives_scancel(slurm_up, tmp_path):
    """Workers are SLURM jobs (squeue shows them, over TLS); scancel one and the run finishes with
    the other."""
    import json

    cfg = tmp_path / "run.toml"
    cfg.write_text(QUICK_TOML)
    run_dir = tmp_path / "run"
    before = set(_jobs_named("aihpc-worker"))  # of an earlier test, ending on its own

    def jobs() -> list[str]:
        return [job for job in _jobs_named("aihpc-worker") if job not in before]

    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "aihpc",
            "run",
            "--slurm",
            "--workers",
            "2",
            "--threads-per-worker",
            "1",
            "--worker-memory",
            "1GiB",
            "--minutes",
            "0.5",
            "--config",
            str(cfg),
            "--out",
            str(run_dir),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    _wait(lambda: len(jobs()) == 2 or proc.poll() is not None, 60, "2 worker jobs in squeue")
    ours = jobs()
    assert len(ours) == 2, (proc.communicate(), slurm_cluster.state())
    _wait(lambda: len(_workers_with_epochs(run_dir)) == 2, 90, "both workers finishing epochs")
    assert _sh("scancel", ours[1]).returncode == 0
    out, err = proc.communicate(timeout=180)
    assert proc.returncode == 0, err
    results = json.loads((run_dir / "results.json").read_text())
    # the master's log in each message: a run that ended early says why only there
    assert results["score"]["ops"] > 0 and results["score"]["valid"], err[-3000:]
    workers = {w["name"] for w in results["workers"]}
    assert workers == {"slurm-0", "slurm-1"}, err[-3000:]
    last = sorted(
        max(e["t_end"] for t in results["trials"] for e in t["epochs"] if e["worker"] == w)
        for w in workers
    )
    wall = results["score"]["wall_seconds"]
    assert last[0] < wall - 5, (
        f"both workers went on to the end: the cancelled one kept working\n{err[-3000:]}"
    )
    assert last[1] > wall - 5, err[-3000:]  # the other went on to the end
    assert "tls://" in " ".join(p.read_text() for p in (run_dir / "batch-logs").glob("*.err"))
    assert not (run_dir / "tls").exists()  # the run's certificate and key are removed at the end
    _wait(lambda: not jobs(), 30, "worker jobs gone after the run")


@pytest.mark.slow
def test_aihpc_run_inside_an_allocation(slurm_up, tmp_path):
    """The command of examples/slurm/aihpc-run.sbatch (CPU: no GPU lines): sbatch + srun -n 2 aihpc
    run --slurm; task 0 is the scheduler, the master and a worker, task 1 a worker that joins it.

    Across both namespace nodes where the cluster has them (task 1 on aihpc-n2 joins at aihpc-n1's
    bridge address, so each worker must be named by its own node), else on this host.
    """
    import json

    cfg = tmp_path / "run.toml"
    cfg.write_text(QUICK_TOML)
    run_dir = tmp_path / "run"
    nodes = slurm_up.nodes
    interface = f"--interface {slurm_cluster.INTERFACE} " if nodes else ""
    where = ["-p", slurm_cluster.PARTITION, "-N", "2"] if nodes else []
    command = (
        f"cd {tmp_path} && srun --kill-on-bad-exit=1 "
        f"{sys.executable} -m aihpc run --slurm --no-live "
        f"{interface}--minutes 0.3 --config {cfg} --out {run_dir}"
    )
    out = tmp_path / "job.out"
    sub = _sh(
        "sbatch", "--parsable", *where, "-n", "2", "-c", "1", "-o", str(out), "--wrap", command
    )
    assert sub.returncode == 0, sub.stderr
    job_id = sub.stdout.strip().split(";")[0]
    _wait(lambda: not _queued([job_id]), 240, f"job {job_id} finished")
    log = out.read_text()
    assert (run_dir / "results.json").exists(), log[-3000:]
    results = json.loads((run_dir / "results.json").read_text())
    assert results["score"]["valid"] and results["score"]["ops"] > 0, log[-3000:]
    assert {w["name"] for w in results["workers"]} == {"slurm-0", "slurm-1"}
    assert results["layout"]["workers"] == 2
    hosts = {w["worker"]: w["host"].split(".")[0] for w in results["devices"]["workers"]}
    assert hosts == (
        {"slurm-0": nodes[0], "slurm-1": nodes[1]}
        if nodes
        else {"slurm-0": slurm_up.host, "slurm-1": slurm_up.host}
    )
    assert {e["worker"] for t in results["trials"] for e in t["epochs"]} == set(hosts)
