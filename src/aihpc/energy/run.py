"""The energy of ``aihpc run``: meters started on every worker at the run's start, gathered at its
end.

The master keeps the gathered block in the run store's meta (``energy``), so
that ``aihpc verify`` rebuilds results.json's ``energy`` from the store; the
operations per joule are computed from it and the run's operations when
results.json is built (:func:`aihpc.records.energy.energy_results`).

A worker's meter survives its worker (:mod:`aihpc.energy.worker`): one its
nanny restarted goes on from the readings it saved, its energy measured over
the whole run; one lost for good is counted up to its last saved reading,
and says so.  Operations per joule are given only when every device that
trained was measured over the whole run: each worker's GPU on a GPU run,
each host's CPU packages on a CPU run (the CPU's DRAM, and the CPUs of a GPU
run, are added where readable).  Otherwise they are ``None`` and ``reason``
says which device was not measured, or only in part, and why; a device
measured is never estimated, only left out.  Nothing here may lose the run:
every failure becomes a ``reason``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from aihpc.energy.meter import SAMPLE_INTERVAL_S, DeviceEnergy


class Workers(Protocol):
    """What the meters need of the run's executor (:class:`aihpc.launch.executor.DaskExecutor`,
    a package beside this one, not imported): a question to every worker, a plugin on each."""

    def ask_each(self, fn: Callable[..., Any], *args: Any) -> dict[str, Any]: ...

    def register_plugin(self, plugin: Any) -> None: ...


@dataclass(frozen=True)
class EnergySession:
    """The meters of one run: its key on the workers, the folder where they save their readings,
    and what each worker said when it started."""

    key: str
    device_kind: str  # "cuda" or "cpu": what trains
    directory: Path | None = None  # where the meters save their readings (the run's energy folder)
    # worker name -> what its meter reads and cannot (aihpc.energy.worker.meter_started)
    started: dict[str, dict[str, Any]] = field(default_factory=dict)
    reason: str | None = None  # why nothing was started


def start_energy(
    executor: Workers,
    key: str,
    device: str,
    device_kind: str,
    directory: Path,
    powercap_root: str | None = None,
) -> EnergySession:
    """Start a meter on every worker alive now, and on any that starts later or again (a worker
    plugin); RAPL on the first worker (by name) of each host.  The meters save their readings in
    ``directory``, which every worker must see."""
    from aihpc.energy.worker import EnergyMeters, meter_started, worker_host

    try:
        Path(directory).mkdir(parents=True, exist_ok=True)
        hosts = executor.ask_each(worker_host)
        readers: dict[str, str] = {}
        for name in sorted(hosts):
            readers.setdefault(hosts[name], name)
        plugin = EnergyMeters(key, device, sorted(readers.values()), str(directory), powercap_root)
        executor.register_plugin(plugin)
        answers = executor.ask_each(meter_started, key)
    except Exception as exc:  # energy is beside the score: never a reason to lose the run
        return EnergySession(
            key,
            device_kind,
            directory,
            reason=f"the energy meters did not start: {type(exc).__name__}: {exc}",
        )
    started = {name: answer for name, answer in answers.items() if answer is not None}
    return EnergySession(key, device_kind, directory, started)


def unmeasured_block(reason: str) -> dict[str, Any]:
    """The store's energy block of a run with no measurement at all."""
    return {
        "devices": [],
        "complete": False,
        "reason": reason,
        "notes": [],
        "interval_s": SAMPLE_INTERVAL_S,
    }


def finish_energy(
    executor: Workers, session: EnergySession, procs_per_trial: int = 1
) -> dict[str, Any]:
    """Stop every meter; the block kept in the store's meta (see the module docstring).  A worker
    whose meter does not answer is counted from the readings it saved."""
    from aihpc.energy.worker import stop_meter

    if session.reason:
        return unmeasured_block(session.reason)
    notes = []
    try:
        # out of band, beside whatever a worker still runs (an epoch the master gave up on at
        # the run's end): the meters stop as the run ends, and nothing waits for that task
        answers = executor.ask_each(stop_meter, session.key).values()
        reports = {r["worker"]: r for r in answers}
    except Exception as exc:
        reports = {}
        notes.append(f"the meters did not answer ({type(exc).__name__}: {exc})")
    devices = [
        d
        for worker, start in sorted(session.started.items())
        for d in _worker_devices(session, worker, start, reports.get(worker))
    ]
    restarted = sorted(w for w, r in reports.items() if r.get("restarts"))
    if restarted:
        notes.append(
            f"worker(s) {', '.join(restarted)} restarted during the run; their meters went on "
            "from the readings they saved"
        )
    return {
        "devices": [d.to_dict() for d in devices],
        **coverage(devices, session, procs_per_trial),
        "notes": notes,
        "interval_s": SAMPLE_INTERVAL_S,
    }


def _worker_devices(
    session: EnergySession, worker: str, start: dict[str, Any], report: dict[str, Any] | None
) -> list[DeviceEnergy]:
    """A worker's devices at the run's end: those its meter measured; if it did not answer, those
    it saved (each up to its last saved reading); else unmeasured, with the reason."""
    from aihpc.energy.worker import saved_devices

    if report is not None and report["devices"] is not None:
        return [DeviceEnergy.from_dict(d) for d in report["devices"]]
    saved = saved_devices(session.directory, worker, session.key) if session.directory else None
    if saved is not None:
        return saved
    why = report["reason"] if report is not None else f"worker {worker} was lost during the run"
    why += ", and saved no readings"
    lost = [
        DeviceEnergy.unmeasured(m["device"], start["host"], m["source"], why)
        for m in start["metered"]
    ]
    return lost + [DeviceEnergy.from_dict(d) for d in start.get("unmeasured") or []]


def coverage(
    devices: list[DeviceEnergy], session: EnergySession, procs_per_trial: int
) -> dict[str, Any]:
    """``complete`` when every device that trained was measured over the whole run; ``reason``
    names what was not, or only in part."""
    missing = [f"{d.host} {d.device}: {d.reason}" for d in devices if d.reason]
    reset = [
        f"{d.host} {d.device}: its counter restarted {d.resets} time(s); its joules are a lower "
        "bound"
        for d in devices
        if d.resets
    ]
    if session.device_kind == "cuda":
        trained = [d for d in devices if d.source == "nvml"]
        complete = len(trained) == len(session.started) and all(
            d.joules is not None and d.reason is None for d in trained
        )
        if procs_per_trial > 1:
            complete = False
            missing.append(
                f"procs_per_trial {procs_per_trial}: only each worker's first GPU is metered"
            )
    else:
        trained = [d for d in devices if d.source == "rapl"]
        complete = bool(trained) and all(d.joules is not None and d.reason is None for d in trained)
    complete = complete and not reset
    notes = list(dict.fromkeys(missing + reset))
    return {"complete": complete, "reason": "; ".join(notes) if notes else None}
