"""Which devices a worker trains on: one explicit rule, and the record of it.

The rule: **a worker uses the GPUs its own ``CUDA_VISIBLE_DEVICES`` gives
it**, which torch numbers ``0 .. n-1``; with ``P`` processes (GPUs) per
trial, its processes take ``slot*P .. slot*P+P-1`` of them, where ``slot``
is 0 unless the master assigned another.

* Workers aihpc starts on one node (the local GPU cluster of
  :mod:`aihpc.launch.executor`) each get their own ``CUDA_VISIBLE_DEVICES``
  (:func:`local_worker_envs`: worker ``i`` of a node with ``G`` GPUs and
  ``P`` per trial sees GPUs ``i*P .. i*P+P-1``), so each has slot 0.
* Workers that see the same set of GPUs with no such assignment
  (``--scheduler`` workers a user started, each seeing every GPU of its
  node) are told a slot by the master: their index among the workers of
  their host that see that same set, by sorted name (:func:`host_slots`),
  sent to each worker explicitly (:func:`assign`).  Nothing is parsed out of
  a worker's name.

On the CPU none of this applies: every process trains on the CPU.
:func:`resolve_device` is the one rule that turns a device name (``cpu``,
``cuda``, ``cuda:N``, ``auto``) into a device, for a worker and for every
command alike.
:func:`describe` is the record of where a worker's processes train
(results.json's ``devices``).
"""

from __future__ import annotations

import itertools
import os
import re
import socket
from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from aihpc.base.errors import ConfigError

# The slot the master assigned this worker process (see the module's docstring; None: none, slot 0),
# and the GPUs per slot (the run's processes per trial).
_SLOT: int | None = None
_PER_SLOT = 1


def assign(slot: int | None, per_slot: int = 1) -> None:
    """Runs on a worker: the master's slot for it (None: no assignment, slot 0), of ``per_slot``
    GPUs each."""
    global _SLOT, _PER_SLOT
    if slot is not None and slot < 0:
        raise ConfigError(f"a worker's device slot must be >= 0, got {slot}")
    if per_slot < 1:
        raise ConfigError(f"GPUs per slot must be >= 1, got {per_slot}")
    _SLOT, _PER_SLOT = slot, per_slot


def assigned_slot() -> int | None:
    return _SLOT


def gpu_indices(procs: int = 1) -> tuple[int, ...]:
    """The torch indices of the GPUs this worker's ``procs`` processes train on, rank by rank.

    ``slot*P + k`` for rank ``k`` (P: the GPUs per slot the master sent;
    the worker's own single-process work, a screening, takes its first GPU);
    past the GPUs visible it wraps around (several workers then share a GPU,
    as results.json's ``devices`` shows).
    """
    count = torch.cuda.device_count()
    if count == 0:
        raise ConfigError(
            "a GPU was asked for but CUDA sees none (CUDA_VISIBLE_DEVICES="
            f"{os.environ.get('CUDA_VISIBLE_DEVICES')!r})"
        )
    first = (_SLOT or 0) * _PER_SLOT
    return tuple((first + k) % count for k in range(procs))


DEVICE_NAMES = "cpu, cuda, cuda:N or auto"
"""The device names every command and task accepts (:func:`resolve_device`'s rule)."""


def device_kind(name: str | torch.device) -> str:
    """``cpu`` or ``cuda``: the kind of device ``name`` asks for, by :func:`resolve_device`'s
    rule."""
    return _parse(name)[0]


def resolve_device(name: str | torch.device, rank: int = 0, procs: int = 1) -> torch.device:
    """The device ``name`` asks for, for rank ``rank`` of this worker's ``procs`` processes.

    The one rule, for every command and every worker:

    * ``cpu``: the CPU;
    * ``cuda``: this worker's own GPU for that rank, ``slot*P + rank`` of the GPUs it sees
      (:func:`gpu_indices`); outside a worker, or with no slot assigned, GPU ``rank``;
    * ``cuda:N``: GPU ``N`` of the GPUs this process sees;
    * ``auto``: ``cuda`` where CUDA sees a GPU, else ``cpu``.

    Anything else, or a GPU this machine lacks, is a one-line :class:`ConfigError` naming the value.
    """
    kind, index = _parse(name)
    if kind == "cpu":
        return torch.device("cpu")
    if index is None:
        return torch.device("cuda", gpu_indices(procs)[rank])
    count = torch.cuda.device_count()
    if index >= count:
        raise ConfigError(f"device {str(name)!r}: this machine has {count} CUDA GPU(s)")
    return torch.device("cuda", index)


def _parse(name: str | torch.device) -> tuple[str, int | None]:
    """(kind, GPU index or None) of a device name; ConfigError for a name outside the rule."""
    text = str(name)
    if text == "auto":
        text = "cuda" if torch.cuda.is_available() else "cpu"
    match = re.fullmatch(r"cpu|cuda(?::(\d+))?", text)
    if match is None:
        raise ConfigError(f"device must be {DEVICE_NAMES}, got {str(name)!r}")
    if text == "cpu":
        return "cpu", None
    if not torch.cuda.is_available():
        raise ConfigError(f"device {str(name)!r} requested but CUDA is not available")
    return "cuda", None if match[1] is None else int(match[1])


def visible_gpus() -> list[str]:
    """This process's GPUs as ``CUDA_VISIBLE_DEVICES`` names them (indices or UUIDs); all of them if
    unset."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        return [str(i) for i in range(torch.cuda.device_count())]
    return [d.strip() for d in visible.split(",") if d.strip()]


def local_worker_envs(workers: int, per_worker: int, gpus: Sequence[str]) -> list[dict[str, str]]:
    """The environment of each of ``workers`` local GPU workers: worker i sees
    ``gpus[i*P : i*P+P]``."""
    if workers * per_worker > len(gpus):
        raise ConfigError(
            f"{workers} workers of {per_worker} GPUs need {workers * per_worker} GPUs, "
            f"got {len(gpus)} ({','.join(gpus) or 'none'})"
        )
    return [
        {"CUDA_VISIBLE_DEVICES": ",".join(gpus[i * per_worker : (i + 1) * per_worker])}
        for i in range(workers)
    ]


def identity() -> dict[str, str | None]:
    """Runs on a worker: what decides its slot (its host, and the GPUs it is given, None: all)."""
    return {"host": socket.gethostname(), "visible": os.environ.get("CUDA_VISIBLE_DEVICES")}


def host_slots(
    identities: Mapping[str, Mapping[str, str | None]], placed: Mapping[str, int] | None = None
) -> dict[str, int]:
    """Each worker's slot: its index among the workers of its host seeing the same GPUs.

    ``identities``: worker name -> :func:`identity`, for every worker
    placed so far and those to place.  Workers in ``placed`` (name -> slot)
    keep their slots; the others take, by sorted name, the lowest slots of
    their group that no placed worker has.  Placed all at once, the slot is
    the index by sorted name.  Workers with a set of GPUs of their own are
    alone in their group (slot 0).
    """
    placed = placed or {}
    groups: dict[tuple[str | None, str | None], list[str]] = defaultdict(list)
    for name, ident in identities.items():
        groups[(ident["host"], ident["visible"])].append(name)
    slots: dict[str, int] = {}
    for names in groups.values():
        taken = {placed[n] for n in names if n in placed}
        free = (i for i in itertools.count() if i not in taken)
        new = sorted((n for n in names if n not in placed), key=_natural)
        slots.update({n: placed[n] for n in names if n in placed})
        slots.update({n: next(free) for n in new})
    return slots


def describe(kind: str, procs: int = 1) -> dict[str, Any]:
    """Runs on a worker: its host, slot and, rank by rank, the device it trains on (a GPU's name,
    UUID, bus id)."""
    devices = [_device_record(resolve_device(kind, rank, procs)) for rank in range(procs)]
    return {**identity(), "slot": _SLOT, "devices": devices}


def _device_record(device: torch.device) -> dict[str, Any]:
    if device.type != "cuda":
        return {"device": str(device)}
    props: Any = torch.cuda.get_device_properties(device)
    bus = getattr(props, "pci_bus_id", None)  # fields newer torch builds have
    pci = (
        f"{props.pci_domain_id:04x}:{bus:02x}:{props.pci_device_id:02x}.0"
        if bus is not None
        else None
    )
    uuid = getattr(props, "uuid", None)
    return {
        "device": str(device),
        "name": props.name,
        "uuid": f"GPU-{uuid}" if uuid is not None else None,
        "pci_bus_id": pci,
    }


def training_dtype(device: torch.device) -> torch.dtype:
    """The dtype a worker computes in on ``device``: bfloat16 on a GPU (the trainer's autocast),
    float32 elsewhere.

    The data are staged in it, and the run's peak is measured in it.
    """
    return torch.bfloat16 if device.type == "cuda" else torch.float32


def worker_address() -> str:
    """This Dask worker's address; ``local`` outside a worker (a test, the master)."""
    try:
        from distributed import get_worker

        return get_worker().address
    except (ImportError, ValueError):
        return "local"


def worker_name() -> str:
    """This worker's Dask name, or host:pid outside Dask."""
    try:
        from distributed import get_worker

        return str(get_worker().name)
    except (ImportError, ValueError):
        return f"{socket.gethostname()}:{os.getpid()}"


def _natural(name: str) -> tuple[Any, ...]:
    """Sort key putting ``w-2`` before ``w-10``."""
    return tuple(int(p) if p.isdigit() else p for p in re.split(r"(\d+)", name))
