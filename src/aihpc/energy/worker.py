"""What runs on each Dask worker: its energy meter, from the run's start to its end, restarts and
all.

A worker meters the GPU it trains on (NVML), and, if the master chose it as
its host's one RAPL reader, the host's CPU packages and DRAM (RAPL zones are
per node: two workers reading them would count them twice).  The meter lives
in the worker process and is started by a worker plugin (:class:`EnergyMeters`),
so a worker its nanny restarts (killed for memory, say) starts it again.
Every few seconds the meter saves its readings to a file of its own in the
run's energy folder (on the run directory, which every worker sees); a meter
started again continues from that file, and since every counter is
cumulative, its first reading counts the energy used while the worker was
down.  A worker lost for good leaves its file: the master counts its energy up
to its last saved reading (:mod:`aihpc.energy.run`).  Workers are known by
their Dask names, which a restarted worker keeps.
"""

from __future__ import annotations

import functools
import json
import re
import socket
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from distributed.diagnostics.plugin import WorkerPlugin

from aihpc.base.fileio import atomic_write
from aihpc.energy.meter import Accumulator, DeviceEnergy, EnergyCounter, Sampler

if TYPE_CHECKING:
    from distributed import Worker

_METERS: dict[str, tuple[Sampler, list[DeviceEnergy], dict[str, Any]]] = {}
_LOCK = threading.Lock()


def worker_host() -> str:
    """Runs on a worker: its host name (the master picks one RAPL reader per host)."""
    return socket.gethostname()


class EnergyMeters(WorkerPlugin):
    """Starts the run's meter (:func:`start_meter`) on every worker, now and whenever one starts
    again; ``rapl_readers``: the workers (by name) that read their host's RAPL zones."""

    name = "aihpc-energy"

    def __init__(
        self,
        key: str,
        device: str,
        rapl_readers: list[str],
        directory: str,
        powercap_root: str | None = None,
    ) -> None:
        self.key, self.device, self.rapl_readers = key, device, list(rapl_readers)
        self.directory, self.powercap_root = directory, powercap_root

    def setup(self, worker: Worker) -> None:
        start_meter(
            self.key,
            self.device,
            self.rapl_readers,
            self.powercap_root,
            worker=str(worker.name),
            directory=Path(self.directory),
        )


def saved_file(directory: Path, worker: str) -> Path:
    """The file in which ``worker``'s meter saves its readings."""
    return Path(directory) / f"{re.sub(r'[^A-Za-z0-9_.-]', '_', worker)}.json"


def read_saved(directory: Path, worker: str, key: str) -> dict[str, Any] | None:
    """``worker``'s saved readings of the run ``key`` (None: none, or of another run)."""
    try:
        saved = json.loads(saved_file(directory, worker).read_text())
    except (OSError, ValueError):
        return None
    return saved if isinstance(saved, dict) and saved.get("key") == key else None


def start_meter(
    key: str,
    device: str,
    rapl_readers: list[str],
    powercap_root: str | None = None,
    *,
    worker: str | None = None,
    directory: Path | None = None,
) -> None:
    """Start metering this worker's GPU (if it trains on one) and, if it is one of
    ``rapl_readers``, its host's RAPL zones.

    ``device``: the run's device setting, resolved as the trainer resolves it.
    ``worker``: who this meter is (default this worker's address, ``local``
    outside Dask).  ``directory``: where it saves its readings every few
    seconds, and continues from those it saved before (its process restarted);
    None: nowhere.  A start repeated in the same process keeps the first meter.
    """
    from aihpc.energy.rapl import POWERCAP_ROOT
    from aihpc.machine.devices import resolve_device, worker_address

    worker = worker or worker_address()
    with _LOCK:
        if key in _METERS:
            return
        host = socket.gethostname()
        root = Path(powercap_root) if powercap_root else POWERCAP_ROOT
        rapl = root if worker in rapl_readers else None
        counters, unmeasured = _counters(resolve_device(device), host, worker, rapl)
        saved = read_saved(directory, worker, key) if directory is not None else None
        states = {c["id"]: c["state"] for c in (saved or {}).get("counters", [])}
        record: dict[str, Any] = {
            "worker": worker,
            "host": host,
            "metered": [{"device": c.device, "source": c.source} for c in counters],
            "unmeasured": [d.to_dict() for d in unmeasured],
            "restarts": saved["restarts"] + 1 if saved else 0,
        }

        def save(accumulators: list[dict[str, Any]], directory: Path) -> None:
            ids = [_counter_id(c) for c in counters]
            counted = [
                {"id": i, **m, "wrap_j": c.wrap_j, "state": a}
                for i, m, c, a in zip(ids, record["metered"], counters, accumulators, strict=True)
            ]
            content = {"key": key, **record, "counters": counted}
            atomic_write(saved_file(directory, worker), json.dumps(content))

        sampler = Sampler(
            counters,
            saved=[states.get(_counter_id(c)) for c in counters],
            on_save=functools.partial(save, directory=directory) if directory else None,
        )
        _METERS[key] = (sampler.start(), unmeasured, record)


def _counter_id(counter: EnergyCounter) -> str:
    return f"{counter.source}:{counter.device}"


def _counters(
    torch_device: Any, host: str, worker: str, rapl: Path | None
) -> tuple[list[EnergyCounter], list[DeviceEnergy]]:
    """The counters this worker reads (RAPL's under ``rapl``, if given), and the devices it would
    but cannot, with the reasons."""
    from aihpc.energy.rapl import rapl_counters

    counters: list[EnergyCounter] = []
    unmeasured: list[DeviceEnergy] = []
    if torch_device.type == "cuda":
        from aihpc.energy.nvml import gpu_counter

        counter, reason = gpu_counter(torch_device, host)
        if counter is None:
            unmeasured.append(
                DeviceEnergy.unmeasured(
                    f"GPU {torch_device} of worker {worker}", host, "nvml", str(reason)
                )
            )
        else:
            counters.append(counter)
    if rapl is not None:
        found, reason = rapl_counters(rapl, host)
        if reason:
            unmeasured.append(DeviceEnergy.unmeasured("CPU packages", host, "rapl", reason))
        counters.extend(cast("list[EnergyCounter]", found))  # RaplCounter's wrap_j: a float
    return counters, unmeasured


def meter_started(key: str) -> dict[str, Any] | None:
    """Runs on a worker: what its meter of the run ``key`` reads and cannot read (None: no
    meter)."""
    with _LOCK:
        entry = _METERS.get(key)
    return dict(entry[2]) if entry is not None else None


def stop_meter(key: str) -> dict[str, Any]:
    """Runs on a worker: stop its meter; every device's energy, measured or with the reason it is
    not, under the name it was started with."""
    from aihpc.machine.devices import worker_name

    host, worker = socket.gethostname(), worker_name()
    with _LOCK:
        entry = _METERS.pop(key, None)
    if entry is None:
        return {
            "worker": worker,
            "host": host,
            "devices": None,
            "reason": f"worker {worker} has no meter: it was not started there",
        }
    sampler, unmeasured, record = entry
    devices = sampler.stop()
    for counter in sampler.counters:
        close = getattr(counter, "close", None)
        if close is not None:
            close()
    return {
        "worker": record["worker"],
        "host": host,
        "devices": [d.to_dict() for d in devices + unmeasured],
        "restarts": record["restarts"],
        "reason": None,
    }


def saved_devices(directory: Path, worker: str, key: str) -> list[DeviceEnergy] | None:
    """The energy ``worker`` (lost for good) saved last: each device's up to its last saved
    reading, the reason saying so; None if it saved none."""
    saved = read_saved(directory, worker, key)
    if saved is None:
        return None
    why = (
        f"worker {worker} was lost during the run: its energy up to its last saved reading "
        "is counted, not after"
    )
    devices = []
    for counter in saved["counters"]:
        acc = Accumulator.resumed(counter["wrap_j"], counter["state"])
        measured = acc.record(counter["device"], saved["host"], counter["source"])
        devices.append(
            DeviceEnergy.from_dict({**measured.to_dict(), "reason": measured.reason or why})
        )
    return devices + [DeviceEnergy.from_dict(d) for d in saved["unmeasured"]]
