"""The local cluster's worker processes: their log on the run's stderr, how the master sees them."""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from aihpc.base.errors import ConfigError, WorkersLost
from aihpc.launch.executor import DaskExecutor, local_executor, local_layout
from aihpc.launch.placement import DeviceSlots, Placement
from aihpc.machine import devices


@contextmanager
def _local(workers: int) -> Iterator[DaskExecutor]:
    """A local cluster of ``workers`` one-thread CPU workers, closed after; this process's
    environment as it was (Dask's nanny sets OMP_NUM_THREADS=1 & co. in this very process)."""
    environ = dict(os.environ)
    executor = local_executor(local_layout(workers, 1, "cpu"))
    try:
        yield executor
    finally:
        executor.close()
        os.environ.clear()
        os.environ.update(environ)


def _worker_log_level() -> int:
    return logging.getLogger("distributed.worker").getEffectiveLevel()


def _parent() -> tuple[int, int, str, bool]:
    """This worker's process id, its parent's, its parent's command line and whether its parent
    has torch's library loaded."""
    import psutil

    parent = psutil.Process(os.getppid())
    torch_loaded = any("libtorch" in m.path for m in parent.memory_maps())
    return os.getpid(), parent.pid, " ".join(parent.cmdline()), torch_loaded


def test_workers_are_forked_from_a_server_that_has_imported_torch_and_restart_from_it() -> None:
    """The nannies fork their workers from multiprocessing's fork server, which has imported
    torch, not from this process and not as fresh interpreters; workers started again (as after a
    kill) come from the same server."""
    with _local(2) as executor:
        first = executor.run_on_each(_parent)
        executor.client.restart()
        again = executor.run_on_each(_parent)
    assert len(first) == len(again) == 2
    assert {pid for pid, *_ in first}.isdisjoint(pid for pid, *_ in again)
    ((server, command, torch_loaded),) = {tuple(r[1:]) for r in first + again}
    assert server != os.getpid() and "multiprocessing.forkserver" in command and torch_loaded
    assert "'torch._dynamo'" in command  # imported once for every worker, not in each on its clock


def test_a_worker_logs_only_what_is_critical_on_the_run_s_stderr() -> None:
    """A worker's ERROR log (a heartbeat to a scheduler that closed first: a traceback) would break
    the run's one-line errors; the nanny's silence_logs does not reach the worker's logger."""
    with _local(1) as executor:
        levels = executor.client.run(_worker_log_level)
    assert list(levels.values()) == [logging.CRITICAL]


def test_the_workers_alive_are_asked_of_the_scheduler_not_read_from_the_client_s_cache(
    monkeypatch,
) -> None:
    """``Client.scheduler_info`` answers from a cache that the client's periodic refresh, which asks
    for no workers, can overwrite just before it returns: a loaded machine then saw none (a run
    failed placing its one worker).  Here every refresh is that periodic one."""
    from distributed.client import SchedulerInfo

    with _local(2) as executor:
        client = executor.client

        async def periodic_refresh(n_workers: int = 0) -> None:
            client._scheduler_identity = SchedulerInfo(await client.scheduler.identity(n_workers=0))

        executor.wait_for_workers(2, timeout=60)
        monkeypatch.setattr(client, "_update_scheduler_info", periodic_refresh)
        assert client.scheduler_info(n_workers=-1)["workers"] == {}  # what misled the run
        alive = executor.alive()
        assert sorted(alive.values()) == [1, 1] and executor.slots() == 2
        assert sorted(executor.run_on_each(os.getpid)) == sorted(client.run(os.getpid).values())
        assert executor.workers_per_host() == {address: 2 for address in alive}


def test_placing_the_workers_when_none_is_alive_is_a_lost_worker_error() -> None:
    with _local(0) as executor:
        t0 = time.monotonic()
        with pytest.raises(WorkersLost, match="no worker was alive to place .* within 1 s"):
            Placement(executor, "cpu", 1).place(wait=1.0)
        assert time.monotonic() - t0 >= 1.0  # it waited for one to join


def test_a_worker_that_leaves_while_it_is_placed_is_placed_once_its_nanny_starts_it_again() -> None:
    """As on a loaded SLURM node: the scheduler dropped the only worker while the run asked it
    where it was (CI: "no worker was alive to place on a device").  The worker its nanny starts
    again joins under a new address, and is placed."""
    with _local(1) as executor:
        (first,) = executor.alive()
        asked = executor.ask_each

        def ask_as_it_leaves(fn, *args, workers=None):  # its process ends as it is first asked
            if workers == [first]:
                return asked(os._exit, 1, workers=workers)
            return asked(fn, *args, workers=workers)

        executor.ask_each = ask_as_it_leaves  # type: ignore[method-assign]
        placement = Placement(executor, "cpu", 1)
        (placed,) = placement.place(wait=60.0)["workers"]
        (now,) = executor.alive()
    assert now != first and placement.asked == {first, now}
    assert placed["slot"] == 0 and placed["devices"] == [{"device": "cpu"}]


def _preloaded() -> list[str]:
    """The aihpc modules this worker has imported (this test module imports none of them)."""
    import sys

    return sorted(m for m in ("torch", "aihpc.train.worker") if m in sys.modules)


def test_a_worker_started_afresh_has_imported_torch_and_aihpc_before_it_joins() -> None:
    """A SLURM step's or a batch job's worker is a fresh interpreter (no fork server): it imports
    torch and aihpc's worker code before it joins (Dask's preload), not on its event loop when
    the master first asks it something, which could silence its heartbeats past the limit."""
    import dask
    from distributed import Client, LocalCluster

    from aihpc.launch.dask_settings import JOB_PROLOGUE, WORKER_CONFIG, WORKER_PRELOAD

    with (
        dask.config.set(WORKER_CONFIG),
        dask.config.set({"distributed.worker.multiprocessing-method": "spawn"}),
        LocalCluster(
            n_workers=1, threads_per_worker=1, processes=True, dashboard_address=None
        ) as cluster,
        Client(cluster) as client,
    ):
        (modules,) = client.run(_preloaded).values()
        (preloads,) = client.run(lambda dask_worker: len(dask_worker.preloads)).values()
    assert modules == ["aihpc.train.worker", "torch"] and preloads == len(WORKER_PRELOAD)
    # a batch job's worker gets the same list from its environment
    (line,) = [x for x in JOB_PROLOGUE if "PRELOAD" in x]
    name, value = line.removeprefix("export ").split("=", 1)
    assert dask.config.collect_env({name: value.strip('"')}) == {
        "distributed": {"worker": {"preload": list(WORKER_PRELOAD)}}
    }


def _busy(seconds: float) -> float:
    time.sleep(seconds)
    return seconds


def test_a_worker_that_joins_while_the_others_train_is_placed_at_once_with_a_slot_of_its_own() -> (
    None
):
    """The run starts with the first worker; a later one is asked out of band (not after the
    others' epochs), gets the lowest slot no placed worker of its host has, and is described."""
    with _local(1) as executor:
        placement = Placement(executor, "cpu", 2)
        (first,) = placement.place()["workers"]
        assert first["slot"] == 0 and first["devices"] == [{"device": "cpu"}, {"device": "cpu"}]
        epoch = executor.submit(_busy, 30.0, "epoch")  # the first worker trains
        assert executor.cluster is not None
        executor.cluster.scale(2)
        executor.wait_for_workers(2, timeout=60)
        t0 = time.monotonic()
        mapping = placement.joined()
        seconds = time.monotonic() - t0
        assert not epoch.done() and seconds < 10, seconds  # not queued behind the epoch
        assert mapping is not None and placement.joined() is None  # nobody new the second time
        workers = mapping["workers"]
        assert [w["worker"] for w in workers] == sorted(w["worker"] for w in workers)
        assert sorted(w["slot"] for w in workers) == [0, 1]
        assert {w["worker"]: w["slot"] for w in workers}[first["worker"]] == 0
        assigned = executor.ask_each(devices.assigned_slot)  # what each worker was sent
        assert assigned == {w["worker"]: w["slot"] for w in workers}
        # each worker was asked once, and the first was not sent its slot again
        assert placement.asked == set(executor.alive()) and placement.batches == 2
        epoch.cancel()


def test_a_slot_plugin_sets_the_workers_it_names_and_leaves_the_others() -> None:
    from types import SimpleNamespace

    plugin = DeviceSlots({"w-2": 1}, 2, batch=3)
    assert plugin.name == "aihpc-device-slots-3"
    try:
        devices.assign(4, 1)
        plugin.setup(SimpleNamespace(name="w-1"))  # another batch's worker
        assert devices.assigned_slot() == 4
        plugin.setup(SimpleNamespace(name="w-2"))
        assert devices.assigned_slot() == 1
    finally:
        devices.assign(None)


def _fails() -> None:
    raise ConfigError("no such device here")


def test_a_question_that_fails_on_a_worker_is_one_line_naming_it(tmp_path: Path) -> None:
    with _local(1) as executor:
        executor.log_dir = tmp_path
        (name,) = executor.ask_each(devices.worker_name)
        with pytest.raises(ConfigError, match=f"^worker {name}: no such device here"):
            executor.ask_each(_fails)
    assert "ConfigError" in (tmp_path / "worker-errors.log").read_text()
