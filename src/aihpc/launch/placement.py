"""The master's side of the worker-to-device rule (:mod:`aihpc.machine.devices`): slots sent,
the mapping recorded.

Once the workers are up, the master asks each one its host and the GPUs it
is given (``CUDA_VISIBLE_DEVICES``), gives every worker its slot among the
workers of its host that see the same GPUs (:func:`aihpc.machine.devices.host_slots`),
and sends the slots to the workers as a Dask worker plugin: it reaches
every worker now, and a worker its nanny restarts under the same name, before
it runs a task.  Then each worker describes the devices its processes
train on; that list is results.json's ``devices``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from distributed.diagnostics.plugin import WorkerPlugin

from aihpc.base.errors import WorkersLost
from aihpc.machine.devices import assign, describe, host_slots, identity, worker_name

if TYPE_CHECKING:
    from distributed import Worker

    from aihpc.launch.interface import Executor

RULE = (
    "a worker trains on the GPUs its CUDA_VISIBLE_DEVICES gives it; with P per trial, its "
    "processes take "
    "slot*P .. slot*P+P-1 of them, slot being its index by name among the workers of its host "
    "that see the same GPUs"
)


class DeviceSlots(WorkerPlugin):
    """Gives each worker, by name, the slot the master chose (a worker not named gets none: slot
    0)."""

    name = "aihpc-device-slots"

    def __init__(self, slots: dict[str, int], per_slot: int) -> None:
        self.slots = dict(slots)
        self.per_slot = per_slot

    def setup(self, worker: Worker) -> None:
        assign(self.slots.get(str(worker.name)), self.per_slot)


def place_workers(executor: Executor, kind: str, procs: int) -> dict[str, Any]:
    """Assign the workers alive now their slots; returns the mapping, worker by worker (sorted by
    name).

    ``kind`` is the tasks' device (``cpu``, ``cuda`` or ``auto``), ``procs``
    the processes per trial.
    """
    identities = {ident.pop("worker"): ident for ident in executor.run_on_each(_identity)}
    slots = host_slots(identities)
    executor.register_plugin(DeviceSlots(slots, procs))
    records = sorted(executor.run_on_each(_describe, kind, procs), key=lambda r: str(r["worker"]))
    if not records:
        raise WorkersLost("no worker was alive to place on a device (all left after joining)")
    return {"rule": RULE, "procs_per_worker": procs, "workers": records}


def _identity() -> dict[str, Any]:
    return {"worker": worker_name(), **identity()}


def _describe(kind: str, procs: int) -> dict[str, Any]:
    return {"worker": worker_name(), **describe(kind, procs)}
