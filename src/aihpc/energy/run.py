"""The energy of ``aihpc run``: meters started on every worker at the run's start, gathered at its
end.

The master keeps the gathered block in the run store's meta (``energy``), so
that ``aihpc verify`` rebuilds results.json's ``energy`` from the store; the
operations per joule are computed from it and the run's operations when
results.json is built (:func:`aihpc.records.energy.energy_results`).

Operations per joule are given only when every device that trained was
measured: each worker's GPU on a GPU run, each host's CPU packages on a CPU
run (the CPU's DRAM, and the CPUs of a GPU run, are added where readable).
Otherwise they are ``None`` and ``reason`` says which device was not
measured and why; a device measured is never estimated, only left out.
Nothing here may lose the run: every failure becomes a ``reason``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from aihpc.energy.meter import SAMPLE_INTERVAL_S, DeviceEnergy


@dataclass(frozen=True)
class EnergySession:
    """The meters of one run: its key on the workers, and what each worker said when it started."""

    key: str
    device_kind: str  # "cuda" or "cpu": what trains
    # worker address -> start_meter's answer
    started: dict[str, dict[str, Any]] = field(default_factory=dict)
    reason: str | None = None  # why nothing was started


def start_energy(
    executor, key: str, device: str, device_kind: str, powercap_root: str | None = None
) -> EnergySession:
    """Start a meter on every worker alive now; RAPL on the first worker (by address) of each
    host."""
    from aihpc.energy.worker import start_meter, worker_identity

    try:
        identities = executor.run_on_each(worker_identity)
        readers: dict[str, str] = {}
        for ident in identities:
            readers.setdefault(ident["host"], ident["worker"])
        answers = executor.run_on_each(
            start_meter, key, device, sorted(readers.values()), powercap_root
        )
    except Exception as exc:  # energy is beside the score: never a reason to lose the run
        return EnergySession(
            key, device_kind, reason=f"the energy meters did not start: {type(exc).__name__}: {exc}"
        )
    return EnergySession(key, device_kind, {a["worker"]: a for a in answers})


def unmeasured_block(reason: str) -> dict[str, Any]:
    """The store's energy block of a run with no measurement at all."""
    return {"devices": [], "complete": False, "reason": reason, "interval_s": SAMPLE_INTERVAL_S}


def finish_energy(executor, session: EnergySession, procs_per_trial: int = 1) -> dict[str, Any]:
    """Stop every meter; the block kept in the store's meta (see the module docstring)."""
    from aihpc.energy.worker import stop_meter

    if session.reason:
        return unmeasured_block(session.reason)
    try:
        reports = {r["worker"]: r for r in executor.run_on_each(stop_meter, session.key)}
    except Exception as exc:
        return unmeasured_block(f"the energy meters could not be read: {type(exc).__name__}: {exc}")
    devices = [
        d
        for worker, start in sorted(session.started.items())
        for d in _worker_devices(start, reports.get(worker))
    ]
    return {
        "devices": [d.to_dict() for d in devices],
        **coverage(devices, session, procs_per_trial),
        "interval_s": SAMPLE_INTERVAL_S,
    }


def _worker_devices(start: dict[str, Any], report: dict[str, Any] | None) -> list[DeviceEnergy]:
    """A worker's devices at the run's end; those it metered, unmeasured with the reason, if it was
    lost."""
    if report is not None and report["devices"] is not None:
        return [DeviceEnergy.from_dict(d) for d in report["devices"]]
    why = (
        report["reason"]
        if report is not None
        else f"worker {start['worker']} was lost during the run"
    )
    lost = [
        DeviceEnergy.unmeasured(m["device"], start["host"], m["source"], why)
        for m in start["metered"]
    ]
    return lost + [DeviceEnergy.from_dict(d) for d in start.get("unmeasured") or []]


def coverage(
    devices: list[DeviceEnergy], session: EnergySession, procs_per_trial: int
) -> dict[str, Any]:
    """``complete`` when every device that trained was measured; ``reason`` names what was not."""
    missing = [f"{d.host} {d.device}: {d.reason}" for d in devices if d.joules is None]
    reset = [
        f"{d.host} {d.device}: its counter restarted {d.resets} time(s); its joules are a lower "
        "bound"
        for d in devices
        if d.resets
    ]
    if session.device_kind == "cuda":
        trained = [d for d in devices if d.source == "nvml"]
        complete = len(trained) == len(session.started) and all(
            d.joules is not None for d in trained
        )
        if procs_per_trial > 1:
            complete = False
            missing.append(
                f"procs_per_trial {procs_per_trial}: only each worker's first GPU is metered"
            )
    else:
        trained = [d for d in devices if d.source == "rapl"]
        complete = bool(trained) and all(d.joules is not None for d in trained)
    complete = complete and not reset
    notes = list(dict.fromkeys(missing + reset))
    return {"complete": complete, "reason": "; ".join(notes) if notes else None}
