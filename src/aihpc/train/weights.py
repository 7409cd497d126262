"""Weight files: each trial-epoch's model and optimizer state, written where it was trained.

A worker writes the weights its epoch ends with to the run's weight
directory, ``trial<T>-epoch<E>-try<A>.pt`` — a file per attempt, so a lost
attempt that still finishes can never overwrite the one the master
committed — atomically, and returns the file's name and SHA-256 digest (a
:class:`~aihpc.records.task.WeightsRef`).  Whoever reads a file checks the
digest first: a file changed or cut short since is an error that names it,
never weights silently trained from.  The master keeps only the references;
it never reads or writes weights, so its work per epoch does not grow with
the model.  The run directory must therefore be on a file system every
worker sees (on a cluster: the shared scratch or home file system).

A file holds ``{"model": state_dict, "optimizer": state_dict | None}``,
saved with ``torch.save`` on the CPU and loaded with ``weights_only=True``.

Writing does not stall training (:class:`SnapshotWriter`): the state is
copied to host memory at once (into pinned memory on a GPU, queued behind
the training steps, so the host does not wait for it), and a background
thread serialises, hashes and writes the file while the epoch's validation
runs; the epoch returns its result only once the file is written, so every
epoch the master commits has its file, with the same SHA-256 check, and
``--resume`` is exact.
"""

from __future__ import annotations

import hashlib
import io
import random
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import torch

from aihpc.errors import StorageError
from aihpc.fileio import atomic_open
from aihpc.records.task import EpochTask, Morph, WeightsRef


def file_name(trial_id: int, epoch: int, attempt: int) -> str:
    return f"trial{trial_id}-epoch{epoch}-try{attempt}.pt"


def save(
    directory: Path, name: str, model: dict[str, Any], optimizer: dict[str, Any] | None
) -> WeightsRef:
    """Write one weight file atomically, hashing the bytes as they are written; returns its
    reference."""
    with atomic_open(Path(directory) / name) as f:
        out = _HashingWriter(f)
        # torch.save writes to any object with write(); its stub asks for IO[bytes]
        torch.save({"model": model, "optimizer": optimizer}, out)  # type: ignore[arg-type]
    return WeightsRef(name, out.sha256.hexdigest())


class _HashingWriter:
    """A file's ``write``, passing every byte through SHA-256 on the way (no second copy of the file
    in memory)."""

    def __init__(self, f) -> None:
        self.f = f
        self.sha256 = hashlib.sha256()

    def write(self, data) -> int:
        self.sha256.update(data)
        return self.f.write(data)

    def flush(self) -> None:
        self.f.flush()


class SnapshotWriter:
    """Writes weight files in a background thread, from host copies made when the write starts.

    :meth:`start` copies the state at once and returns a future of the
    file's :class:`WeightsRef`; the caller may then change the model, and
    must take the result before it trusts the file exists.  One write at a
    time: a write starts only after the one before it has finished.
    """

    def __init__(self) -> None:
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="aihpc-weights")
        self._last: Future | None = None

    def start(
        self, directory: Path, name: str, model: dict[str, Any], optimizer: dict[str, Any] | None
    ) -> Future:
        if self._last is not None:
            self._last.exception()  # the last write is over (its error went to its own caller)
        copied = torch.cuda.Event() if _on_gpu(model) else None
        host_model, host_optimizer = host_copy(model), host_copy(optimizer)
        if copied is not None:
            copied.record()  # after the copies, on the stream that queued them
        self._last = self._pool.submit(
            self._write, directory, name, host_model, host_optimizer, copied
        )
        return self._last

    @staticmethod
    def _write(directory: Path, name: str, model, optimizer, copied) -> WeightsRef:
        if copied is not None:
            copied.synchronize()  # the copies to pinned memory have landed
        return save(directory, name, model, optimizer)


def host_copy(obj: Any) -> Any:
    """``obj`` (nested dicts, lists, tuples of tensors) with every tensor copied to host memory.

    A GPU tensor goes to pinned memory without waiting (the copy is queued
    on the current stream: synchronise before reading it); a CPU tensor is
    cloned, since the model it belongs to trains on.
    """
    if isinstance(obj, torch.Tensor):
        t = obj.detach()
        if t.is_cuda:
            return torch.empty_like(t, device="cpu", pin_memory=True).copy_(t, non_blocking=True)
        return t.clone()
    if isinstance(obj, dict):
        return {k: host_copy(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(host_copy(v) for v in obj)
    return obj


def _on_gpu(state: dict[str, Any]) -> bool:
    return any(isinstance(t, torch.Tensor) and t.is_cuda for t in state.values())


def load(directory: Path, ref: WeightsRef) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """The (model, optimizer) state dicts of ``ref``; StorageError if missing, unreadable or
    changed."""
    path = Path(directory) / ref.name
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise StorageError(f"cannot read weight file {path}: {exc.strerror or exc}") from None
    digest = hashlib.sha256(data).hexdigest()
    if digest != ref.digest:
        raise StorageError(
            f"weight file {path} has changed since it was written: SHA-256 {digest[:16]}…, "
            f"expected {ref.digest[:16]}…"
        )
    content = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    return content["model"], content["optimizer"]


def starting_state(task: EpochTask) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """The (model, optimizer) state ``task`` starts from; (None, None) for a fresh
    initialisation."""
    if task.start is not None:
        return load(Path(task.weights_dir), task.start)
    if task.morph is not None:
        return morphed_state(task.morph, task.arch, Path(task.weights_dir)), None
    return None, None


def morphed_state(morph: Morph, arch: dict[str, Any], directory: Path) -> dict[str, Any]:
    """A child's starting weights: its parent's, carried through the morph recipe.

    The replayed architecture must be the child's (``arch``): a mismatch
    means master and worker disagree on the morphisms and is an error.
    """
    from aihpc.nas.build import SpecNet
    from aihpc.nas.morphism import random_plan
    from aihpc.nas.spec import ArchSpec

    spec = ArchSpec.from_dict(morph.parent_arch)
    if morph.parent_weights is not None:
        state = load(directory, morph.parent_weights)[0]
    else:
        torch.manual_seed(morph.parent_seed)
        state = SpecNet(spec).state_dict()
    rng = random.Random(morph.seed)
    for _ in range(morph.steps):
        spec, apply, _ = random_plan(spec, rng, morph.max_params)
        state = apply(state)
    child = ArchSpec.from_dict(arch)
    if spec.content_hash() != child.content_hash():
        raise ValueError(
            f"the morph recipe gives architecture {spec.content_hash()[:12]}, "
            f"not the child's {child.content_hash()[:12]}"
        )
    return state
