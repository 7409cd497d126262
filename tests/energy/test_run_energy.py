"""The run's energy: meters on real Dask workers reading a fixture powercap tree, and the
bookkeeping of what was measured (coverage, lost workers, operations per joule, the one-line
text)."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import time
from pathlib import Path
from typing import Any

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
from aihpc.records.codec import convert
from aihpc.records.energy import EnergyRecord, energy_results, energy_text


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
    session = start_energy(
        executor, "test-run", "cpu", "cpu", tmp_path / "energy", powercap_root=str(root)
    )
    assert session.reason is None and sorted(session.started) == ["0", "1"]  # by worker name
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
    assert block["complete"] is True and block["reason"] is None and block["notes"] == []
    joules = {d["device"]: d["joules"] for d in block["devices"]}
    assert joules == pytest.approx({"package-0": 120.0, "package-0/dram": 30.0, "package-1": 60.0})
    results = energy_results(block, ops=4.2e11)
    assert results["total"]["joules"] == pytest.approx(210.0)
    assert results["total"]["ops_per_joule"] == pytest.approx(2e9)
    assert results["total"]["gops_per_watt"] == pytest.approx(2.0)
    assert results["total"]["sources"] == ["rapl"]


def test_the_meters_stop_beside_a_task_a_worker_still_runs(tmp_path: Path, executor) -> None:
    """At the run's end a worker may still run an epoch the master gave up on (one that began
    compiling at its deadline): its meter is stopped beside that task, not after it."""
    root = tmp_path / "powercap"
    zone(root, "intel-rapl:0", "package-0", 10_000_000)
    session = start_energy(
        executor, "test-busy", "cpu", "cpu", tmp_path / "energy", powercap_root=str(root)
    )
    busy = [
        executor.client.submit(time.sleep, 30, workers=[a], pure=False)
        for a in _addresses(executor).values()
    ]
    time.sleep(1.0)  # both workers' one thread in their task
    start = time.monotonic()
    block = finish_energy(executor, session)
    assert time.monotonic() - start < 10
    assert block["reason"] is None and block["notes"] == []
    for future in busy:
        future.cancel()


def _name(dask_worker) -> str:
    return str(dask_worker.name)


def _addresses(executor) -> dict[str, str]:
    """The address of each worker that answers now, by name."""
    names = executor.client.run(_name, on_error="return")
    return {n: a for a, n in names.items() if isinstance(n, str)}


def _reader(executor, session: EnergySession) -> tuple[str, str]:
    """The name and address of the worker that reads RAPL."""
    (name,) = [n for n, a in session.started.items() if a["metered"]]
    return name, _addresses(executor)[name]


def _wait_for_save(directory: Path, worker: str, joules: float, timeout: float = 30.0) -> None:
    """Until ``worker``'s saved readings have counted ``joules`` on its first counter."""
    from aihpc.energy.worker import saved_file

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            state = json.loads(saved_file(directory, worker).read_text())["counters"][0]["state"]
        except (OSError, ValueError, KeyError, IndexError):
            state = None
        if state is not None and state["joules"] >= joules:
            return
        time.sleep(0.2)
    raise AssertionError(f"worker {worker} saved no reading of {joules} J within {timeout} s")


def test_a_worker_killed_and_restarted_keeps_its_energy_over_the_whole_run(
    tmp_path: Path, executor
) -> None:
    """The RAPL reader's process is killed (as its nanny kills it for memory); its nanny starts it
    again, its meter goes on from its saved readings, and the energy used while it was down is
    counted by the cumulative counter: the whole run is measured."""
    root = tmp_path / "powercap"
    zone(root, "intel-rapl:0", "package-0", 10_000_000)
    directory = tmp_path / "energy"
    session = start_energy(executor, "killed", "cpu", "cpu", directory, powercap_root=str(root))
    name, address = _reader(executor, session)
    write(root / "intel-rapl:0", 10_000_000 + 50_000_000)  # +50 J before the kill
    _wait_for_save(directory, name, 50.0)
    (pid,) = executor.client.run(os.getpid, workers=[address]).values()
    os.kill(pid, signal.SIGKILL)  # as its nanny kills a worker past its memory limit
    write(root / "intel-rapl:0", 10_000_000 + 80_000_000)  # +30 J while it is down
    deadline = time.monotonic() + 60
    while _addresses(executor).get(name) in (None, address):
        assert time.monotonic() < deadline, "the killed worker did not come back"
        time.sleep(0.2)
    write(root / "intel-rapl:0", 10_000_000 + 100_000_000)  # +20 J after it came back
    block = finish_energy(executor, session)
    (package,) = block["devices"]
    assert package["joules"] == pytest.approx(100.0) and package["reason"] is None
    assert block["complete"] is True and block["reason"] is None
    assert block["notes"] == [
        f"worker(s) {name} restarted during the run; their meters went on from the readings "
        "they saved"
    ]


def test_a_worker_lost_for_good_counts_up_to_its_last_saved_reading(
    tmp_path: Path, executor
) -> None:
    root = tmp_path / "powercap"
    zone(root, "intel-rapl:0", "package-0", 10_000_000)
    directory = tmp_path / "energy"
    session = start_energy(executor, "gone", "cpu", "cpu", directory, powercap_root=str(root))
    name, address = _reader(executor, session)
    write(root / "intel-rapl:0", 10_000_000 + 40_000_000)  # +40 J while it lives
    _wait_for_save(directory, name, 40.0)
    executor.client.retire_workers([address], close_workers=True)  # worker and nanny gone
    write(root / "intel-rapl:0", 10_000_000 + 90_000_000)  # nobody reads this
    block = finish_energy(executor, session)
    (package,) = block["devices"]
    assert package["joules"] == pytest.approx(40.0)
    assert package["reason"] == (
        f"worker {name} was lost during the run: its energy up to its last saved reading is "
        "counted, not after"
    )
    assert block["complete"] is False and package["reason"] in block["reason"]
    assert energy_results(block, ops=1e9)["total"]["ops_per_joule"] is None


def test_a_worker_lost_without_saved_readings_is_recorded_with_the_reason(
    tmp_path: Path, executor
) -> None:
    session = start_energy(
        executor, "test-lost", "cpu", "cpu", tmp_path / "energy", str(tmp_path / "none")
    )
    gone = {
        "worker": "w9",
        "host": "node9",
        "metered": [{"device": "package-0", "source": "rapl"}],
        "unmeasured": [],
        "restarts": 0,
    }
    session = dataclasses.replace(session, started={**session.started, "w9": gone})
    block = finish_energy(executor, session)
    lost = [d for d in block["devices"] if d["host"] == "node9"]
    why = "worker w9 was lost during the run, and saved no readings"
    assert lost == [DeviceEnergy.unmeasured("package-0", "node9", "rapl", why).to_dict()]
    assert block["complete"] is False
    assert f"no RAPL: {tmp_path / 'none'} does not exist" in block["reason"]
    assert f"node9 package-0: {why}" in block["reason"]
    assert energy_results(block, ops=1e9)["total"]["joules"] is None


def _gpu(joules: float | None, resets: int = 0) -> DeviceEnergy:
    if joules is None:
        return DeviceEnergy.unmeasured(
            "GPU cuda:1 of worker w1", "n", "nvml", "NVML cannot start: not found"
        )
    return DeviceEnergy("GPU 0", "n", "nvml", joules, 10.0, joules / 10.0, 21, 0.5, 0, resets)


def test_gpu_runs_give_operations_per_joule_only_when_every_gpu_was_measured() -> None:
    two = EnergySession("k", "cuda", None, {"w0": {}, "w1": {}})
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
    assert energy_text(_record(energy_results(block, 6e12))) == (
        "3.00 kJ, 300 W average (nvml), GOPS/W not given; not measured: n GPU cuda:1 of worker w1: "
        "NVML cannot start: not found"
    )


def _record(energy: dict[str, Any] | None) -> EnergyRecord:
    """results.json's ``energy`` as the summary and the report read it."""
    return convert(energy, EnergyRecord, "energy")


def test_text_of_a_run_without_any_reading() -> None:
    unmeasured = energy_results(unmeasured_block("no RAPL: /p does not exist"), 1e9)
    assert energy_text(_record(unmeasured)) == ("not measured: no RAPL: /p does not exist")
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
