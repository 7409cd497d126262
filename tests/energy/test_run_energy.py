"""The run's energy: meters on real Dask workers reading a fixture powercap tree, and the
bookkeeping of what was measured (coverage, lost workers, operations per joule, the one-line
text)."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_rapl import MAX_UJ, write, zone

from aihpc.energy.meter import DeviceEnergy
from aihpc.energy.run import (
    EnergySession,
    coverage,
    finish_energy,
    start_energy,
    unmeasured_block,
)
from aihpc.records.energy import energy_results, energy_text


@pytest.fixture
def executor():
    from aihpc.launch.executor import local_executor, local_layout

    executor = local_executor(local_layout(2, 1, "cpu"))
    executor.wait_for_workers(2, timeout=120)
    yield executor
    executor.close()


def test_meters_on_two_workers_read_the_host_once(tmp_path: Path, executor) -> None:
    root = tmp_path / "powercap"
    zone(root, "intel-rapl:0", "package-0", 10_000_000)
    zone(root, "intel-rapl:0:0", "dram", 0)
    zone(root, "intel-rapl:1", "package-1", MAX_UJ - 1_000_000)
    session = start_energy(executor, "test-run", "cpu", "cpu", powercap_root=str(root))
    assert session.reason is None and len(session.started) == 2
    readers = [a for a in session.started.values() if a["metered"]]
    assert len(readers) == 1  # both workers are on this host: one reads RAPL
    assert [m["device"] for m in readers[0]["metered"]] == [
        "package-0",
        "package-0/dram",
        "package-1",
    ]
    write(root / "intel-rapl:0", 10_000_000 + 120_000_000)  # +120 J
    write(root / "intel-rapl:0:0", 30_000_000)  # +30 J
    write(root / "intel-rapl:1", 59_000_000)  # wrapped: 1 J + 59 J
    block = finish_energy(executor, session)
    assert block["complete"] is True and block["reason"] is None
    joules = {d["device"]: d["joules"] for d in block["devices"]}
    assert joules == pytest.approx({"package-0": 120.0, "package-0/dram": 30.0, "package-1": 60.0})
    results = energy_results(block, ops=4.2e11)
    assert results["total"]["joules"] == pytest.approx(210.0)
    assert results["total"]["ops_per_joule"] == pytest.approx(2e9)
    assert results["total"]["gops_per_watt"] == pytest.approx(2.0)
    assert results["total"]["sources"] == ["rapl"]


def test_a_worker_lost_during_the_run_is_recorded_with_the_reason(tmp_path: Path, executor) -> None:
    session = start_energy(
        executor, "test-lost", "cpu", "cpu", powercap_root=str(tmp_path / "none")
    )
    gone = {
        "worker": "tcp://10.0.0.9:4000",
        "host": "node9",
        "metered": [{"device": "package-0", "source": "rapl"}],
        "unmeasured": [],
    }
    session = EnergySession(session.key, "cpu", {**session.started, gone["worker"]: gone})
    block = finish_energy(executor, session)
    lost = [d for d in block["devices"] if d["host"] == "node9"]
    assert lost == [
        DeviceEnergy.unmeasured(
            "package-0", "node9", "rapl", "worker tcp://10.0.0.9:4000 was lost during the run"
        ).to_dict()
    ]
    assert block["complete"] is False
    assert f"no RAPL: {tmp_path / 'none'} does not exist" in block["reason"]
    assert "node9 package-0: worker tcp://10.0.0.9:4000 was lost during the run" in block["reason"]
    assert energy_results(block, ops=1e9)["total"]["joules"] is None


def _gpu(joules: float | None, resets: int = 0) -> DeviceEnergy:
    if joules is None:
        return DeviceEnergy.unmeasured(
            "GPU cuda:1 of worker w1", "n", "nvml", "NVML cannot start: not found"
        )
    return DeviceEnergy("GPU 0", "n", "nvml", joules, 10.0, joules / 10.0, 21, 0.5, 0, resets)


def test_gpu_runs_give_operations_per_joule_only_when_every_gpu_was_measured() -> None:
    two = EnergySession("k", "cuda", {"w0": {}, "w1": {}})
    no_rapl = DeviceEnergy.unmeasured("CPU packages", "n", "rapl", "no RAPL here")
    assert coverage([_gpu(3000.0), _gpu(2000.0), no_rapl], two, 1) == {
        "complete": True,
        "reason": "n CPU packages: no RAPL here",
    }
    assert coverage([_gpu(3000.0), _gpu(None)], two, 1)["complete"] is False
    assert coverage([_gpu(3000.0), _gpu(2000.0, resets=1)], two, 1) == {
        "complete": False,
        "reason": ("n GPU 0: its counter restarted 1 time(s); its joules are a lower bound"),
    }
    assert coverage([_gpu(3000.0), _gpu(2000.0)], two, 2) == {
        "complete": False,
        "reason": ("procs_per_trial 2: only each worker's first GPU is metered"),
    }
    block = {
        "devices": [_gpu(3000.0).to_dict(), _gpu(None).to_dict()],
        "complete": False,
        "reason": "n GPU cuda:1 of worker w1: NVML cannot start: not found",
        "interval_s": 0.5,
    }
    total = energy_results(block, ops=6e12)["total"]
    assert (total["joules"], total["watts"], total["ops_per_joule"]) == (3000.0, 300.0, None)
    assert energy_text(energy_results(block, 6e12)) == (
        "3.00 kJ, 300 W average (nvml), GOPS/W not given; not measured: n GPU cuda:1 of worker w1: "
        "NVML cannot start: not found"
    )


def test_text_of_a_run_without_any_reading() -> None:
    assert energy_text(energy_results(unmeasured_block("no RAPL: /p does not exist"), 1e9)) == (
        "not measured: no RAPL: /p does not exist"
    )
    assert energy_text(None) == "not measured: this run's aihpc did not measure energy"


def test_nvml_without_a_driver_says_why() -> None:
    """No libnvidia-ml on this machine: the GPU reader gives the reason, not an error."""
    import torch

    from aihpc.energy.nvml import gpu_counter

    if torch.cuda.is_available():
        counter, reason = gpu_counter(torch.device("cuda", 0))
        assert reason is None and counter.read() > 0  # a real GPU: joules since the driver loaded
        counter.close()
        return
    counter, reason = gpu_counter(torch.device("cuda", 0), host="h")
    assert counter is None
    assert reason in (
        "nvidia-ml-py (pynvml) is not installed",
        "NVML cannot start: NVML Shared Library Not Found"
        " (no NVIDIA driver's libnvidia-ml on this host)",
    )
