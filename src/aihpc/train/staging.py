"""Data staging: a worker's copy of the data set, in the form its epochs read, made once before the
run's clock.

MLPerf HPC times data staging apart from the run.  Each worker stages the
run's data set once, keeps it for all its epochs, into one of two tiers:

``device``
    each split whole, in one tensor allocated up front on the training
    device, in the staging dtype (bfloat16 on a GPU, the dtype autocast
    gives the first convolution anyway; float32 on the CPU).  Batches are
    gathered there, with no transfer per step.
``stream``
    for a data set the device cannot hold: each split staged once to a
    file in node-local storage (``stage_dir``, default the system's
    temporary folder, which batch systems usually put on the node), in the
    staging dtype and memory-mapped, so it sits in host memory (the page
    cache) where it fits and is read from the local disk where it does not.
    Epochs read it through a ``DataLoader`` whose worker processes gather
    the batches off the training thread (:mod:`aihpc.train.feed`).

``staging = "auto"`` (the default) takes ``device`` when the data set fits
in :data:`DEVICE_SHARE` of the device's free memory (on the CPU, of the
host memory available, divided among the workers that share it), else
``stream``; ``"device"`` and ``"stream"`` force a tier.

The task decides what is staged (:meth:`aihpc.tasks.base.Task.splits`,
``staging_dtype``): images, or a language model's token windows (int32).
Either tier is filled in chunks of about :data:`CHUNK_BYTES` of float32
samples: a pool of the worker's threads produces the chunks (generated,
decoded or read; images then normalised with the same float32 operation as
:meth:`aihpc.tasks.image.data.base.SplitDataset.materialize`, so the values are
bit-identical to it), and each is converted to the staging dtype and copied
into place, in order.  The host holds a few chunks in float32 at a time,
never a whole split: the data set's size is bounded by the device (or the
local disk), not by a limit on host memory.
"""

from __future__ import annotations

import hashlib
import math
import multiprocessing.util
import os
import re
import shutil
import tempfile
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict, TypeVar

import numpy as np
import torch

from aihpc.base.config import STAGING
from aihpc.base.errors import DataError
from aihpc.records.messages import DataRef

if TYPE_CHECKING:
    from aihpc.tasks import Split, Task

#: Share of the device's free memory (or of the host's available memory, on the
#: CPU) the ``device`` tier may fill.  The rest is the model's: a ResNet-50 step
#: at 3x128x128 and batch 512 keeps about 13 GB of bf16 activations, an eighth
#: of what half an 80 GB GPU leaves.
DEVICE_SHARE = 0.5
#: Float32 bytes of one chunk of images while staging (the host holds
#: threads + 1 chunks at most).
CHUNK_BYTES = 32 * 2**20
#: Data sets a worker keeps staged at once (a run uses one).
CACHED = 2

_STAGED: OrderedDict[tuple[DataRef, str], Staged] = OrderedDict()
_LOADS = 0  # data sets staged by this process (misses of stage's cache)
_DIR_PREFIX = "aihpc-stage-"

_In = TypeVar("_In")
_Out = TypeVar("_Out")


class StagingRecord(TypedDict):
    """What results.json keeps of one worker's (or rank's) staging (:meth:`Staged.record`)."""

    tier: str  # "device" or "stream"
    seconds: float  # wall time of the staging
    bytes: int  # of images (or tokens) and labels staged
    dtype: str  # the staging dtype, torch's name without "torch."


@dataclass(frozen=True)
class StagedSplit:
    """One split as staged: images ``x`` (N, C, H, W) in the staging dtype, labels ``y`` (N,) int64.

    On the ``device`` tier both are on the training device; on ``stream``
    they are in host memory, ``x`` mapped from the file ``path``.
    """

    x: torch.Tensor
    y: torch.Tensor
    path: str | None = None

    def __len__(self) -> int:
        return int(self.x.shape[0])

    @property
    def streamed(self) -> bool:
        return self.path is not None


@dataclass(frozen=True)
class Staged:
    """A worker's staged data set: both splits, the tier, and what staging cost."""

    train: StagedSplit
    val: StagedSplit
    tier: str  # "device" or "stream"
    seconds: float  # wall time of the staging

    @property
    def nbytes(self) -> int:
        """Bytes of images and labels staged."""
        return sum(s.x.nbytes + s.y.nbytes for s in (self.train, self.val))

    def record(self) -> StagingRecord:
        """What results.json keeps of one worker's staging."""
        return {
            "tier": self.tier,
            "seconds": self.seconds,
            "bytes": self.nbytes,
            "dtype": str(self.train.x.dtype).removeprefix("torch."),
        }


def stage(
    kind: Task, ref: DataRef, device: str, share: int = 1, threads: int | None = None
) -> Staged:
    """The data set ``ref`` of task ``kind`` staged for ``device``, made on the first call and
    kept (per worker).

    ``share``: workers sharing this host's memory (for the CPU's ``auto``
    choice); ``threads``: the staging pool's threads (default torch's).
    Both apply to the first call only: later calls return what it staged.
    """
    global _LOADS
    key = (ref, str(device))
    if key in _STAGED:
        _STAGED.move_to_end(key)
        return _STAGED[key]
    while len(_STAGED) >= CACHED:
        _STAGED.popitem(last=False)
    staged = _stage(kind, ref, torch.device(device), share, threads or torch.get_num_threads())
    _STAGED[key] = staged
    _LOADS += 1
    return staged


def loads() -> int:
    """How many data sets this process has staged (each :func:`stage` that was not already
    cached)."""
    return _LOADS


def _stage(kind: Task, ref: DataRef, device: torch.device, share: int, threads: int) -> Staged:
    t0 = time.perf_counter()
    splits = kind.splits(ref)
    dtype = kind.staging_dtype(device)
    image_bytes = sum(len(s) * math.prod(s.sample_shape) for s in splits) * dtype.itemsize
    tier = choose_tier(ref.staging, image_bytes, device, share)
    folder = stage_folder(ref, image_bytes) if tier == "stream" else None
    staged = [
        stage_split(s, device, dtype, threads, folder / name if folder else None)
        for s, name in zip(splits, ("train", "val"), strict=True)
    ]
    return Staged(staged[0], staged[1], tier, time.perf_counter() - t0)


def choose_tier(mode: str, image_bytes: int, device: torch.device, share: int = 1) -> str:
    """The tier for ``image_bytes`` of staged images: ``mode`` unless it is ``auto`` (module
    docstring)."""
    if mode not in STAGING:
        raise DataError(f"staging must be one of {', '.join(STAGING)}, got {mode!r}")
    if mode != "auto":
        return mode
    return "device" if image_bytes <= device_budget(device, share) else "stream"


def device_budget(device: torch.device, share: int = 1) -> int:
    """Bytes the ``device`` tier may fill: :data:`DEVICE_SHARE` of the free device (or available
    host) memory."""
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        return int(free * DEVICE_SHARE)
    import psutil

    return int(psutil.virtual_memory().available * DEVICE_SHARE / max(1, share))


def stage_split(
    split: Split, device: torch.device, dtype: torch.dtype, threads: int, path: Path | None
) -> StagedSplit:
    """One split into a tensor allocated up front: on ``device``, or (``path`` given) in a mapped
    file."""
    shape = (len(split), *split.sample_shape)
    labels = torch.from_numpy(
        np.ascontiguousarray(split.label(np.arange(len(split), dtype=np.int64)), dtype=np.int64)
    )
    if path is None:
        x = torch.empty(shape, dtype=dtype, device=device)
        fill(split, x, threads)
        return StagedSplit(x, labels.to(device))
    x = mapped_tensor(path, shape, dtype, create=True)
    fill(split, x, threads)
    return StagedSplit(x, labels, str(path))


def fill(split: Split, out: torch.Tensor, threads: int) -> None:
    """Write ``split``'s normalised images into ``out`` (N, C, H, W; any dtype and device), chunk by
    chunk.

    ``threads`` produce the chunks side by side; they are copied in order,
    each converted to ``out``'s dtype on the host first (half the bytes to
    move when staging bfloat16).
    """
    n = len(split)
    per = max(1, CHUNK_BYTES // (4 * math.prod(split.sample_shape)))
    chunks = [(i, min(i + per, n)) for i in range(0, n, per)]

    def produce(chunk: tuple[int, int]) -> torch.Tensor:
        positions = np.arange(*chunk, dtype=np.int64)
        x = torch.from_numpy(np.ascontiguousarray(split.raw(positions), dtype=split.dtype))
        if split.normalizer is not None:  # images; a language model's tokens are staged as read
            x = split.normalizer.apply_(x)
        return x.to(out.dtype)

    with ThreadPoolExecutor(max(1, threads), thread_name_prefix="aihpc-stage") as pool:
        made = bounded_map(pool, produce, chunks, ahead=max(1, threads) + 1)
        for (i, j), x in zip(chunks, made, strict=True):
            out[i:j].copy_(x)


def bounded_map(
    pool: ThreadPoolExecutor, fn: Callable[[_In], _Out], items: Sequence[_In], ahead: int
) -> Iterator[_Out]:
    """``pool.map(fn, items)`` in order, with at most ``ahead`` results in flight (bounded
    memory)."""
    pending: list[Future[_Out]] = []
    for item in items:
        pending.append(pool.submit(fn, item))
        if len(pending) >= ahead:
            yield pending.pop(0).result()
    for future in pending:
        yield future.result()


# -- the stream tier's files ----------------------------------------------------------------
def mapped_tensor(
    path: Path, shape: tuple[int, ...], dtype: torch.dtype, create: bool = False
) -> torch.Tensor:
    """A tensor of ``shape`` backed by the file ``path`` (shared mapping: writes go to the file)."""
    numel = math.prod(shape)
    if create:
        with open(path, "wb") as f:
            f.truncate(numel * dtype.itemsize)
    return torch.from_file(str(path), shared=True, size=numel, dtype=dtype).view(shape)


def stage_folder(ref: DataRef, nbytes: int) -> Path:
    """This process's folder for the stream tier's files, under ``ref.stage_dir`` (or the temporary
    folder).

    Checked for free space first (a DataError naming the folder and the
    sizes); removed when the process exits, and folders of processes that
    no longer exist are removed here.
    """
    root = Path(ref.stage_dir or tempfile.gettempdir())
    try:
        root.mkdir(parents=True, exist_ok=True)
        free = shutil.disk_usage(root).free
    except OSError as exc:
        raise DataError(f"cannot stage data to {root}: {exc.strerror or exc}") from None
    if free < nbytes:
        raise DataError(
            f"staging the data set needs {nbytes / 2**30:.2f} GiB in {root}, "
            f"which has {free / 2**30:.2f} GiB free; give stage_dir a folder with room"
        )
    remove_stale_folders(root)
    key = hashlib.sha256(repr(ref).encode()).hexdigest()[:12]
    folder = root / f"{_DIR_PREFIX}{os.getpid()}-{key}"
    folder.mkdir(exist_ok=True)
    # Removed by multiprocessing's exit hook, which runs at a normal exit as atexit does and also
    # where atexit does not: in a Dask worker forked from a server process, which ends with
    # os._exit (aihpc.launch.dask_settings).
    multiprocessing.util.Finalize(None, shutil.rmtree, args=(folder, True), exitpriority=0)
    return folder


def remove_stale_folders(root: Path) -> None:
    """Remove stream-tier folders under ``root`` left by processes that no longer run."""
    pattern = re.compile(re.escape(_DIR_PREFIX) + r"(\d+)-[0-9a-f]+$")
    for folder in root.glob(f"{_DIR_PREFIX}*"):
        match = pattern.match(folder.name)
        if match and not _alive(int(match.group(1))):
            shutil.rmtree(folder, ignore_errors=True)


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True
