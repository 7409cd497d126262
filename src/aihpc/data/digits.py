"""``digits``: scikit-learn's bundled handwritten digits (real data, no download).

1797 grey-scale 8x8 images of the digits 0-9 (UCI optical recognition of
handwritten digits, as shipped inside scikit-learn).  Pixel values 0..16 are
scaled to [0, 1] (divided by 16) before normalisation.  Shape (1, 8, 8),
classes ``"0"`` .. ``"9"``.  No options.
"""

from __future__ import annotations

import numpy as np

from aihpc.data.base import ArraySplit, ImageData, check_options, finish, stratified_split
from aihpc.errors import ConfigError


def load(
    path, *, val_fraction: float, seed: int, normalize: bool, skip_corrupt: bool, **options
) -> ImageData:
    """Load the digits, split stratified by ``seed``, normalise on the train split."""
    check_options("digits", options, ())
    if path is not None:
        raise ConfigError(
            f"data set 'digits' is bundled with scikit-learn and takes no path, got {path!r}"
        )
    from sklearn.datasets import load_digits

    bunch = load_digits()
    images = (np.asarray(bunch.images, dtype=np.float32) / np.float32(16.0))[:, None, :, :]
    labels = np.asarray(bunch.target, dtype=np.int64)
    train_idx, val_idx = stratified_split(labels, val_fraction, seed)
    return finish(
        "digits",
        ArraySplit(images, labels, train_idx),
        ArraySplit(images, labels, val_idx),
        classes=[str(int(t)) for t in bunch.target_names],
        normalize=normalize,
        seed=seed,
        source="scikit-learn load_digits",
    )
