"""Each worker's memory limit, sized from its node (:mod:`aihpc.launch.memory`), on real Dask
clusters of this machine, and the cause recorded when a worker's nanny kills it for memory."""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from dask.utils import format_bytes
from distributed.system import MEMORY_LIMIT
from distributed.worker_memory import parse_memory_limit

from aihpc.base.config import MIN_WORKER_MEMORY
from aihpc.base.errors import ConfigError
from aihpc.launch.executor import DaskExecutor, local_executor, local_layout, remote_executor
from aihpc.launch.memory import (
    MEMORY_KILL,
    RESERVE_MIN,
    TERMINATE_FRACTION,
    node_share,
    reserve,
    tasks_on_node,
    worker_limit,
)
from aihpc.records.rows import LostEpoch
from aihpc.runner.display.summary import loss_lines
from aihpc.tasks import read_config
from fixture_run import results_head

GIB = 2**30


@contextmanager
def _local(workers: int, memory: str | None = None) -> Iterator[DaskExecutor]:
    """A local cluster of one-thread CPU workers, this process's environment kept (Dask's nanny
    sets OMP_NUM_THREADS=1 & co. in this very process)."""
    environ = dict(os.environ)
    executor = local_executor(local_layout(workers, 1, "cpu"), memory)
    try:
        executor.wait_for_workers(workers, timeout=120)
        yield executor
    finally:
        executor.close()
        os.environ.clear()
        os.environ.update(environ)


def test_the_reserve_and_a_node_s_share() -> None:
    assert reserve(8 * GIB) == RESERVE_MIN  # small nodes keep the least reserve
    assert reserve(128 * GIB) == int(0.1 * 128 * GIB)
    assert node_share(128 * GIB, 1) == 128 * GIB - int(12.8 * GIB)
    assert node_share(128 * GIB, 8) == (128 * GIB - int(12.8 * GIB)) // 8
    assert node_share(GIB, 1) == 0  # the reserve takes it all


def test_one_worker_of_a_16_core_node_gets_the_node_not_a_sixteenth_of_it() -> None:
    """The H200's failure: Dask's "auto" limit for a one-thread worker on a 16-core node is the
    node's memory / 16 (8 GiB of 128 GiB there); aihpc's is the node less its reserve."""
    dask_auto = parse_memory_limit("auto", 1, total_cores=16, logger=logging.getLogger())
    assert dask_auto == MEMORY_LIMIT // 16
    ours = worker_limit(None, 1)
    assert ours == MEMORY_LIMIT - reserve(MEMORY_LIMIT)
    assert ours > 13 * dask_auto
    assert worker_limit("3GiB", 1) == 3 * GIB  # --worker-memory still decides


def test_a_limit_no_worker_can_start_in_is_refused_in_one_line_naming_it() -> None:
    with pytest.raises(ConfigError) as given:
        worker_limit("256MiB", 1)
    assert str(given.value) == (
        "each worker's memory limit must be at least 512.00 MiB (a worker with torch loaded, "
        "before it trains), got 256.00 MiB (--worker-memory 256MiB)"
    )
    many = MEMORY_LIMIT // MIN_WORKER_MEMORY + 1
    with pytest.raises(ConfigError, match=rf"over {many} workers\)$"):
        worker_limit(None, many)
    with pytest.raises(
        ConfigError, match=r"^worker_memory must be at least 512MiB .* got '100MiB'"
    ):
        read_config(dict(worker_memory="100MiB"))  # the flag itself, before anything starts


@pytest.mark.parametrize(
    ("env", "tasks"),
    [
        ({"SLURM_TASKS_PER_NODE": "4", "SLURM_NODEID": "0"}, 4),
        ({"SLURM_TASKS_PER_NODE": "2(x3),1", "SLURM_NODEID": "2"}, 2),
        ({"SLURM_TASKS_PER_NODE": "2(x3),1", "SLURM_NODEID": "3"}, 1),
        ({"SLURM_STEP_TASKS_PER_NODE": "8", "SLURM_TASKS_PER_NODE": "1", "SLURM_NODEID": "0"}, 8),
        ({}, 1),
        ({"SLURM_TASKS_PER_NODE": "garbled"}, 1),
    ],
)
def test_the_tasks_of_a_slurm_step_on_this_node(env: dict[str, str], tasks: int) -> None:
    assert tasks_on_node(env) == tasks


def test_a_local_cluster_gives_each_worker_its_share_of_this_machine() -> None:
    with _local(2) as executor:
        limits = executor.memory_limits()
    assert limits == {"0": node_share(MEMORY_LIMIT, 2), "1": node_share(MEMORY_LIMIT, 2)}


@pytest.mark.slow
def test_a_scheduler_s_workers_started_with_dask_s_default_get_the_node_s_share() -> None:
    """``--scheduler``: workers a user started with Dask's default limit (the node / cores per
    thread) are given the node's share through their nannies, which restart them once with it;
    one started with a limit of its own keeps it; ``--worker-memory`` sets every one."""
    from distributed import Client, LocalCluster

    cluster = LocalCluster(  # as `dask worker` starts them: Dask's default limit
        n_workers=2,
        threads_per_worker=1,
        processes=True,
        dashboard_address=None,
        silence_logs=logging.ERROR,
    )
    (spec,) = cluster.new_worker_spec().values()  # a third worker, with a limit of its own
    spec["options"] = {**spec["options"], "memory_limit": "3GiB"}
    cluster.worker_spec["own"] = spec
    cluster.sync(cluster._correct_state)
    try:
        with Client(cluster) as client:
            client.wait_for_workers(3, timeout=120)
        executor = remote_executor(cluster.scheduler_address)
        executor.wait_for_workers(3, timeout=120)
        limits = executor.memory_limits()
        assert limits == {
            "0": node_share(MEMORY_LIMIT, 3),  # three workers on this host
            "1": node_share(MEMORY_LIMIT, 3),
            "own": 3 * GIB,
        }
        executor.close()
        fixed = remote_executor(cluster.scheduler_address, "2GiB")
        fixed.wait_for_workers(3, timeout=120)
        assert set(fixed.memory_limits().values()) == {2 * GIB}
        fixed.close()
    finally:
        cluster.close()


def _hog(n: int) -> int:
    """Takes ``n`` bytes and holds them until its worker is killed."""
    import time

    import numpy as np

    block = np.ones(n, dtype=np.uint8)
    time.sleep(30)
    return int(block[0])


def test_a_worker_its_nanny_kills_for_memory_is_recorded_with_its_memory_against_its_limit() -> (
    None
):
    with _local(1, "600MiB") as executor:
        future = executor.submit(_hog, 2 * GIB, "trial3-epoch1-try1")
        with pytest.raises(Exception) as lost:
            future.result()
        cause = executor.memory_kill(lost.value)
        assert executor.memory_kill(ValueError("not a lost worker")) is None
    assert cause is not None, f"no memory restart recorded for {lost.value!r}"
    limit = 600 * 2**20
    match = re.fullmatch(
        rf"{MEMORY_KILL}: (.+) resident, against its limit of 600.00 MiB "
        rf"\(restarted past 95 %, {re.escape(format_bytes(int(TERMINATE_FRACTION * limit)))}\)",
        cause,
    )
    assert match is not None, cause
    loss = LostEpoch.of(lost.value, 12.5, 3, 1, 1, True, cause)
    assert loss.reason == cause and loss.worker == "0"
    results = results_head({"schema_version": 3, "score": _SCORE, "losses": [loss.to_dict()]})
    assert loss_lines(results)[1] == (
        f"  worker lost      0 on {loss.address} at 12.5 s: trial 3 epoch 1 ({cause})"
    )


_SCORE = {
    "valid": True,
    "invalid_reason": None,
    "ops_per_second": 1e9,
    "regulated_score": 1e9,
    "error_percent": 10.0,
    "best_accuracy": 0.9,
    "ops": 10**10,
    "wall_seconds": 10.0,
    "trials_completed": 1,
    "trials_failed": 0,
    "trials_diverged": 0,
    "min_accuracy": 0.5,
    "peak_flops_per_s": None,
    "peak_fraction": None,
}


@pytest.mark.parametrize("memory", [None, "2GiB"])
def test_a_slurm_task_gives_its_worker_the_allocation_s_share_of_its_node(
    monkeypatch: pytest.MonkeyPatch, tmp_path, memory: str | None
) -> None:
    """Rank 0 of a one-task step, as srun starts it (SLURM's environment; the step puts two tasks
    on this node): its worker's limit is the node's share for two, or --worker-memory's."""
    from distributed import Client

    from aihpc.launch.slurm import runner_context

    environ = dict(os.environ)
    slurm = {"SLURM_JOB_ID": "7", "SLURM_PROCID": "0", "SLURM_NTASKS": "1", "SLURM_NODEID": "0"}
    for name, value in {**slurm, "SLURM_STEP_TASKS_PER_NODE": "2"}.items():
        monkeypatch.setenv(name, value)
    try:
        with runner_context(tmp_path / "scheduler.json", tls=False, worker_memory=memory) as client:
            assert isinstance(client, Client)
            client.wait_for_workers(1, timeout=120)
            limits = DaskExecutor(client, owns_client=False).memory_limits()
    finally:
        os.environ.clear()
        os.environ.update(environ)
    assert limits == {"slurm-0": 2 * GIB if memory else node_share(MEMORY_LIMIT, 2)}


def test_a_slurm_task_refuses_a_limit_no_worker_can_start_in_before_it_starts_anything(
    monkeypatch: pytest.MonkeyPatch, tmp_path
) -> None:
    from aihpc.launch.slurm import runner_context

    for name, value in {"SLURM_JOB_ID": "7", "SLURM_PROCID": "1", "SLURM_NTASKS": "2"}.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(ConfigError, match=r"got 100\.00 MiB \(--worker-memory 100MiB\)$"):
        with runner_context(tmp_path / "scheduler.json", tls=False, worker_memory="100MiB"):
            pass
    assert not (tmp_path / "scheduler.json").exists()
