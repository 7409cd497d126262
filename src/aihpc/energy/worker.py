"""What runs on each Dask worker: start its energy meter at the run's start, report it at the end.

A worker meters the GPU it trains on (NVML), and, if the master chose it as
its host's one RAPL reader, the host's CPU packages and DRAM (RAPL zones are
per node: two workers reading them would count them twice).  The meter lives
in this worker process between the two calls; a worker that died and was
restarted in between has lost it, and says so.
"""

from __future__ import annotations

import socket
import threading
from pathlib import Path
from typing import Any

from aihpc.energy.meter import DeviceEnergy, EnergyCounter, Sampler
from aihpc.machine.devices import worker_address

_METERS: dict[
    str, tuple[Sampler, list[DeviceEnergy]]
] = {}  # run key -> (sampler, devices not measurable)
_LOCK = threading.Lock()


def worker_identity() -> dict[str, str]:
    """Runs on a worker: its address and host name (the master picks one RAPL reader per host)."""
    return {"worker": worker_address(), "host": socket.gethostname()}


def start_meter(
    key: str, device: str, rapl_readers: list[str], powercap_root: str | None = None
) -> dict[str, Any]:
    """Runs on a worker: start metering its GPU (if it trains on one) and RAPL if it is in
    ``rapl_readers``.

    ``device``: the run's device setting, resolved as the trainer resolves it.
    Returns what is metered and what cannot be, with the reasons.
    """
    from aihpc.energy.rapl import POWERCAP_ROOT
    from aihpc.machine.devices import resolve_device

    host, address = socket.gethostname(), worker_address()
    counters: list[EnergyCounter] = []
    unmeasured: list[DeviceEnergy] = []
    torch_device = resolve_device(device)
    if torch_device.type == "cuda":
        from aihpc.energy.nvml import gpu_counter

        counter, reason = gpu_counter(torch_device, host)
        if counter is None:
            unmeasured.append(
                DeviceEnergy.unmeasured(
                    f"GPU {torch_device} of worker {address}", host, "nvml", str(reason)
                )
            )
        else:
            counters.append(counter)
    if address in rapl_readers:
        _add_rapl(
            counters, unmeasured, Path(powercap_root) if powercap_root else POWERCAP_ROOT, host
        )
    with _LOCK:
        if key in _METERS:  # a start repeated on the same worker keeps the first meter
            counters, unmeasured = _METERS[key][0].counters, _METERS[key][1]
            return _started(address, host, counters, unmeasured)
        _METERS[key] = (Sampler(counters).start(), unmeasured)
    return _started(address, host, counters, unmeasured)


def _started(
    address: str, host: str, counters: list, unmeasured: list[DeviceEnergy]
) -> dict[str, Any]:
    return {
        "worker": address,
        "host": host,
        "metered": [{"device": c.device, "source": c.source} for c in counters],
        "unmeasured": [d.to_dict() for d in unmeasured],
    }


def _add_rapl(counters: list, unmeasured: list[DeviceEnergy], root, host: str) -> None:
    from aihpc.energy.rapl import rapl_counters

    found, reason = rapl_counters(root, host)
    if reason:
        unmeasured.append(DeviceEnergy.unmeasured("CPU packages", host, "rapl", reason))
    counters.extend(found)


def stop_meter(key: str) -> dict[str, Any]:
    """Runs on a worker: stop its meter; every device's energy, measured or with the reason it is
    not."""
    host, address = socket.gethostname(), worker_address()
    with _LOCK:
        entry = _METERS.pop(key, None)
    if entry is None:
        return {
            "worker": address,
            "host": host,
            "devices": None,
            "reason": f"worker {address} has no meter: it restarted during the run, "
            "and its readings were lost",
        }
    sampler, unmeasured = entry
    devices = sampler.stop()
    for counter in sampler.counters:
        close = getattr(counter, "close", None)
        if close is not None:
            close()
    return {
        "worker": address,
        "host": host,
        "devices": [d.to_dict() for d in devices + unmeasured],
        "reason": None,
    }
