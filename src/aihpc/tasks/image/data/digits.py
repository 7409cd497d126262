"""``digits``: scikit-learn's bundled handwritten digits (real data, no download).

1797 grey-scale 8x8 images of the digits 0-9 (UCI optical recognition of
handwritten digits, as shipped inside scikit-learn).  Pixel values 0..16 are
scaled to [0, 1] (divided by 16) before normalisation.  Shape (1, 8, 8),
classes ``"0"`` .. ``"9"``.  No options.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from typing import Any

import numpy as np

from aihpc.base.checks import check_options
from aihpc.base.errors import ConfigError
from aihpc.tasks.image.data.base import ArraySplit, ImageData, finish, stratified_split


def load(
    path: str | os.PathLike[str] | None,
    *,
    val_fraction: float,
    seed: int,
    normalize: bool,
    skip_corrupt: bool,
    **options: Any,
) -> ImageData:
    """Load the digits, split stratified by ``seed``, normalise on the train split."""
    check_options("digits", options, ())
    if path is not None:
        raise ConfigError(
            f"data set 'digits' is bundled with scikit-learn and takes no path, got {path!r}"
        )
    table = np.loadtxt(_csv_path(), delimiter=",", dtype=np.float32)
    images = (table[:, :-1] / np.float32(16.0)).reshape(-1, 1, 8, 8)
    labels = table[:, -1].astype(np.int64)
    train_idx, val_idx = stratified_split(labels, val_fraction, seed)
    return finish(
        "digits",
        ArraySplit(images, labels, train_idx),
        ArraySplit(images, labels, val_idx),
        classes=[str(t) for t in range(10)],
        normalize=normalize,
        seed=seed,
        source="scikit-learn load_digits",
    )


def _csv_path() -> Path:
    """The digits file inside scikit-learn (as ``load_digits`` reads it), found without importing
    ``sklearn.datasets``, which takes about 3 s: rows of 64 pixels then the digit."""
    spec = importlib.util.find_spec("sklearn")
    if spec is None or not spec.submodule_search_locations:
        raise ConfigError("data set 'digits' needs scikit-learn, which is not installed")
    return Path(spec.submodule_search_locations[0], "datasets", "data", "digits.csv.gz")
