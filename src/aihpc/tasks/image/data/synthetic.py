"""``synthetic``: procedurally generated image classification of any size.

The workload that grows with the machine: any number of samples, classes,
channels and resolution, generated on demand and deterministic by seed.

Model
-----
Each class ``k`` has a *prototype*, a smooth (C, H, W) image made of seeded
random structure: oriented sinusoidal gratings (class-specific frequency,
orientation, phase and colour) plus Gaussian blobs (position, width,
colour).  The prototype is a mix of a class-specific pattern and one
pattern shared by all classes::

    proto_k = unit((1 - s) * specific_k + s * common),   s = SIMILARITY * difficulty

where ``unit`` scales to zero mean and unit std.  Sample ``i`` has label
``k = i % num_classes`` (so labels are balanced to within one) and is::

    x_i = 0.5 + 0.25 * (a_i * (P_k + r_i * P_j) + b_i + sigma * noise_i)

where ``P`` are the prototypes under one random integer shift of up to
``max(1, min(H, W) // 16)`` pixels per axis, ``a_i`` in [0.7, 1.3] a
contrast, ``b_i`` in [-0.3, 0.3] a brightness offset, ``j`` a random other
class whose prototype is overlaid with weight ``r_i ~ U(0, DISTRACT *
difficulty)`` (a distractor, which unlike pixel noise does not average out
at high resolution), and ``noise_i`` independent uniform noise of unit
variance per pixel scaled by ``sigma = NOISE * difficulty``.

So ``difficulty`` in [0, 1] controls how alike the classes are, how strong
the distractor is and how noisy the pixels are: 0 is trivially separable,
1 is hard but still above chance.  Larger images carry more signal, so the
same difficulty is somewhat easier at higher resolution.  Measured
validation accuracy of sklearn logistic regression (2000 samples, 10
classes) at difficulty 0 / 0.25 / 0.5 / 0.75 / 1:

    1x8x8    1.00  0.88  0.59  0.29  0.13
    3x16x16  1.00  1.00  0.99  0.75  0.18
    3x32x32  1.00  1.00  0.99  0.84  0.27

Split
-----
Train is global indices ``0 .. N - n_val - 1`` and val the last ``n_val =
round(N * val_fraction)``.  Samples are independent draws keyed by (seed,
index), so a contiguous split is as random as any; labels ``i % K`` make it
stratified to within one sample per class, and it costs no memory.

Determinism
-----------
Prototypes depend on (seed, class, C, H, W) only.  Every random number of
sample ``i`` comes from a counter-based hash (SplitMix64) of
``(seed, i, stream, element)``, computed with integer arithmetic and
float32 multiply/adds only, so sample ``i`` is bit-identical whether it is
generated alone (``__getitem__``) or inside a vectorised batch
(``tensors()``), on any worker, in any order; nothing is stored per sample.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator
from typing import Any

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from aihpc.base.checks import check_fraction, check_options, integer, number
from aihpc.base.errors import ConfigError, DataError
from aihpc.tasks.image.data.base import ImageData, SplitDataset, check_size, finish

#: Options accepted by ``load_dataset("synthetic", ...)``.
OPTIONS = (
    "num_samples",
    "num_classes",
    "channels",
    "height",
    "width",
    "image_size",
    "difficulty",
    "stats_samples",
)

#: Largest class similarity (at difficulty 1).
SIMILARITY = 0.9
#: Largest weight of the distractor overlay relative to the own prototype (at difficulty 1).
DISTRACT = 1.5
#: Largest noise std relative to the unit-std prototype (at difficulty 1).
NOISE = 2.0

_GRATINGS = 4
_BLOBS = 2
_MASK64 = np.uint64(0xFFFFFFFFFFFFFFFF)
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)


def _mix(z: np.ndarray) -> np.ndarray:
    """SplitMix64 finaliser on a uint64 array (wrapping arithmetic, in place safe)."""
    z = z ^ (z >> np.uint64(30))
    z = z * _M1
    z = z ^ (z >> np.uint64(27))
    z = z * _M2
    result: np.ndarray = z ^ (z >> np.uint64(31))
    return result


def _uniform_pairs(keys: np.ndarray, count: int, stream: int) -> np.ndarray:
    """``2 * ceil(count/2)`` uniforms in [0, 1) per key: float32 (len(keys), >= count).

    Each 64-bit hash of ``(key, stream, j)`` gives two 24-bit uniforms.
    """
    half = (count + 1) // 2
    with np.errstate(over="ignore"):
        j = (np.arange(half, dtype=np.uint64) + np.uint64(1)) * _GOLDEN
        base = _mix(keys ^ np.uint64((stream * 0xD1B54A32D192ED03) & 0xFFFFFFFFFFFFFFFF))
        h = _mix(base[:, None] + j[None, :])
    out = np.empty((keys.shape[0], 2 * half), dtype=np.float32)
    scale = np.float32(2.0**-24)
    out[:, 0::2] = (h >> np.uint64(40)).astype(np.float32) * scale
    out[:, 1::2] = ((h >> np.uint64(8)) & np.uint64(0xFFFFFF)).astype(np.float32) * scale
    return out


def _unit(a: np.ndarray) -> np.ndarray:
    """Scale to zero mean, unit std (float64)."""
    a = a - a.mean()
    return a / max(float(a.std()), 1e-12)


def _pattern(
    rng: np.random.Generator, channels: int, yy: np.ndarray, xx: np.ndarray, fmax: float
) -> np.ndarray:
    """One random smooth pattern (C, Hp, Wp) in float64, zero mean, unit std."""
    out = np.zeros((channels,) + yy.shape)
    for _ in range(_GRATINGS):
        freq = rng.uniform(1.0, fmax)
        theta = rng.uniform(0.0, math.pi)
        phase = rng.uniform(0.0, 2 * math.pi)
        amp = rng.uniform(0.5, 1.0)
        colour = rng.normal(size=channels)
        wave = np.cos(2 * math.pi * freq * (xx * math.cos(theta) + yy * math.sin(theta)) + phase)
        out += amp * colour[:, None, None] * wave[None]
    for _ in range(_BLOBS):
        cy, cx = rng.uniform(-0.35, 0.35, size=2)
        width = rng.uniform(0.08, 0.25)
        amp = rng.uniform(1.0, 2.0) * rng.choice([-1.0, 1.0])
        colour = rng.normal(size=channels)
        blob = np.exp(-((yy - cy) ** 2 + (xx - cx) ** 2) / (2 * width**2))
        out += amp * colour[:, None, None] * blob[None]
    return _unit(out)


class SyntheticGenerator:
    """Deterministic generator of samples by global index.

    ``generate(indices)`` -> float32 (n, C, H, W) raw (un-normalised) images;
    ``label(indices)`` -> int64 labels ``indices % num_classes``.
    """

    def __init__(
        self, num_classes: int, shape: tuple[int, int, int], difficulty: float, seed: int
    ) -> None:
        c, h, w = shape
        self.num_classes = num_classes
        self.shape = shape
        self.difficulty = difficulty
        self.seed = seed
        self.margin = max(1, min(h, w) // 16)
        m = self.margin
        yy, xx = np.meshgrid(
            (np.arange(h + 2 * m) - m + 0.5) / h - 0.5,
            (np.arange(w + 2 * m) - m + 0.5) / w - 0.5,
            indexing="ij",
        )
        # Frequencies up to ~ a third of the Nyquist limit of the smaller side.
        fmax = max(1.5, min(5.0, min(h, w) / 3.0))
        sim = SIMILARITY * difficulty
        common = _pattern(np.random.default_rng([seed, c, h, w, 1 << 20]), c, yy, xx, fmax)
        protos = []
        for k in range(num_classes):
            specific = _pattern(np.random.default_rng([seed, c, h, w, k]), c, yy, xx, fmax)
            protos.append(_unit((1.0 - sim) * specific + sim * common))
        #: Padded prototypes (K, C, H + 2m, W + 2m), float32.
        self.prototypes = np.stack(protos).astype(np.float32)
        # View (K, C, 2m+1, 2m+1, H, W): every shifted H x W window of each prototype.
        self._windows = sliding_window_view(self.prototypes, (h, w), axis=(2, 3))
        self.sigma = np.float32(NOISE * difficulty)
        self.distract = np.float32(DISTRACT * difficulty)
        self._key = _mix(np.array([seed & 0xFFFFFFFFFFFFFFFF], dtype=np.uint64))[0]

    def __getstate__(self) -> dict[str, Any]:
        # The window view would pickle as a full (K, C, 2m+1, 2m+1, H, W) copy.
        state = dict(self.__dict__)
        del state["_windows"]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        _, h, w = self.shape
        self._windows = sliding_window_view(self.prototypes, (h, w), axis=(2, 3))

    def shifted_templates(self) -> Iterator[np.ndarray]:
        """Every shift's prototypes as flat float64 rows: yields ``(K, C*H*W)`` arrays.

        ``z = (x_raw - 0.5) / 0.25`` of a sample is ``contrast * (P_k + r * P_j)
        + brightness + noise`` for one of these arrays ``P``.
        """
        k = self.num_classes
        for dy in range(2 * self.margin + 1):
            for dx in range(2 * self.margin + 1):
                yield self._windows[:, :, dy, dx].reshape(k, -1).astype(np.float64)

    def describe(self) -> dict[str, Any]:
        """The generative model's parameters (for results.json)."""
        return {
            "model": (
                "prototype + distractor overlay + offset + uniform pixel noise "
                "(aihpc.tasks.image.data.synthetic)"
            ),
            "num_classes": self.num_classes,
            "shape": list(self.shape),
            "difficulty": self.difficulty,
            "class_similarity": SIMILARITY * self.difficulty,
            "distractor_max_weight": float(self.distract),
            "noise_std": float(self.sigma),
            "max_shift_pixels": self.margin,
        }

    def label(self, indices: np.ndarray) -> np.ndarray:
        """Labels of global sample indices: ``indices % num_classes`` (int64)."""
        return np.asarray(indices, dtype=np.int64) % self.num_classes

    def generate(self, indices: np.ndarray) -> np.ndarray:
        """Raw float32 images (n, C, H, W) for global sample ``indices`` (int64)."""
        idx = np.asarray(indices, dtype=np.int64)
        c, h, w = self.shape
        m = self.margin
        with np.errstate(over="ignore"):
            keys = _mix(idx.astype(np.uint64) * _GOLDEN + self._key)
        params = _uniform_pairs(keys, 6, stream=1)
        dy = np.minimum((params[:, 0] * (2 * m + 1)).astype(np.int64), 2 * m)
        dx = np.minimum((params[:, 1] * (2 * m + 1)).astype(np.int64), 2 * m)
        contrast = np.float32(0.7) + np.float32(0.6) * params[:, 2]
        bright = np.float32(0.6) * params[:, 3] - np.float32(0.3)
        labels = self.label(idx)
        k = self.num_classes
        other = (labels + 1 + np.minimum((params[:, 4] * (k - 1)).astype(np.int64), k - 2)) % k
        weight = self.distract * params[:, 5] * contrast
        img = self._windows[labels, :, dy, dx]  # (n, C, H, W), a copy
        img *= contrast[:, None, None, None]
        if self.distract > 0:
            img += weight[:, None, None, None] * self._windows[other, :, dy, dx]
        img += bright[:, None, None, None]
        if self.sigma > 0:
            size = c * h * w
            noise = _uniform_pairs(keys, size, stream=2)[:, :size].reshape(-1, c, h, w)
            noise -= np.float32(0.5)
            noise *= np.float32(math.sqrt(12.0)) * self.sigma
            img += noise
        img *= np.float32(0.25)
        img += np.float32(0.5)
        return img


class SyntheticSplit(SplitDataset):
    """A split of the synthetic data set: the global indices ``start .. stop-1``.

    Holds no per-sample memory; ``labels`` builds the full label array on
    demand (O(N)), ``label(positions)`` does not.
    """

    def __init__(self, generator: SyntheticGenerator, start: int, stop: int) -> None:
        self.generator = generator
        self.start = int(start)
        self.stop = int(stop)
        self.sample_shape = generator.shape

    def __len__(self) -> int:
        return self.stop - self.start

    @property
    def labels(self) -> np.ndarray:  # type: ignore[override]
        return self.label(np.arange(len(self), dtype=np.int64))

    def label(self, positions: np.ndarray) -> np.ndarray:
        return self.generator.label(self.start + np.asarray(positions, dtype=np.int64))

    def raw(self, positions: np.ndarray) -> np.ndarray:
        positions = np.asarray(positions, dtype=np.int64)
        out = np.empty((len(positions),) + self.sample_shape, dtype=np.float32)
        step = max(1, (1 << 22) // max(1, int(np.prod(self.sample_shape))))  # ~16 MiB chunks
        for i in range(0, len(positions), step):
            out[i : i + step] = self.generator.generate(self.start + positions[i : i + step])
        return out


def _image_size(options: dict[str, Any]) -> tuple[int, int]:
    """The images' height and width: ``image_size`` (int or (h, w)), or ``height`` and ``width``
    (32 each by default), never both ways."""
    if "image_size" in options:
        if "height" in options or "width" in options:
            raise ConfigError("give either image_size or height/width for 'synthetic', not both")
        return check_size("image_size", options["image_size"])
    h = integer("height", options.get("height", 32), 1, terse=True, numpy=True)
    w = integer("width", options.get("width", 32), 1, terse=True, numpy=True)
    return h, w


def _validation_samples(n: int, k: int, val_fraction: float) -> int:
    """How many of ``n`` samples of ``k`` classes the validation split takes; a split that leaves
    either side too small is refused."""
    if n < k:
        raise ConfigError(f"num_samples must be >= num_classes ({k}), got {n}")
    n_val = int(round(n * val_fraction))
    if n_val < 1:
        raise DataError(
            f"val_fraction={val_fraction} leaves an empty validation split for num_samples={n}"
        )
    if n - n_val < k:
        raise DataError(
            f"num_samples={n} with val_fraction={val_fraction} leaves {n - n_val} training "
            f"samples, fewer than num_classes={k}"
        )
    return n_val


def load(
    path: str | os.PathLike[str] | None,
    *,
    val_fraction: float,
    seed: int,
    normalize: bool,
    skip_corrupt: bool,
    **options: Any,
) -> ImageData:
    """Build the synthetic data set; see the module docstring for the model.

    Options: ``num_samples`` (default 10000), ``num_classes`` (10, >= 2),
    ``channels`` (3), ``height``/``width`` (32) or ``image_size`` (int or
    (h, w); not together with height/width), ``difficulty`` (0.3, in
    [0, 1]), ``stats_samples`` (the normalisation statistics use at most
    this many seeded-random train samples; default 2048, down to 256 for
    images of more than 4096 values).
    """
    check_options("synthetic", options, OPTIONS)
    if path is not None:
        raise ConfigError(f"data set 'synthetic' takes no path, got {path!r}")
    val_fraction = check_fraction(val_fraction)
    n = integer("num_samples", options.get("num_samples", 10000), 2, terse=True, numpy=True)
    k = integer("num_classes", options.get("num_classes", 10), 2, terse=True, numpy=True)
    c = integer("channels", options.get("channels", 3), 1, terse=True, numpy=True)
    h, w = _image_size(options)
    difficulty = options.get("difficulty", 0.3)
    number("difficulty", difficulty, 0, 1, finite=False, terse=True)
    default_stats = min(2048, max(256, (1 << 23) // (c * h * w)))
    stats_samples = integer(
        "stats_samples", options.get("stats_samples", default_stats), 1, terse=True, numpy=True
    )
    n_val = _validation_samples(n, k, val_fraction)
    gen = SyntheticGenerator(k, (c, h, w), float(difficulty), int(seed))
    return finish(
        "synthetic",
        SyntheticSplit(gen, 0, n - n_val),
        SyntheticSplit(gen, n - n_val, n),
        classes=[f"class_{i}" for i in range(k)],
        normalize=normalize,
        seed=seed,
        stats_samples=stats_samples,
        source=f"difficulty {float(difficulty):g}, seed {seed}",
    )
