"""The master's side of the worker-to-device rule (:mod:`aihpc.machine.devices`): slots sent,
the mapping recorded.

Once the workers are up, the master asks each one its host and the GPUs it
is given (``CUDA_VISIBLE_DEVICES``), gives every worker its slot among the
workers of its host that see the same GPUs (:func:`aihpc.machine.devices.host_slots`),
and sends the slots to the workers as a Dask worker plugin: it reaches
every worker now, and a worker its nanny restarts under the same name, before
it runs a task.  Then each worker describes the devices its processes
train on; that list is results.json's ``devices``.  A worker that joins
later (a batch job that started late) is placed the same way when the
master sees it, before it is given a task, and keeps a slot no placed
worker has.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from distributed.diagnostics.plugin import WorkerPlugin

from aihpc.base.errors import WorkersLost
from aihpc.machine.devices import assign, describe, host_slots, identity

if TYPE_CHECKING:
    from distributed import Worker

    from aihpc.launch.interface import Executor

RULE = (
    "a worker trains on the GPUs its CUDA_VISIBLE_DEVICES gives it; with P per trial, its "
    "processes take "
    "slot*P .. slot*P+P-1 of them, slot being its index by name among the workers of its host "
    "that see the same GPUs (a worker that joins later: the lowest slot none of them has)"
)

#: How long placing the run's workers waits for one to answer, when every worker alive left while
#: it was asked (dropped as silent, its nanny starting it again under a new address), in seconds.
PLACE_WAIT_SECONDS = 60.0


class DeviceSlots(WorkerPlugin):
    """Gives each worker it names the slot the master chose; a worker it does not name is left as
    it is (slot 0 where no other of these plugins names it).

    The workers placed together share one plugin, numbered by ``batch``: one that joins later
    gets a plugin of its own, and the workers placed before are not sent theirs again.
    """

    def __init__(self, slots: dict[str, int], per_slot: int, batch: int = 0) -> None:
        self.name = f"aihpc-device-slots-{batch}"
        self.slots = dict(slots)
        self.per_slot = per_slot

    def setup(self, worker: Worker) -> None:
        slot = self.slots.get(str(worker.name))
        if slot is not None:
            assign(slot, self.per_slot)


class Placement:
    """The run's workers on their devices, kept as workers join: results.json's ``devices``.

    ``kind`` is the tasks' device (``cpu``, ``cuda`` or ``auto``), ``procs``
    the processes per trial.  Only workers not asked before are asked, out
    of band (:meth:`~aihpc.launch.interface.Executor.ask_each`): a worker that
    joins while the others train is placed at once, not after their epochs,
    and the workers already placed are not asked again.
    """

    def __init__(self, executor: Executor, kind: str, procs: int) -> None:
        self.executor, self.kind, self.procs = executor, kind, procs
        self.asked: set[str] = set()  # the addresses of the workers asked so far
        self.identities: dict[str, dict[str, str | None]] = {}  # every worker placed, by name
        self.slots: dict[str, int] = {}
        self.records: dict[str, dict[str, Any]] = {}
        self.batches = 0  # the DeviceSlots plugins sent

    def place(self, wait: float = PLACE_WAIT_SECONDS) -> dict[str, Any]:
        """Place the workers alive now (when the run starts); returns the mapping.

        Where every worker alive left while it was asked, the workers that join in the next
        ``wait`` seconds are asked in turn (a worker its nanny started again has a new address);
        WorkersLost if none answers by then.
        """
        deadline = time.monotonic() + wait
        self.joined()
        while not self.records:
            if time.monotonic() >= deadline:
                raise WorkersLost(
                    f"no worker was alive to place on a device (none answered within {wait:.0f} s)"
                )
            time.sleep(0.2)
            self.joined()
        return self.mapping()

    def joined(self) -> dict[str, Any] | None:
        """Place the workers alive now that are not placed yet: send them their slots, and have
        them describe their devices.  Returns the mapping, or None if no worker is new (a worker
        its nanny restarted keeps its name, and its slot)."""
        fresh = sorted(self.executor.alive().keys() - self.asked)
        if not fresh:
            return None
        self.asked.update(fresh)
        alive = self.executor.ask_each(identity, workers=fresh)
        new = sorted(alive.keys() - self.identities.keys())
        if not new:
            return None
        self.identities.update((name, alive[name]) for name in new)
        self.slots = host_slots(self.identities, self.slots)
        slots = {name: self.slots[name] for name in new}
        self.executor.register_plugin(DeviceSlots(slots, self.procs, self.batches))
        self.batches += 1
        described = self.executor.ask_each(describe, self.kind, self.procs, workers=fresh)
        self.records.update((n, {"worker": n, **described[n]}) for n in new if n in described)
        return self.mapping()

    def mapping(self) -> dict[str, Any]:
        """Every worker placed so far, sorted by name, and the rule."""
        workers = [self.records[name] for name in sorted(self.records)]
        return {"rule": RULE, "procs_per_worker": self.procs, "workers": workers}
