"""A worker that stops heartbeating is dropped within seconds, and a busy one is not
(:mod:`aihpc.launch.heartbeats`), on a real Dask cluster of this machine.

A process stopped with SIGSTOP keeps its connections open, as a hung node does: only its silence
says it is gone.  (A node cut from the network, its processes killed: tests/runner/
test_multinode.py::test_a_node_lost_mid_run.)
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from distributed import KilledWorker

from aihpc.launch.executor import local_executor, local_layout, remote_executor
from aihpc.launch.heartbeats import CHECK_SECONDS, PLUGIN_NAME, SILENT_TOPIC, silence_limit


def test_the_silence_limit_is_six_seconds_or_four_heartbeats() -> None:
    # Dask's heartbeats: 0.5 s apart up to 10 workers, 1 s up to 49, 2 s up to 199, then n/200 + 1
    assert silence_limit(1) == silence_limit(10) == silence_limit(49) == 6.0
    assert silence_limit(50) == silence_limit(199) == 8.0
    assert silence_limit(1000) == 4 * (1000 / 200 + 1)


def test_a_scheduler_started_elsewhere_is_watched_while_aihpc_uses_it() -> None:
    """``--scheduler``: the watch is installed once, however many executors connect, and taken
    off the scheduler when the executor that owns its client closes."""
    from distributed import LocalCluster

    with LocalCluster(n_workers=0, processes=False, dashboard_address=None) as cluster:
        scheduler = cluster.scheduler
        first = remote_executor(cluster.scheduler_address)
        plugin = scheduler.plugins[PLUGIN_NAME]
        second = remote_executor(cluster.scheduler_address)
        assert scheduler.plugins[PLUGIN_NAME] is plugin
        assert PLUGIN_NAME in scheduler.periodic_callbacks
        second.close()
        assert PLUGIN_NAME not in scheduler.plugins
        _wait(lambda: PLUGIN_NAME not in scheduler.periodic_callbacks, 10, "the watch stopped")
        first.close()


def busy_training(seconds: float) -> int:
    """Runs on a worker: ``seconds`` of what a busy trainer does to the GIL: torch operations
    (which release it), Python between them (which takes it back every 5 ms), and calls that hold
    it throughout, a quarter of a second each.  Returns the steps done."""
    import torch

    model = torch.nn.Sequential(
        torch.nn.Linear(256, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10)
    )
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(512, 256), torch.randint(0, 10, (512,))
    held = 1_000_000
    began, steps = time.monotonic(), 0
    while time.monotonic() - began < seconds:
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()
        sum(i * i for i in range(20_000))  # Python bytecode
        t = time.monotonic()
        sum(range(held))  # one C call that holds the GIL
        if time.monotonic() - t < 0.25:
            held *= 2
        steps += 1
    return steps


@pytest.mark.slow
def test_a_stopped_worker_is_dropped_within_seconds_and_a_busy_one_under_load_is_not() -> None:
    """Two workers, the machine loaded with a busy process per core: one worker trains for
    longer than the limit, the other is stopped (SIGSTOP) in the middle of a task.  The stopped
    one is dropped within the limit (its task fails as KilledWorker, which the master requeues,
    and nothing waits for a memory event), its nanny starts it afresh; the busy one is never
    dropped, its task ends, and its heartbeats never went silent for half the limit."""
    environ = dict(os.environ)  # Dask's nanny sets OMP_NUM_THREADS=1 & co. in this very process
    executor = local_executor(local_layout(2, 1, "cpu"))
    load = [
        subprocess.Popen([sys.executable, "-c", "while True: pass"])
        for _ in range(os.cpu_count() or 1)
    ]
    stopped_pid = None
    try:
        executor.wait_for_workers(2, timeout=120)
        client = executor.client
        pids = client.run(os.getpid)
        busy, stopped = sorted(pids)
        limit = silence_limit(2)
        training = client.submit(busy_training, limit + 2, workers=[busy], pure=False)
        stuck = client.submit(time.sleep, 120, workers=[stopped], pure=False)
        _wait(lambda: _running(client) == {busy, stopped}, 60, "both tasks running")
        stopped_pid, names = pids[stopped], client.run(lambda dask_worker: str(dask_worker.name))
        os.kill(stopped_pid, signal.SIGSTOP)
        t_stop, gaps = time.monotonic(), []
        asked = ThreadPoolExecutor(1).submit(executor.ask_each, os.getpid)  # out of band
        while not stuck.done() and time.monotonic() - t_stop < limit + 15:
            gaps.append(client.run_on_scheduler(_silence, busy))
            time.sleep(0.2)
        detected = time.monotonic() - t_stop
        with pytest.raises(KilledWorker) as lost:
            stuck.result(timeout=1)
        assert limit - 1 <= detected <= limit + CHECK_SECONDS + 2, detected
        t = time.monotonic()
        assert executor.memory_kill(lost.value) is None and time.monotonic() - t < 0.5
        # a question to every worker, asked while one was silent, is answered once it is dropped
        assert asked.result(timeout=10) == {names[busy]: pids[busy]}
        assert training.result(timeout=60) > 0  # the busy worker was never dropped
        events = [msg for _, msg in client.get_events(SILENT_TOPIC)]
        assert [e["worker"] for e in events] == [stopped], events
        assert busy in executor.alive()
        assert max(gaps) < limit / 2, max(gaps)
        executor.wait_for_workers(2, timeout=60)  # the stopped one's nanny started it afresh
        now = client.run(lambda dask_worker: str(dask_worker.name))
        assert stopped not in now and sorted(now.values()) == sorted(names.values())
        print(  # for the record (pytest -s)
            f"stopped worker dropped {detected:.1f} s after SIGSTOP (limit {limit:.0f} s); the "
            f"busy worker's longest silence under load {max(gaps):.2f} s"
        )
    finally:
        for p in load:
            p.kill()
            p.wait()
        if stopped_pid is not None:  # its nanny killed it; if not, it goes now
            try:
                os.kill(stopped_pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        executor.close()
        os.environ.clear()
        os.environ.update(environ)


def _running(client) -> set[str]:
    """The workers running a task now, by address."""
    return {w for w, keys in client.processing().items() if keys}


def _silence(address: str, dask_scheduler) -> float:
    """Runs on the scheduler: seconds since the worker at ``address`` last heartbeat."""
    from distributed.metrics import time as now

    return now() - dask_scheduler.workers[address].last_seen


def _wait(condition, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"{what} not within {timeout:.0f} s")
        time.sleep(0.1)
