"""aihpc across two nodes: the namespace nodes of the session's SLURM cluster
(tests/slurm_cluster.py).

Each node (``aihpc-n1``, ``aihpc-n2``) is a ``slurmd`` in its own network and
UTS namespace, with its own host name and address, reachable from this host
(the login side: slurmctld, the master, the Dask scheduler) only over the
bridge ``aihpc0``.  A scheduler on loopback or on the host's own address, a
certificate for the wrong host or a port the nodes cannot reach fails here as
it would on a real cluster.  The run directory is the machine's file system,
as an NFS or Lustre mount would be.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from runner_helpers import query_store

import slurm_cluster
from slurm_cluster import INTERFACE, LOGIN_ADDRESS, NODE_ADDRESSES, NODES, PARTITION, sh, wait

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("slurm")]


@pytest.fixture
def two_nodes(slurm_up):
    """The session's cluster, with its namespace nodes (skips with setup-cluster.sh's reason)."""
    if not slurm_up.nodes:
        pytest.skip(f"no namespace nodes: {slurm_up.nodes_missing}")
    return slurm_up


QUICK_TOML = (
    'dataset = "digits"\nepochs_min = 1\nepochs_max = 2\nbatch_sizes = [64, 128]\n'
    "report_seconds = 5.0\nmin_accuracy = 0.3\npeak_seconds = 0.2\n"
)


def _batch(tmp_path: Path, script: str, *options: str, timeout: float = 120) -> str:
    """Run ``script`` as a batch job on the namespace nodes; its output once it has ended."""
    out = tmp_path / "job.out"
    job = sh("sbatch", "--parsable", "-p", PARTITION, "-o", str(out), *options, "--wrap", script)
    assert job.returncode == 0, job.stderr
    job_id = job.stdout.strip().split(";")[0]
    wait(lambda: not slurm_cluster.queued([job_id]), timeout, f"job {job_id} finished")
    return out.read_text()


def _host_address() -> str:
    """This host's own address on its outward interface (not the bridge's)."""
    route = sh("ip", "-4", "-o", "route", "get", "1.1.1.1").stdout.split()
    return route[route.index("src") + 1]


def test_each_node_has_its_own_name_and_address_and_only_the_bridge(two_nodes, tmp_path):
    assert two_nodes.nodes == NODES
    rows = sh("sinfo", "-h", "-N", "-p", PARTITION, "-o", "%N %T").stdout.split("\n")
    assert sorted(r.split()[0] for r in rows if r.strip()) == list(NODES)
    probe = (
        "import socket, sys\n"
        "def reach(addr):\n"
        "    try:\n"
        "        socket.create_connection((addr, 6817), timeout=3).close(); return 'yes'\n"
        "    except OSError as exc:\n"
        "        return type(exc).__name__\n"
        f"print('NODE', socket.gethostname(), reach({LOGIN_ADDRESS!r}), reach(sys.argv[1]))\n"
    )
    (tmp_path / "probe.py").write_text(probe)
    script = (
        f'srun sh -c \'ip -4 -o addr show {INTERFACE} | tr -s " " | cut -d" " -f4; '
        f"{sys.executable} {tmp_path / 'probe.py'} {_host_address()}'"
    )
    text = _batch(tmp_path, script, "-N", "2", "-n", "2")
    lines = sorted(line.split() for line in text.splitlines() if line.startswith("NODE"))
    # each node reaches slurmctld over the bridge, and not at the host's own address
    assert [line[1:3] for line in lines] == [[n, "yes"] for n in NODES], text
    assert all(line[3] != "yes" for line in lines), text
    addresses = sorted(line for line in text.splitlines() if line.startswith("10.217."))
    assert addresses == sorted(f"{a}/24" for a in NODE_ADDRESSES.values()), text


def test_aihpc_scaling_one_node_against_two(two_nodes, tmp_path):
    """Weak scaling across nodes: 1 worker job, then 2 (one per node), each a full run; the
    efficiency is in scaling.json.  Both nodes share this machine's cores, so it is well
    below 1 here: the point is that the path works end to end.  The run of 2 is the run from the
    login side across both nodes: a worker job on each, TLS to the scheduler at the bridge's
    address, VALID, results.json naming each worker's node, and epochs trained on both."""
    cfg = tmp_path / "run.toml"
    cfg.write_text(QUICK_TOML)
    out = tmp_path / "scaling"
    command = [
        sys.executable,
        "-m",
        "aihpc",
        "scaling",
        "--workers",
        "1,2",
        "--minutes",
        "0.2",
        "--out",
        str(out),
        "--",
        "--slurm",
        "--partition",
        PARTITION,
        "--interface",
        INTERFACE,
        "--worker-memory",
        "1GiB",
        "--config",
        str(cfg),
    ]
    proc = subprocess.run(command, capture_output=True, text=True, timeout=400)
    assert proc.returncode == 0, proc.stderr[-3000:]
    sizes = json.loads((out / "scaling.json").read_text())["sizes"]
    assert [s["workers"] for s in sizes] == [1, 2] and all(s["valid"] for s in sizes)
    assert sizes[0]["efficiency"] == 1.0 and 0 < sizes[1]["efficiency"]
    assert sizes[1]["efficiency"] == pytest.approx(sizes[1]["score"] / (2 * sizes[0]["score"]))
    hosts = {
        n: sorted(
            w["host"]
            for w in json.loads((out / f"workers-{n}" / "results.json").read_text())["devices"][
                "workers"
            ]
        )
        for n in (1, 2)
    }
    assert len(hosts[1]) == 1 and hosts[1][0] in NODES and hosts[2] == list(NODES)
    two = out / "workers-2"
    results = json.loads((two / "results.json").read_text())
    assert results["score"]["valid"] and results["score"]["ops"] > 0
    workers = {w["worker"] for w in results["devices"]["workers"]}
    trained = {e["worker"] for t in results["trials"] for e in t["epochs"]}
    assert trained == workers, f"epochs on {trained}, workers {workers}"
    logs = " ".join(p.read_text() for p in (two / "batch-logs").glob("*.err"))
    assert f"tls://{LOGIN_ADDRESS}:" in logs, logs[-2000:]


def test_a_wrong_interface_is_one_line_naming_those_that_exist(two_nodes, tmp_path):
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "aihpc",
            "run",
            "--slurm",
            "--nodes",
            "2",
            "--partition",
            PARTITION,
            "--interface",
            "nope0",
            "--minutes",
            "0.2",
            "--out",
            str(tmp_path / "run"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert "network interface must exist on this host, got 'nope0'" in proc.stderr
    assert f"{INTERFACE}, " in proc.stderr and "lo" in proc.stderr
    assert not (tmp_path / "run").exists()  # refused before anything was made


def _on_node(node: int, code: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """Python ``code`` run in node ``node``'s network namespace (as a job's process would be)."""
    return sh("ip", "netns", "exec", f"aihpc-n{node}", sys.executable, "-c", code, timeout=timeout)


def test_tls_a_process_on_a_node_without_the_runs_key_cannot_connect(two_nodes, tmp_path):
    """The scheduler of a batch run, as `aihpc run --slurm` makes it (a certificate and key for the
    run, mutual TLS), on the bridge: from a node, the run's key connects; no key, plain TCP or
    another run's key do not."""
    from distributed import LocalCluster
    from distributed.security import Security

    from aihpc.launch.jobqueue import run_security

    security, other = run_security(True, None), Security.temporary()
    files = {}
    for name, sec in (("run", security), ("other", other)):
        for part in ("tls_ca_file", "tls_client_cert", "tls_client_key"):
            path = tmp_path / f"{name}-{part}.pem"
            path.write_text(getattr(sec, part))
            path.chmod(0o600)
            files[name, part] = path
    with LocalCluster(
        n_workers=0, protocol="tls", host=LOGIN_ADDRESS, security=security, dashboard_address=None
    ) as cluster:
        address = cluster.scheduler_address
        assert address.startswith(f"tls://{LOGIN_ADDRESS}:")

        def attempt(security_code: str, scheme_address: str = address) -> str:
            code = (
                "from distributed import Client\nfrom distributed.security import Security\n"
                "try:\n"
                f"    Client({scheme_address!r}, timeout=5, security={security_code}).close()\n"
                "    print('CONNECTED')\n"
                "except Exception as exc:\n    print('REFUSED', type(exc).__name__)\n"
            )
            proc = _on_node(1, code)
            return (proc.stdout.strip().splitlines() or [proc.stderr.strip()[-300:]])[-1]

        def keys(name: str) -> str:
            return (
                f"Security(tls_ca_file={str(files[name, 'tls_ca_file'])!r}, "
                f"tls_client_cert={str(files[name, 'tls_client_cert'])!r}, "
                f"tls_client_key={str(files[name, 'tls_client_key'])!r}, require_encryption=True)"
            )

        assert attempt(keys("run")) == "CONNECTED"
        assert attempt("None").startswith("REFUSED")
        assert attempt("None", address.replace("tls://", "tcp://")).startswith("REFUSED")
        assert attempt(keys("other")).startswith("REFUSED")


def test_bench_distributed_with_a_rank_on_each_node(two_nodes, tmp_path):
    """Level 3 across the nodes: srun starts rank 0 on aihpc-n1 and rank 1 on aihpc-n2, gloo talks
    over the bridge, and the ring volume matches what each rank's sockets sent (and the bridge
    counted: each rank reads its own node's aihpc0)."""
    out = tmp_path / "distributed.json"
    command = [
        sys.executable,
        "-m",
        "aihpc",
        "bench",
        "distributed",
        "--procs",
        "2",
        "--slurm",
        "--nodes",
        "2",
        "--partition",
        PARTITION,
        "--interface",
        INTERFACE,
        "--model",
        "digits_cnn",
        "--batch",
        "16",
        "--steps",
        "8",
        "--warmup",
        "2",
        "--device",
        "cpu",
        "--out",
        str(out),
    ]
    proc = subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    data = json.loads(out.read_text())["data"]
    assert (data["launcher"], data["nodes"], data["backend"], data["threads_per_rank"]) == (
        "srun",
        2,
        "gloo",
        1,
    )
    assert data["hosts"] == list(NODES)  # rank 0 on the first node, rank 1 on the second
    parallel = data["parallel"]
    assert parallel["allreduce_s"] > 0 and parallel["compute_s"] > 0
    volume = data["volume"]
    assert volume["measured_by"].startswith("tcp_info") and volume["interface"] == INTERFACE
    assert 1.0 <= volume["ratio"] <= 1.02  # as on one node (tests/bench/test_distributed.py)
    assert volume["interface_bytes_per_rank"] >= volume["bytes_per_rank_measured"]
    assert f"ranks on 2 node(s): {', '.join(NODES)} (srun)" in proc.stdout
    assert not list(tmp_path.glob("aihpc-bench-ddp-*"))  # the ranks' folder is gone


def test_a_rank_that_fails_on_a_node_is_one_line_naming_it(two_nodes, tmp_path):
    """An interface the nodes lack: every rank fails at the rendezvous; one line, exit 3."""
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "aihpc",
            "bench",
            "distributed",
            "--procs",
            "2",
            "--slurm",
            "--nodes",
            "2",
            "--partition",
            PARTITION,
            "--interface",
            "nope0",
            "--model",
            "digits_cnn",
            "--steps",
            "1",
            "--out",
            str(tmp_path / "d.json"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert proc.returncode == 3, proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("aihpc bench: error: rank 0 of 1 failed") and "nope0" in last, last
    assert not (tmp_path / "d.json").exists()


#: Epochs of each tiny CosmoFlow instance: about 20 ms each here, so that an instance's run
#: lasts several times the spread of the two runs' starts after their barrier (0.12 s seen under
#: CI's load, when 6 epochs lasted 0.12 s and the runs did not overlap)
TTT_EPOCHS = 40


def test_train_to_target_two_instances_one_on_each_node(two_nodes, tmp_path):
    """--slurm --instances 2: two worker jobs of one CPU, one on each node, train at once.  A target
    no model meets (as in tests/workloads/test_ttt.py): each trains its whole budget, exit 4."""
    out = tmp_path / "ttt"
    command = [
        sys.executable,
        "-m",
        "aihpc",
        "train-to-target",
        "--workload",
        "cosmoflow",
        "--size",
        "tiny",
        "--target",
        "0.0001",
        "--max-epochs",
        str(TTT_EPOCHS),
        "--runs",
        "1",
        "--instances",
        "2",
        "--threads-per-worker",
        "1",
        "--slurm",
        "--partition",
        PARTITION,
        "--interface",
        INTERFACE,
        "--worker-memory",
        "1GiB",
        "--out",
        str(out),
    ]
    proc = subprocess.run(command, capture_output=True, text=True, timeout=400, cwd=tmp_path)
    assert proc.returncode == 4 and "not reached by 2 of 2 instance(s)" in proc.stderr, proc.stderr[
        -3000:
    ]
    data = json.loads((out / "ttt.json").read_text())["data"]
    (run,) = data["runs"]
    assert sorted(i["host"] for i in run["instances"]) == list(NODES)
    a, b = run["instances"]
    assert a["epochs"] == b["epochs"] == TTT_EPOCHS
    assert max(a["run_start_ms"], b["run_start_ms"]) < min(
        a["run_stop_ms"], b["run_stop_ms"]
    )  # at once
    assert data["models_per_minute"] > 0
    logs = " ".join(p.read_text() for p in (out / "batch-logs").glob("*.err"))
    assert f"tls://{LOGIN_ADDRESS}:" in logs, logs[-2000:]
    assert all(node in proc.stdout for node in NODES)  # the table's host column


def _bridge_address() -> str:
    """The hardware address of the bridge the nodes reach the login side by."""
    return Path(f"/sys/class/net/{INTERFACE}/address").read_text().strip()


def _node_down(node: int) -> None:
    """Node ``node`` goes as a crashed node does: first its link (nothing it sends arrives any
    more), then every process in its namespace (its slurmd, the job's step, the worker)."""
    assert sh("ip", "link", "del", f"aihpc-v{node}").returncode == 0
    pids = [int(p) for p in sh("ip", "netns", "pids", f"aihpc-n{node}").stdout.split()]
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


#: The node-loss run's clock: the node goes down once its worker has committed an epoch (a few
#: seconds in), and the lost epoch is sent again within seconds of that.
LOST_RUN_MINUTES = 0.5


def test_a_node_lost_mid_run(two_nodes, tmp_path):
    """aihpc-n2 goes down while its worker trains: the run finishes on aihpc-n1, the lost epoch is
    sent again, every committed epoch stays, verify passes, and the summary names the lost node and
    the epoch.  The node is brought back for the tests after this one.

    Its connections do not close (the node is gone, not its processes alone): the loss is noticed
    from the worker's heartbeats stopping (aihpc.launch.heartbeats), within 10 s, with Dask's
    timeouts as they are (its connection would time out after 30 s).  The run ends on time: the
    peak after it is measured on aihpc-n1's worker alone, without waiting for the lost one, and
    its drift compares that worker with its own peak before."""
    cfg = tmp_path / "run.toml"
    cfg.write_text(QUICK_TOML)
    run_dir, db = tmp_path / "run", tmp_path / "run" / "aihpc.sqlite"
    command = [
        sys.executable,
        "-m",
        "aihpc",
        "run",
        "--slurm",
        "--nodes",
        "2",
        "--partition",
        PARTITION,
        "--interface",
        INTERFACE,
        "--threads-per-worker",
        "1",
        "--worker-memory",
        "1GiB",
        "--minutes",
        str(LOST_RUN_MINUTES),
        "--no-live",
        "--config",
        str(cfg),
        "--out",
        str(run_dir),
    ]
    run = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        lost_worker = _wait_until_training_on(db, NODES[1], run)
        committed = set(query_store(db, "SELECT trial_id, epoch FROM epochs WHERE status = 'ok'"))
        t0 = query_store(db, "SELECT MIN(start) FROM segments")[0][0]
        t_down = time.time() - t0
        bridge = _bridge_address()
        _node_down(2)
        # as a switch's: the other node's ARP entry for the scheduler's address stays right
        assert _bridge_address() == bridge
        stdout, stderr = run.communicate(timeout=400)
        t_exit = time.time() - t0
    finally:
        if run.poll() is None:
            run.kill()
        seconds, why = slurm_cluster.start()  # the node back, for the tests after this one
        assert why is None, why

        def node_idle() -> bool:
            return sh("sinfo", "-h", "-n", NODES[1], "-o", "%T").stdout.strip() == "idle"

        wait(node_idle, 120, f"{NODES[1]} idle again")
    assert run.returncode == 0, stderr[-3000:]
    results = json.loads((run_dir / "results.json").read_text())
    assert results["score"]["valid"]
    losses = [loss for loss in results["losses"] if loss["worker"] == lost_worker]
    assert losses and all(
        loss["requeued"] and loss["address"] == NODE_ADDRESSES[NODES[1]] for loss in losses
    )
    epochs = {(t["id"], e["epoch"]): e for t in results["trials"] for e in t["epochs"]}
    assert committed <= {
        k for k, e in epochs.items() if e["status"] == "ok"
    }  # no committed epoch lost
    resent = [epochs.get((loss["trial_id"], loss["epoch"])) for loss in losses]
    timeline = (
        f"node down at {t_down:.1f} s, losses seen at {[round(x['t'], 1) for x in losses]} s, "
        f"the epochs after: {resent}"
    )
    assert all(
        e is not None and e["attempt"] > loss["attempt"]
        for e, loss in zip(resent, losses, strict=True)
    ), timeline
    assert all(e["worker"] != lost_worker for e in resent)
    verify = subprocess.run(
        [sys.executable, "-m", "aihpc", "verify", str(run_dir)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert verify.returncode == 0, verify.stdout[-2000:] + verify.stderr[-2000:]
    assert f"worker lost      {lost_worker} on {NODES[1]} at" in stdout, stdout
    detection, end_delay = losses[0]["t"] - t_down, t_exit - LOST_RUN_MINUTES * 60
    assert detection <= 10.0, detection
    peak = results["peak"]
    (kept,) = [w["worker"] for w in peak["per_worker"] if w["worker"] != lost_worker]
    assert [w["worker"] for w in peak["after"]["per_worker"]] == peak["drift_workers"] == [kept]
    # what a run does after its clock (the peak after, the results, its jobs cancelled), not the
    # 30 s it waited for the lost worker
    assert end_delay < 15.0, end_delay
    print(  # the timeline, for the record (pytest -s shows it)
        f"node-loss timeline: node down at {t_down:.1f} s, loss seen at {losses[0]['t']:.1f} s "
        f"({detection:.1f} s later), epoch sent again and started at "
        f"{resent[0]['t_start']:.1f} s, run clock out at {LOST_RUN_MINUTES * 60:.1f} s, "
        f"command ended {end_delay:.1f} s after it; the cluster back in {seconds:.1f} s"
    )


def _wait_until_training_on(db: Path, host: str, run: subprocess.Popen) -> str:
    """The name of the run's worker on ``host``, once it has committed an epoch (so it is training
    its next one: the master keeps every worker busy)."""
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and run.poll() is None:
        rows = query_store(db, "SELECT value FROM meta WHERE key = 'devices'")
        workers = json.loads(rows[0][0])["workers"] if rows else []
        names = [w["worker"] for w in workers if w["host"] == host]
        if names and query_store(
            db, "SELECT 1 FROM epochs WHERE worker = ? AND status = 'ok'", names[0]
        ):
            return names[0]
        time.sleep(0.3)
    pytest.fail(f"no epoch committed by the worker on {host} (run exit status {run.poll()})")


def _left_behind() -> list[str]:
    """What of the namespace nodes is still there: namespaces, links, slurmd processes."""
    namespaces = [
        n.split()[0]
        for n in sh("ip", "netns", "list").stdout.splitlines()
        if n.startswith("aihpc-n")
    ]
    links = [
        line.split(": ")[1].split("@")[0]
        for line in sh("ip", "-o", "link", "show").stdout.splitlines()
    ]
    daemons = sh("pgrep", "-a", "-x", "slurmd|slurmctld|slurmstepd").stdout.splitlines()
    return namespaces + [link for link in links if link.startswith("aihpc")] + daemons


def test_stop_leaves_nothing_and_start_brings_every_node_back(two_nodes):
    stopped = slurm_cluster.stop()
    assert stopped.returncode == 0, stopped.stderr
    assert _left_behind() == []
    seconds, why = slurm_cluster.start()
    assert why is None, why
    rows = sh("sinfo", "-h", "-N", "-o", "%N %T").stdout.split("\n")
    states = dict(r.split() for r in rows if r.strip())
    assert {n: states.get(n) for n in (two_nodes.host, *NODES)} == dict.fromkeys(
        (two_nodes.host, *NODES), "idle"
    )
