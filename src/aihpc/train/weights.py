"""Weight files: each trial-epoch's model and optimizer state, written where it was trained.

A worker writes the weights its epoch ends with to the run's weight
directory, ``trial<T>-epoch<E>-try<A>.pt`` — a file per attempt, so a lost
attempt that still finishes can never overwrite the one the master
committed — atomically, and returns the file's name and SHA-256 digest (a
:class:`~aihpc.records.messages.WeightsRef`).  Whoever reads a file checks the
digest first: a file changed or cut short since is an error that names it,
never weights silently trained from.  The master keeps only the references;
it never reads or writes weights, so its work per epoch does not grow with
the model.  The run directory must therefore be on a file system every
worker sees (on a cluster: the shared scratch or home file system).

A file holds ``{"model": state_dict, "optimizer": state_dict | None}``,
saved with ``torch.save`` on the CPU and loaded with ``weights_only=True``.
An optimizer's state is loaded by parameter name (:func:`load_optimizer`):
a child's first epoch starts from its parent's weights and, with
``carry_optimizer``, its parent's optimizer state, both carried through the
growth steps of its recipe (:func:`morphed_state`).

Writing does not stall training (:class:`SnapshotWriter`): the state is
copied to host memory at once (into pinned memory on a GPU, queued behind
the training steps, so the host does not wait for it), and a background
thread serialises, hashes and writes the file while the epoch's validation
runs; the epoch returns its result only once the file is written, so every
epoch the master commits has its file, with the same SHA-256 check, and
``--resume`` is exact.

Reading a file back is skipped where the worker wrote it itself
(:class:`StateCache`): the host copy the writer serialised is kept, by the
file's reference, and a later epoch or child starting from that file takes a
copy of it instead of reading, hashing and unpickling the file (with one
worker per GPU, a child's parent was always trained on its worker).
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import random
import threading
from collections import OrderedDict
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, BinaryIO

import torch

from aihpc.base.errors import StorageError
from aihpc.base.fileio import atomic_open
from aihpc.nas.moments import POWERS, ParamStates
from aihpc.records.messages import EpochTask, Morph, WeightsRef
from aihpc.tasks import Arch, Task

#: A state dict as torch makes and loads it: a model's (tensors by name) or an optimizer's
#: (nested dicts and lists of tensors and numbers).
State = dict[str, Any]


def file_name(trial_id: int, epoch: int, attempt: int) -> str:
    return f"trial{trial_id}-epoch{epoch}-try{attempt}.pt"


def save(directory: Path, name: str, model: State, optimizer: State | None) -> WeightsRef:
    """Write one weight file atomically, hashing the bytes as they are written; returns its
    reference.

    The file's SHA-256 guards it, so torch's own CRC-32 of each record (another pass over
    every byte) is not computed where torch lets it be skipped; the file loads alike.
    """
    with atomic_open(Path(directory) / name) as f, _without_crc32():
        out = _HashingWriter(f)
        # torch.save writes to any object with write(); its stub asks for IO[bytes]
        torch.save({"model": model, "optimizer": optimizer}, out)  # type: ignore[arg-type]
    return WeightsRef(name, out.sha256.hexdigest())


#: Chunks from this many bytes up are hashed in a second thread while they are written.
PARALLEL_HASH_BYTES = 1 << 20
_HASHER = ThreadPoolExecutor(1, thread_name_prefix="aihpc-sha256")


class _HashingWriter:
    """A file's ``write``, passing every byte through SHA-256 on the way (no second copy of the file
    in memory).  A large chunk (a tensor's storage) is hashed by another thread while this one
    writes it, both outside the GIL; ``write`` returns once both are done, in order, so the
    chunk (which torch may reuse afterwards) is read only while the call lasts."""

    def __init__(self, f: BinaryIO) -> None:
        self.f = f
        self.sha256 = hashlib.sha256()

    def write(self, data: bytes) -> int:
        if len(data) < PARALLEL_HASH_BYTES:
            self.sha256.update(data)
            return self.f.write(data)
        hashed = _HASHER.submit(self.sha256.update, data)
        try:
            return self.f.write(data)
        finally:
            hashed.result()

    def flush(self) -> None:
        self.f.flush()


@contextlib.contextmanager
def _without_crc32() -> Iterator[None]:
    """torch.save without its per-record CRC-32 (a setting since torch 2.6; nothing before)."""
    try:
        from torch.utils.serialization import config
    except ImportError:
        yield
        return
    before = config.save.compute_crc32
    config.save.compute_crc32 = False
    try:
        yield
    finally:
        config.save.compute_crc32 = before


#: Bytes of states a worker keeps in host memory (:class:`StateCache`) besides the last one it
#: wrote: 11 of the GPU default's ResNet-50 (181 MiB with its momentum), a whole population of
#: the CPU default's (2.2 MiB).
CACHE_BYTES = 2 * 2**30
#: ... and at most this share of the worker's memory limit, which the master's estimate of a
#: trial's memory counts as held (:mod:`aihpc.train.memory`).
CACHE_SHARE = 0.25


def cache_bytes(limit: int | None) -> int:
    """The bytes of states a worker with memory limit ``limit`` (None: none) keeps."""
    return CACHE_BYTES if not limit else min(CACHE_BYTES, int(CACHE_SHARE * limit))


class StateCache:
    """The states this worker wrote, in host memory, by their file's reference (least recently
    used out first past ``max_bytes``, :func:`cache_bytes` by default, but never the last one
    put, whatever its size: a child most often grows from the trial its worker just trained, and
    reading a large model's file back keeps the device waiting; thread-safe: the writer's thread
    puts, training gets).

    A state here is the very one its file was serialised from, so it needs no digest check; a
    file changed on disk afterwards is still caught by every other worker that reads it.
    :meth:`get` returns a copy: the model and optimizer that start from it train in place.
    """

    def __init__(self, max_bytes: int | None = None) -> None:
        # None: cache_bytes() of this worker's limit, read when the first state is put
        self.max_bytes = max_bytes
        self._states: OrderedDict[WeightsRef, tuple[State, State | None, int]] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = self.misses = 0

    def put(self, ref: WeightsRef, model: State, optimizer: State | None) -> None:
        size = _nbytes(model) + _nbytes(optimizer)
        if self.max_bytes is None:
            from aihpc.launch.memory import this_worker_limit

            self.max_bytes = cache_bytes(this_worker_limit())
        with self._lock:
            self._states[ref] = (model, optimizer, size)
            self._states.move_to_end(ref)
            total = sum(entry[2] for entry in self._states.values())
            while total > self.max_bytes and len(self._states) > 1:
                total -= self._states.popitem(last=False)[1][2]

    def get(self, ref: WeightsRef, optimizer: bool = True) -> tuple[State, State | None] | None:
        """A copy of the state of ``ref`` (None if not kept); without its optimizer's state
        (None in its place) unless ``optimizer``."""
        with self._lock:
            entry = self._states.get(ref)
            if entry is None:
                self.misses += 1
                return None
            self.hits += 1
            self._states.move_to_end(ref)
        return _clone(entry[0]), _clone(entry[1]) if optimizer else None


def _nbytes(obj: object) -> int:
    if isinstance(obj, torch.Tensor):
        return obj.numel() * obj.element_size()
    if isinstance(obj, dict):
        return sum(_nbytes(v) for v in obj.values())
    if isinstance(obj, (list, tuple)):
        return sum(_nbytes(v) for v in obj)
    return 0


def _clone(obj: Any) -> Any:
    if isinstance(obj, torch.Tensor):
        return obj.clone()
    if isinstance(obj, dict):
        return {k: _clone(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_clone(v) for v in obj)
    return obj


#: This worker process's states (:class:`SnapshotWriter` puts, :func:`load` gets).
STATES = StateCache()


class SnapshotWriter:
    """Writes weight files in a background thread, from host copies made when the write starts.

    :meth:`start` copies the state at once and returns a future of the
    file's :class:`WeightsRef`; the caller may then change the model, and
    must take the result before it trusts the file exists.  One write at a
    time: a write starts only after the one before it has finished.
    """

    def __init__(self, cache: StateCache = STATES) -> None:
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="aihpc-weights")
        self._last: Future[WeightsRef] | None = None
        self._cache = cache

    def start(
        self, directory: Path, name: str, model: State, optimizer: State | None
    ) -> Future[WeightsRef]:
        if self._last is not None:
            self._last.exception()  # the last write is over (its error went to its own caller)
        # torch leaves cuda.Event's constructor unannotated
        copied = torch.cuda.Event() if _on_gpu(model) else None  # type: ignore[no-untyped-call]
        host_model, host_optimizer = host_copy(model), host_copy(optimizer)
        if copied is not None:
            copied.record()  # after the copies, on the stream that queued them
        self._last = self._pool.submit(
            self._write, directory, name, host_model, host_optimizer, copied
        )
        return self._last

    def _write(
        self,
        directory: Path,
        name: str,
        model: State,
        optimizer: State | None,
        copied: torch.cuda.Event | None,
    ) -> WeightsRef:
        if copied is not None:
            copied.synchronize()  # the copies to pinned memory have landed
        ref = save(directory, name, model, optimizer)
        self._cache.put(ref, model, optimizer)
        return ref


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


def _on_gpu(state: State) -> bool:
    return any(isinstance(t, torch.Tensor) and t.is_cuda for t in state.values())


def load(directory: Path, ref: WeightsRef, optimizer: bool = True) -> tuple[State, State | None]:
    """The (model, optimizer) state dicts of ``ref``: this worker's copy where it wrote the file
    (:data:`STATES`; the optimizer's left out, None, unless ``optimizer``), else read from it;
    StorageError if missing, unreadable or changed."""
    kept = STATES.get(ref, optimizer)
    if kept is not None:
        return kept
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


def starting_state(kind: Task, task: EpochTask) -> tuple[State | None, State | None]:
    """The (model, optimizer) state ``task`` (of a trial of ``kind``) starts from; (None, None)
    for a fresh initialisation, and None for a fresh optimizer (a child without
    ``carry_optimizer``, or whose parent has no weight file yet)."""
    if task.start is not None:
        return load(Path(task.weights_dir), task.start)
    if task.morph is not None:
        directory = Path(task.weights_dir)
        return morphed_state(kind, task.morph, task.arch, directory, task.carry_optimizer)
    return None, None


def morphed_state(
    kind: Task,
    morph: Morph,
    arch: dict[str, Any],
    directory: Path,
    carry_optimizer: bool = True,
) -> tuple[State, State | None]:
    """A child's starting weights and optimizer state: its parent's, carried through the morph
    recipe by the task's growth steps (:meth:`aihpc.tasks.base.Task.plan`), the weights by
    each step's weight map and, with ``carry_optimizer``, the optimizer's state by its
    gradient map (:mod:`aihpc.nas.moments`), as an optimizer's ``state_dict()`` that names its
    parameters (:func:`load_optimizer` reads it).  The optimizer's state is None (a fresh
    optimizer) without ``carry_optimizer`` or where the parent has no weights yet (the seed
    network at its initialisation).

    The replayed architecture must be the child's (``arch``): a mismatch
    means master and worker disagree on the morphisms and is an error.
    """
    spec = kind.arch(morph.parent_arch)
    moments: ParamStates | None = None
    if morph.parent_weights is not None:
        state, optimizer = load(directory, morph.parent_weights, optimizer=carry_optimizer)
        if optimizer is not None:
            moments = named_states(optimizer, _parameter_shapes(kind, spec))
    else:
        torch.manual_seed(morph.parent_seed)
        state = kind.model(spec).state_dict()
    rng = random.Random(morph.seed)
    for _ in range(morph.steps):
        spec, growth, _ = kind.plan(spec, rng, morph.max_params)
        state = growth.weights(state)
        if moments is not None:
            moments = growth.moments(moments)
    child = kind.arch(arch)
    if spec.content_hash() != child.content_hash():
        raise ValueError(
            f"the morph recipe gives architecture {spec.content_hash()[:12]}, "
            f"not the child's {child.content_hash()[:12]}"
        )
    return state, None if moments is None else _named_state_dict(moments)


def load_optimizer(optimizer: torch.optim.Optimizer, model: torch.nn.Module, saved: State) -> None:
    """Load ``saved``, an optimizer's ``state_dict()`` (a weight file's, or
    :func:`morphed_state`'s), into ``optimizer``, built on ``model``, parameter by parameter
    name (:func:`named_states`).  ``optimizer`` keeps its own hyperparameters (its
    ``param_groups``: the trial's); StorageError where ``saved`` does not fit ``model``."""
    params = dict(model.named_parameters())
    by_name = named_states(saved, {name: tuple(p.shape) for name, p in params.items()})
    name_of = {id(p): name for name, p in params.items()}
    # torch numbers an optimizer's parameters through its groups in order, from 0
    order = [name_of[id(p)] for group in optimizer.param_groups for p in group["params"]]
    number = {name: i for i, name in enumerate(order)}
    own = optimizer.state_dict()["param_groups"]
    optimizer.load_state_dict(
        {"state": {number[n]: s for n, s in by_name.items()}, "param_groups": own}
    )


def named_states(saved: State, params: dict[str, tuple[int, ...]]) -> ParamStates:
    """The per-parameter states of ``saved``, an optimizer's ``state_dict()``, by parameter name:
    the names its groups list (``param_names``, as torch writes for an optimizer built on named
    parameters) or else, in order, those of ``params`` (the model's ``named_parameters()``: an
    optimizer built on ``model.parameters()``).  StorageError where they do not fit
    ``params``: another number of parameters, an unknown name, a moment of another shape."""
    groups = saved["param_groups"]
    numbers = [number for group in groups for number in group["params"]]
    if all("param_names" in group for group in groups):
        names = [name for group in groups for name in group["param_names"]]
    else:
        names = list(params)
        if len(numbers) != len(names):
            raise StorageError(
                f"the optimizer's state holds {len(numbers)} parameters, the model {len(names)}"
            )
    name_of = dict(zip(numbers, names, strict=True))
    out: ParamStates = {}
    for number, state in saved["state"].items():
        name = name_of.get(number)
        if name not in params:
            raise StorageError(f"the optimizer's state names parameter {name!r}, not the model's")
        for key, value in state.items():
            if key in POWERS and value is not None and tuple(value.shape) != params[name]:
                raise StorageError(
                    f"the optimizer's {key!r} of parameter {name!r} has shape "
                    f"{tuple(value.shape)}, the parameter {params[name]}"
                )
        out[name] = state
    return out


def _named_state_dict(states: ParamStates) -> State:
    """An optimizer's ``state_dict()`` holding ``states``, its parameters named."""
    names = list(states)
    return {
        "state": {i: states[name] for i, name in enumerate(names)},
        "param_groups": [{"params": list(range(len(names))), "param_names": names}],
    }


def _parameter_shapes(kind: Task, spec: Arch) -> dict[str, tuple[int, ...]]:
    """The shapes of a network of ``spec``'s parameters, by name in ``named_parameters()``'s
    order (built on the meta device: nothing allocated)."""
    with torch.device("meta"):
        model = kind.model(spec)
    return {name: tuple(p.shape) for name, p in model.named_parameters()}
