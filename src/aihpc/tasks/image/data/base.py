"""The common data-set interface: :class:`ImageData`, split datasets, stratified
split and per-channel normalisation.

Every data set in :mod:`aihpc.tasks.image.data` is returned as an :class:`ImageData`
whose ``train`` and ``val`` members are :class:`SplitDataset` objects
(``torch.utils.data.Dataset``) yielding ``(x, y)`` with ``x`` a float32
tensor of shape ``(C, H, W)`` and ``y`` an int64 scalar tensor.

Normalisation is per channel, ``(x - mean[c]) / std[c]``, with ``mean`` and
``std`` computed on the TRAIN split only (population std; a channel whose
std is 0 gets std 1).  The same float32 operation is applied sample by
sample in ``__getitem__`` and in bulk in :meth:`ImageData.tensors`, so both
give bit-identical values.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np
import torch
from torch.utils.data import Dataset

from aihpc.base.checks import integer
from aihpc.base.errors import ConfigError, DataError

#: Default limit for :meth:`ImageData.tensors` (bytes of float32 images).
DEFAULT_MAX_BYTES = 2 * 1024**3


def check_size(name: str, value: object) -> tuple[int, int]:
    """Parse an image size: an int ``s`` -> ``(s, s)``, or a pair ``(h, w)``; each >= 1."""
    if isinstance(value, (tuple, list)):
        if len(value) != 2:
            raise ConfigError(f"{name} must be an int or a pair (height, width), got {value!r}")
        return integer(f"{name} height", value[0], 1, terse=True, numpy=True), integer(
            f"{name} width", value[1], 1, terse=True, numpy=True
        )
    s = integer(name, value, 1, terse=True, numpy=True)
    return s, s


def stratified_split(
    labels: np.ndarray, val_fraction: float, seed: int
) -> tuple[np.ndarray, np.ndarray]:
    """Split sample indices into (train, val), stratified by class.

    The validation split gets ``round(N * val_fraction)`` samples in total,
    allocated to classes in proportion to their sizes (largest remainder,
    ties to the lower class id), never taking a class's last sample, so
    every class present keeps at least one training sample.  Within a class
    the chosen samples are a seeded random permutation.  Both returned index
    arrays are sorted ascending (int64).  Deterministic in (labels, seed).

    Raises DataError when the validation split would be empty.
    """
    labels = np.asarray(labels, dtype=np.int64)
    n = labels.shape[0]
    order = np.argsort(labels, kind="stable")
    classes, counts = np.unique(labels, return_counts=True)
    quota = counts * val_fraction
    n_val = np.floor(quota).astype(np.int64)
    remaining = int(round(n * val_fraction)) - int(n_val.sum())
    if remaining > 0:
        # Largest remainder first; np.argsort is stable so ties keep class order.
        extra = np.argsort(-(quota - n_val), kind="stable")[:remaining]
        n_val[extra] += 1
    n_val = np.minimum(n_val, counts - 1)
    if int(n_val.sum()) == 0:
        raise DataError(
            f"val_fraction={val_fraction} leaves an empty validation split for {n} samples "
            f"in {len(classes)} classes"
        )
    rng = np.random.default_rng([int(seed), 0x5B117])
    train_parts, val_parts = [], []
    start = 0
    for count, k in zip(counts, n_val, strict=True):
        members = order[start : start + count]
        start += count
        perm = rng.permutation(members)
        val_parts.append(perm[:k])
        train_parts.append(perm[k:])
    train = np.sort(np.concatenate(train_parts)).astype(np.int64)
    val = np.sort(np.concatenate(val_parts)).astype(np.int64)
    return train, val


def channel_stats(batches: Iterable[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Per-channel mean and population std over batches of shape (N, C, H, W).

    Accumulates in float64, merging per-batch means and squared deviations
    (Chan et al.), so large offsets do not cancel.  A channel with std 0
    (constant) gets std 1.  Returns two float64 arrays of shape (C,).
    """
    count = 0
    mean: np.ndarray | None = None
    m2: np.ndarray | None = None
    for batch in batches:
        b = np.asarray(batch, dtype=np.float64)
        n_b = b.shape[0] * b.shape[2] * b.shape[3]
        if n_b == 0:
            continue
        mean_b = b.mean(axis=(0, 2, 3))
        m2_b = np.square(b - mean_b[None, :, None, None]).sum(axis=(0, 2, 3))
        if mean is None or m2 is None:
            count, mean, m2 = n_b, mean_b, m2_b
            continue
        delta = mean_b - mean
        total = count + n_b
        mean = mean + delta * (n_b / total)
        m2 = m2 + m2_b + np.square(delta) * (count * n_b / total)
        count = total
    if mean is None or m2 is None:
        raise DataError("cannot compute channel statistics of an empty training split")
    std = np.sqrt(m2 / count)
    std[std <= 1e-12 * np.maximum(1.0, np.abs(mean))] = 1.0
    return mean, std


class Normalizer:
    """The per-channel affine ``(x - mean) / std`` in float32 (identity if None)."""

    def __init__(self, mean: np.ndarray | None, std: np.ndarray | None) -> None:
        if mean is None or std is None:
            self.mean = self.std = None
        else:
            self.mean = torch.as_tensor(np.asarray(mean), dtype=torch.float32).view(-1, 1, 1)
            self.std = torch.as_tensor(np.asarray(std), dtype=torch.float32).view(-1, 1, 1)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        """Normalise a (C, H, W) or (N, C, H, W) float32 tensor (returns a new tensor)."""
        if self.mean is None or self.std is None:
            return x
        return (x - self.mean) / self.std

    def apply_(self, x: torch.Tensor) -> torch.Tensor:
        """Same as ``__call__`` (bit for bit) but in place, to spare memory on big batches."""
        if self.mean is None or self.std is None:
            return x
        return x.sub_(self.mean).div_(self.std)


class SplitDataset(Dataset[tuple[torch.Tensor, torch.Tensor]]):
    """One split (train or val) of a data set.

    Subclasses implement :meth:`raw` (un-normalised float32 images for a
    batch of positions in this split) and set ``labels`` (int64 numpy array,
    one per sample of the split; may be a property) and ``sample_shape``
    (C, H, W); lazy ones override ``__len__`` and :meth:`label`.
    ``__getitem__(i)`` returns ``(normalised x (C,H,W) float32, y int64)``.
    """

    labels: np.ndarray
    sample_shape: tuple[int, int, int]
    normalizer: Normalizer = Normalizer(None, None)
    dtype = np.float32  # of raw(): what staging reads (aihpc.train.staging)

    def __len__(self) -> int:
        return int(self.labels.shape[0])

    def label(self, positions: np.ndarray) -> np.ndarray:
        """Labels (int64) at split ``positions``."""
        result: np.ndarray = self.labels[positions]
        return result

    def raw(self, positions: np.ndarray) -> np.ndarray:
        """Un-normalised images at split ``positions``: a new float32 array (n, C, H, W)."""
        raise NotImplementedError

    def raw_single(self, position: int) -> np.ndarray:
        """Un-normalised image at one split position: float32 (C, H, W)."""
        result: np.ndarray = self.raw(np.array([position], dtype=np.int64))[0]
        return result

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        n = len(self)
        i = int(index)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError(f"index {index} out of range for split of {n} samples")
        x = torch.from_numpy(np.ascontiguousarray(self.raw_single(i), dtype=np.float32))
        y = int(self.label(np.array([i], dtype=np.int64))[0])
        return self.normalizer(x), torch.tensor(y, dtype=torch.int64)

    def nbytes(self) -> int:
        """Bytes the whole split takes as a float32 tensor."""
        c, h, w = self.sample_shape
        return len(self) * c * h * w * 4

    def materialize(self, max_bytes: int = DEFAULT_MAX_BYTES) -> tuple[torch.Tensor, torch.Tensor]:
        """Whole split as ``(X float32 (N,C,H,W) normalised, y int64 (N,))``."""
        need = self.nbytes()
        if need > max_bytes:
            raise DataError(
                f"split of {len(self)} samples of shape {self.sample_shape} needs "
                f"{need / 2**20:.1f} MiB as float32, over max_bytes={max_bytes} "
                f"({max_bytes / 2**20:.1f} MiB); iterate the Dataset instead or raise max_bytes"
            )
        positions = np.arange(len(self), dtype=np.int64)
        x = torch.from_numpy(np.ascontiguousarray(self.raw(positions), dtype=np.float32))
        y = torch.from_numpy(np.ascontiguousarray(self.label(positions), dtype=np.int64))
        return self.normalizer.apply_(x), y


class ArraySplit(SplitDataset):
    """A split backed by an in-memory float32 array (N_all, C, H, W) and indices."""

    def __init__(self, images: np.ndarray, labels: np.ndarray, indices: np.ndarray) -> None:
        self.images = images
        self.indices = np.asarray(indices, dtype=np.int64)
        self.labels = np.asarray(labels, dtype=np.int64)[self.indices]
        self.sample_shape = tuple(int(s) for s in images.shape[1:])  # type: ignore[assignment]
        self.normalizer = Normalizer(None, None)

    def raw(self, positions: np.ndarray) -> np.ndarray:
        result: np.ndarray = self.images[self.indices[positions]]
        return result


@dataclass
class ImageData:
    """An image-classification data set split into train and val.

    ``train``/``val`` yield ``(x float32 (C,H,W), y int64)``.  ``mean``/``std``
    are the per-channel statistics applied by normalisation (computed on the
    train split; ``(0,..)``/``(1,..)`` when ``normalize=False``).  ``skipped``
    lists ``(path, reason)`` for corrupt files left out with ``skip_corrupt``.
    ``stats_from`` is how many train samples the statistics were computed on
    (all of them unless a lazy data set capped it with ``stats_samples``).
    """

    name: str
    train: SplitDataset
    val: SplitDataset
    num_classes: int
    input_shape: tuple[int, int, int]
    classes: list[str]
    mean: tuple[float, ...]
    std: tuple[float, ...]
    skipped: list[tuple[str, str]] = field(default_factory=list)
    stats_from: int = 0
    source: str = ""

    @property
    def num_train(self) -> int:
        """Number of training samples."""
        return len(self.train)

    @property
    def num_val(self) -> int:
        """Number of validation samples."""
        return len(self.val)

    @property
    def num_skipped(self) -> int:
        """Number of corrupt files skipped."""
        return len(self.skipped)

    def split(self, split: str) -> SplitDataset:
        """The dataset for ``split`` ('train' or 'val')."""
        if split == "train":
            return self.train
        if split == "val":
            return self.val
        raise ConfigError(f"split must be 'train' or 'val', got {split!r}")

    def tensors(
        self, split: str, max_bytes: int = DEFAULT_MAX_BYTES
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The whole split as normalised tensors ``(X (N,C,H,W) float32, y (N,) int64)``.

        Materialises a fresh copy on each call (generating or decoding the
        samples for lazy data sets); keep the result rather than calling it
        per epoch.  Raises DataError if X would exceed ``max_bytes``.
        """
        return self.split(split).materialize(max_bytes)

    def describe(self) -> str:
        """A one-line human summary."""
        c, h, w = self.input_shape
        text = (
            f"{self.name}: {self.num_classes} classes, {c}x{h}x{w}, "
            f"{self.num_train} train / {self.num_val} val"
        )
        if self.source:
            text += f", {self.source}"
        if self.skipped:
            text += f", {len(self.skipped)} corrupt file(s) skipped"
        return text


def finish(
    name: str,
    train: SplitDataset,
    val: SplitDataset,
    *,
    classes: list[str],
    normalize: bool,
    seed: int,
    stats_samples: int | None = None,
    skipped: list[tuple[str, str]] | None = None,
    source: str = "",
    chunk: int = 1024,
) -> ImageData:
    """Compute train statistics, install the normaliser on both splits, wrap up.

    With ``stats_samples`` set and smaller than the train split, the
    statistics use that many train samples drawn by a seeded permutation
    (for lazy data sets where touching every sample is expensive);
    otherwise all train samples.  ``train``/``val`` must come with an
    identity normaliser; it is replaced here.
    """
    c = train.sample_shape[0]
    n = len(train)
    used = 0
    if normalize:
        if stats_samples is not None and stats_samples < n:
            rng = np.random.default_rng([int(seed), 0x57A75])
            positions = np.sort(rng.choice(n, size=stats_samples, replace=False))
        else:
            positions = np.arange(n, dtype=np.int64)
        used = int(positions.shape[0])
        batches = (train.raw(positions[i : i + chunk]) for i in range(0, used, chunk))
        mean, std = channel_stats(batches)
        normalizer = Normalizer(mean, std)
    else:
        mean, std = np.zeros(c), np.ones(c)
        normalizer = Normalizer(None, None)
    train.normalizer = normalizer
    val.normalizer = normalizer
    return ImageData(
        name=name,
        train=train,
        val=val,
        num_classes=len(classes),
        input_shape=train.sample_shape,
        classes=list(classes),
        mean=tuple(float(m) for m in mean),
        std=tuple(float(s) for s in std),
        skipped=list(skipped or []),
        stats_from=used,
        source=source,
    )
