"""The worker-to-device rule (aihpc.machine.devices) and the master's side of it
(aihpc.launch.placement), without a GPU."""

from __future__ import annotations

import os
import re
import socket

import pytest
import torch

from aihpc.base.errors import ConfigError
from aihpc.machine import devices
from aihpc.machine.devices import host_slots, local_worker_envs


def test_local_gpu_workers_each_get_their_own_gpus():
    # a node with G=4 GPUs and P=2 per trial: worker 0 sees GPUs 0,1 and worker 1 GPUs 2,3
    assert local_worker_envs(2, 2, ["0", "1", "2", "3"]) == [
        {"CUDA_VISIBLE_DEVICES": "0,1"},
        {"CUDA_VISIBLE_DEVICES": "2,3"},
    ]
    assert local_worker_envs(4, 1, ["0", "1", "2", "3"])[3] == {"CUDA_VISIBLE_DEVICES": "3"}
    # a node whose own CUDA_VISIBLE_DEVICES already names some GPUs: workers split those, by name
    assert local_worker_envs(2, 1, ["GPU-a", "GPU-b"]) == [
        {"CUDA_VISIBLE_DEVICES": "GPU-a"},
        {"CUDA_VISIBLE_DEVICES": "GPU-b"},
    ]
    with pytest.raises(
        ConfigError, match=re.escape("3 workers of 2 GPUs need 6 GPUs, got 4 (0,1,2,3)")
    ):
        local_worker_envs(3, 2, ["0", "1", "2", "3"])


def test_the_master_numbers_workers_sharing_gpus_by_host_and_name():
    # --scheduler workers: two hosts, every worker seeing all of its node's GPUs (no
    # CUDA_VISIBLE_DEVICES)
    identities = {
        "b-worker-10": {"host": "node2", "visible": None},
        "a-worker-2": {"host": "node1", "visible": None},
        "a-worker-10": {"host": "node1", "visible": None},
        "b-worker-3": {"host": "node2", "visible": None},
        "tcp://10.0.0.1:4455": {"host": "node1", "visible": None},  # any name: none is parsed
        # workers with GPUs of their own (local GPU workers, srun --gpus-per-task): alone in their
        # group
        "0": {"host": "node3", "visible": "0,1"},
        "1": {"host": "node3", "visible": "2,3"},
    }
    assert host_slots(identities) == {
        "a-worker-2": 0,
        "a-worker-10": 1,
        "tcp://10.0.0.1:4455": 2,  # sorted by name, numbers as numbers
        "b-worker-3": 0,
        "b-worker-10": 1,
        "0": 0,
        "1": 0,
    }


def test_workers_that_join_later_keep_the_placed_slots_and_take_the_lowest_free_ones():
    identities = {
        name: {"host": "node1", "visible": None} for name in ("w-1", "w-2", "w-3", "w-10")
    }
    identities["v-1"] = {"host": "node2", "visible": None}
    # w-2 joined first, then w-1 was placed beside it at slot 1 (w-2 keeps 0); w-3, w-10 and
    # v-1 join now
    placed = {"w-2": 0, "w-1": 1}
    assert host_slots(identities, placed) == {"w-2": 0, "w-1": 1, "w-3": 2, "w-10": 3, "v-1": 0}
    # a slot left by a worker no longer known is free again
    assert host_slots({"w-5": identities["w-1"], "w-1": identities["w-1"]}, {"w-1": 1}) == {
        "w-1": 1,
        "w-5": 0,
    }


def test_on_cpu_every_rank_trains_on_the_cpu_and_a_slot_changes_nothing():
    try:
        devices.assign(3, 2)
        record = devices.describe("cpu", procs=2)
        assert record["slot"] == 3 and record["host"] == socket.gethostname()
        assert record["visible"] == os.environ.get("CUDA_VISIBLE_DEVICES")
        assert record["devices"] == [{"device": "cpu"}, {"device": "cpu"}]
        assert (
            devices.resolve_device(
                "auto" if not torch.cuda.is_available() else "cpu", rank=1, procs=2
            ).type
            == "cpu"
        )
    finally:
        devices.assign(None)
    with pytest.raises(ConfigError, match="a worker's device slot must be >= 0, got -1"):
        devices.assign(-1)
    with pytest.raises(ConfigError, match="GPUs per slot must be >= 1, got 0"):
        devices.assign(1, 0)


def test_local_gpu_cluster_starts_each_worker_with_its_gpus():
    # the GPU path's cluster, started on CPU: CUDA_VISIBLE_DEVICES reaches each worker process
    from distributed import Client

    from aihpc.launch.executor import Layout, local_gpu_cluster

    cluster = local_gpu_cluster(Layout(2, 1, "cuda", 2), ["0", "1", "2", "3"], limit=2**30)
    try:
        with Client(cluster) as client:
            client.wait_for_workers(2, timeout=120)
            seen = client.run(
                lambda dask_worker: (
                    dask_worker.name,
                    os.environ["CUDA_VISIBLE_DEVICES"],
                    dask_worker.memory_manager.memory_limit,
                )
            )
    finally:
        cluster.close(timeout=30)
    assert sorted(seen.values()) == [(0, "0,1", 2**30), (1, "2,3", 2**30)]


@pytest.mark.parametrize("name", ["tpu", "gpu", "meta", "cpu:0", "cuda:x", ""])
def test_a_name_outside_the_rule_is_a_one_line_config_error(name: str) -> None:
    with pytest.raises(
        ConfigError, match=re.escape(f"device must be cpu, cuda, cuda:N or auto, got {name!r}")
    ):
        devices.resolve_device(name)


def test_the_one_device_rule_without_a_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert devices.resolve_device("auto") == devices.resolve_device("cpu") == torch.device("cpu")
    assert devices.resolve_device(torch.device("cpu")) == torch.device("cpu")
    assert devices.device_kind("auto") == "cpu"
    for name in ("cuda", "cuda:0"):
        with pytest.raises(
            ConfigError, match=f"device '{name}' requested but CUDA is not available"
        ):
            devices.resolve_device(name)


def test_the_one_device_rule_with_gpus(monkeypatch: pytest.MonkeyPatch) -> None:
    # two GPUs seen: auto and cuda are this worker's own GPU (its slot's, by rank), cuda:N is GPU N
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    try:
        assert (
            devices.resolve_device("auto")
            == devices.resolve_device("cuda")
            == torch.device("cuda", 0)
        )
        assert devices.resolve_device("cuda", rank=1, procs=2) == torch.device("cuda", 1)
        assert devices.resolve_device("cuda:1") == torch.device("cuda", 1)
        devices.assign(1)
        assert devices.resolve_device("auto") == torch.device("cuda", 1)
        assert devices.device_kind("auto") == "cuda"
        with pytest.raises(
            ConfigError, match=re.escape("device 'cuda:2': this machine has 2 CUDA GPU(s)")
        ):
            devices.resolve_device("cuda:2")
    finally:
        devices.assign(None)
