"""The toy task's data: points around random centres, one class a centre.

Every sample is its class's centre (drawn from N(0, 1) per coordinate) plus
N(0, spread²) noise; the data set is the seed's, so every worker draws the
same one.  A split is what staging reads (:class:`aihpc.tasks.base.Split`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from aihpc.base.errors import ConfigError
from aihpc.records.codec import Record

#: The options of a data set of points and their defaults.
DEFAULTS: dict[str, Any] = {"num_samples": 2000, "dim": 8, "classes": 4, "spread": 1.0}
#: The share of the samples the validation split holds.
VAL_SHARE = 0.25


class BlobsDataRecord(Record, frozen=True):
    """The points of a run, as results.json's ``data`` holds what the task's ``inspect_data``
    describes."""

    name: str
    in_dim: int
    num_classes: int
    num_train: int
    num_val: int
    max_params: int


@dataclass(frozen=True)
class PointSplit:
    """One split: points (float32) and their classes (int64)."""

    x: npt.NDArray[np.float32]
    y: npt.NDArray[np.int64]
    dtype: Any = np.float32
    normalizer: None = None

    @property
    def sample_shape(self) -> tuple[int, ...]:
        return (int(self.x.shape[1]),)

    def __len__(self) -> int:
        return int(self.x.shape[0])

    def raw(self, positions: npt.NDArray[np.int64]) -> npt.NDArray[Any]:
        return self.x[positions]

    def label(self, positions: npt.NDArray[np.int64]) -> npt.NDArray[Any]:
        return self.y[positions]


def options(given: Mapping[str, Any]) -> dict[str, Any]:
    """The data set's options, the defaults where not given; ConfigError naming a bad one."""
    unknown = sorted(set(given) - set(DEFAULTS))
    if unknown:
        raise ConfigError(f"unknown blobs data option {unknown[0]}; valid: {', '.join(DEFAULTS)}")
    merged = {**DEFAULTS, **given}
    for key in ("num_samples", "dim", "classes"):
        if not isinstance(merged[key], int) or merged[key] < 2:
            raise ConfigError(
                f"blobs data option {key} must be an integer >= 2, got {merged[key]!r}"
            )
    return merged


def points(given: Mapping[str, Any], seed: int) -> tuple[PointSplit, PointSplit]:
    """The training and validation splits of the data set of ``given`` options and ``seed``."""
    o = options(given)
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((o["classes"], o["dim"]))
    y = rng.integers(0, o["classes"], o["num_samples"])
    x = centres[y] + float(o["spread"]) * rng.standard_normal((o["num_samples"], o["dim"]))
    n_val = max(1, int(VAL_SHARE * o["num_samples"]))
    xs, ys = x.astype(np.float32), y.astype(np.int64)
    return PointSplit(xs[n_val:], ys[n_val:]), PointSplit(xs[:n_val], ys[:n_val])
