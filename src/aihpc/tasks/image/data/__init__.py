"""Image-classification data sets behind one interface.

>>> from aihpc.tasks.image.data import load_dataset
>>> data = load_dataset("synthetic", num_samples=1000, image_size=16, difficulty=0.3)
>>> x, y = data.train[0]            # float32 (3, 16, 16), int64
>>> X, Y = data.tensors("train")    # whole split, normalised, for batch indexing

Data sets (see each module's docstring):

* ``digits``      scikit-learn's bundled 8x8 handwritten digits (real data).
* ``synthetic``   procedurally generated, any size / resolution / classes,
                  lazily generated per index, tunable ``difficulty``.
* ``imagefolder`` ``root/<class>/*.jpg|png`` (ImageNet layout), lazy decoding.
* ``npz``         arrays ``x``, ``y`` (optionally ``x_val``, ``y_val``,
                  ``classes``) from a ``.npz`` file.

Common arguments: ``val_fraction`` (in (0, 1); ignored when the data set
brings its own validation split), ``seed`` (int >= 0; the split and the
synthetic data depend on it), ``normalize`` (per-channel mean/std computed on
the train split), ``skip_corrupt`` (imagefolder: skip and record unreadable
files instead of raising).  Everything else is a data-set specific option.
"""

from __future__ import annotations

import importlib
import os
from typing import Any

from aihpc.base.checks import check_fraction, integer
from aihpc.base.errors import ConfigError
from aihpc.tasks.image.data.base import DEFAULT_MAX_BYTES, ImageData, SplitDataset

__all__ = [
    "DATASETS",
    "DEFAULT_MAX_BYTES",
    "ImageData",
    "SplitDataset",
    "describe",
    "load_dataset",
    "names",
]

#: name -> (module with ``load(path, *, val_fraction, seed, normalize, skip_corrupt, **options)``,
#: one-line description).  Modules are imported on first use.
DATASETS: dict[str, tuple[str, str]] = {
    "digits": (
        "aihpc.tasks.image.data.digits",
        "scikit-learn's 1797 handwritten digits, 1x8x8, 10 classes",
    ),
    "synthetic": (
        "aihpc.tasks.image.data.synthetic",
        "procedurally generated images of any size, lazily per index, tunable difficulty",
    ),
    "imagefolder": (
        "aihpc.tasks.image.data.imagefolder",
        "root/<class>/*.jpg|png folders (ImageNet layout)",
    ),
    "npz": ("aihpc.tasks.image.data.npz", "arrays x, y [, x_val, y_val, classes] from a .npz file"),
}


def names() -> list[str]:
    """Names of the registered data sets, sorted."""
    return sorted(DATASETS)


def describe(name: str) -> str:
    """One-line description of the registered data set ``name``."""
    _check_name(name)
    return f"{name}: {DATASETS[name][1]}"


def _check_name(name: object) -> None:
    if name not in DATASETS:
        raise ConfigError(f"unknown data set {name!r}; valid: {', '.join(names())}")


def load_dataset(
    name: str,
    *,
    path: str | os.PathLike[str] | None = None,
    val_fraction: float = 0.2,
    seed: int = 0,
    normalize: bool = True,
    skip_corrupt: bool = False,
    **options: Any,
) -> ImageData:
    """Load data set ``name`` split into train/val.

    Returns an :class:`ImageData`.  Raises ConfigError for an unknown name,
    an unknown or invalid option, ``val_fraction`` outside (0, 1) or a
    negative seed; DataError for missing, empty or corrupt data.
    """
    _check_name(name)
    val_fraction = check_fraction(val_fraction)
    integer("seed", seed, 0)
    module = importlib.import_module(DATASETS[name][0])
    data: ImageData = module.load(
        path,
        val_fraction=val_fraction,
        seed=seed,
        normalize=bool(normalize),
        skip_corrupt=bool(skip_corrupt),
        **options,
    )
    return data
