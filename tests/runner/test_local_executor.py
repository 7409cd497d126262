"""The local cluster's worker processes: their log on the run's stderr, how the master sees them."""

from __future__ import annotations

import logging
import os

import pytest

from aihpc.base.errors import WorkersLost
from aihpc.launch.executor import local_executor, local_layout
from aihpc.launch.placement import place_workers


def _worker_log_level() -> int:
    return logging.getLogger("distributed.worker").getEffectiveLevel()


def test_a_worker_logs_only_what_is_critical_on_the_run_s_stderr() -> None:
    """A worker's ERROR log (a heartbeat to a scheduler that closed first: a traceback) would break
    the run's one-line errors; the nanny's silence_logs does not reach the worker's logger."""
    environ = dict(os.environ)  # Dask's nanny sets OMP_NUM_THREADS=1 & co. in this very process
    executor = local_executor(local_layout(1, 1, "cpu"))
    try:
        levels = executor.client.run(_worker_log_level)
    finally:
        executor.close()
        os.environ.clear()
        os.environ.update(environ)
    assert list(levels.values()) == [logging.CRITICAL]


def test_the_workers_alive_are_asked_of_the_scheduler_not_read_from_the_client_s_cache(
    monkeypatch,
) -> None:
    """``Client.scheduler_info`` answers from a cache that the client's periodic refresh, which asks
    for no workers, can overwrite just before it returns: a loaded machine then saw none (a run
    failed placing its one worker).  Here every refresh is that periodic one."""
    from distributed.client import SchedulerInfo

    environ = dict(os.environ)
    executor = local_executor(local_layout(2, 1, "cpu"))
    client = executor.client

    async def periodic_refresh(n_workers: int = 0) -> None:
        client._scheduler_identity = SchedulerInfo(await client.scheduler.identity(n_workers=0))

    try:
        executor.wait_for_workers(2, timeout=60)
        monkeypatch.setattr(client, "_update_scheduler_info", periodic_refresh)
        assert client.scheduler_info(n_workers=-1)["workers"] == {}  # what misled the run
        alive = executor.alive()
        assert sorted(alive.values()) == [1, 1] and executor.slots() == 2
        assert sorted(executor.run_on_each(os.getpid)) == sorted(client.run(os.getpid).values())
        assert executor.workers_per_host() == {address: 2 for address in alive}
    finally:
        executor.close()
        os.environ.clear()
        os.environ.update(environ)


def test_placing_the_workers_when_none_is_alive_is_a_lost_worker_error() -> None:
    environ = dict(os.environ)
    executor = local_executor(local_layout(0, 1, "cpu"))
    try:
        with pytest.raises(WorkersLost, match="no worker was alive to place"):
            place_workers(executor, "cpu", 1)
    finally:
        executor.close()
        os.environ.clear()
        os.environ.update(environ)
