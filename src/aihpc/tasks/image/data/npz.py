"""``npz``: images and labels from a NumPy ``.npz`` file, held in memory.

Keys
----
``x``      images, required; ``y`` labels (N,), required, integers >= 0.
``x_val``, ``y_val``  optional, both or neither: an explicit validation split
           (then ``val_fraction`` is not used); otherwise ``x``/``y`` are
           split stratified by ``seed``.
``classes``  optional 1-D array of class names (strings); it fixes
           ``num_classes`` (every label must be < len(classes)).  Without it
           ``num_classes = max label + 1`` and names are ``"0"``, ``"1"``, ...

Accepted image layouts (option ``layout``, default ``"auto"``)
--------------------------------------------------------------
``NCHW``  (N, C, H, W)
``NHWC``  (N, H, W, C)
``NHW``   (N, H, W), one channel
``auto``  3-D arrays are NHW; 4-D arrays are NHWC when the last axis is 1, 3
          or 4 and axis 1 is not, otherwise NCHW.  Pass ``layout`` explicitly
          for ambiguous shapes such as (N, 4, 4, 3).

Values: ``uint8`` images are scaled to [0, 1] (divided by 255); any other
real or integer dtype is used as float32 unchanged.  Non-finite values are an
error.  The file is read with ``allow_pickle=False``.
"""

from __future__ import annotations

import os
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

from aihpc.base.checks import check_options
from aihpc.base.errors import ConfigError, DataError
from aihpc.tasks.image.data.base import ArraySplit, ImageData, finish, stratified_split

OPTIONS = ("layout",)
LAYOUTS = ("auto", "NCHW", "NHWC", "NHW")


def _to_nchw(x: np.ndarray, layout: str, key: str, path: Path) -> np.ndarray:
    """Convert ``x`` to float32 (N, C, H, W) following ``layout``."""
    if x.dtype.kind not in "biuf":
        raise DataError(f"{path}: array {key!r} must be numeric, got dtype {x.dtype}")
    if layout == "auto":
        if x.ndim == 3:
            layout = "NHW"
        elif x.ndim == 4:
            nhwc = x.shape[3] in (1, 3, 4) and x.shape[1] not in (1, 3, 4)
            layout = "NHWC" if nhwc else "NCHW"
        else:
            raise DataError(
                f"{path}: array {key!r} must be 3-D (N,H,W) or 4-D (N,C,H,W)/(N,H,W,C), "
                f"got shape {x.shape}"
            )
    want = 3 if layout == "NHW" else 4
    if x.ndim != want:
        raise DataError(
            f"{path}: array {key!r} with layout {layout} must be {want}-D, got shape {x.shape}"
        )
    if layout == "NHW":
        x = x[:, None, :, :]
    elif layout == "NHWC":
        x = np.moveaxis(x, 3, 1)
    if min(x.shape[1:]) < 1:
        raise DataError(f"{path}: array {key!r} has an empty image axis, shape {x.shape}")
    scale = np.float32(1.0 / 255.0) if x.dtype == np.uint8 else None
    out = np.ascontiguousarray(x, dtype=np.float32)
    if scale is not None:
        out *= scale
    elif not np.isfinite(out).all():
        raise DataError(f"{path}: array {key!r} contains non-finite values (NaN or inf)")
    return out


def _labels(y: np.ndarray, n: int, key: str, xkey: str, path: Path) -> np.ndarray:
    """Validate a label array: 1-D integers >= 0, length n."""
    if y.ndim != 1:
        raise DataError(f"{path}: array {key!r} must be 1-D (N,), got shape {y.shape}")
    if y.shape[0] != n:
        raise DataError(
            f"{path}: length mismatch, {xkey!r} has {n} samples but {key!r} has {y.shape[0]}"
        )
    if y.dtype.kind == "f" and np.all(np.isfinite(y)) and np.all(y == np.round(y)):
        y = y.astype(np.int64)
    if y.dtype.kind not in "iu":
        raise DataError(f"{path}: array {key!r} must hold integer labels, got dtype {y.dtype}")
    y = y.astype(np.int64)
    if n and int(y.min()) < 0:
        raise DataError(f"{path}: array {key!r} has a negative label {int(y.min())}")
    return y


def load(
    path: str | os.PathLike[str] | None,
    *,
    val_fraction: float,
    seed: int,
    normalize: bool,
    skip_corrupt: bool,
    **options: Any,
) -> ImageData:
    """Load an .npz file (see the module docstring for keys and layouts)."""
    check_options("npz", options, OPTIONS)
    layout = options.get("layout", "auto")
    if layout not in LAYOUTS:
        raise ConfigError(f"layout must be one of {', '.join(LAYOUTS)}, got {layout!r}")
    if path is None:
        raise ConfigError("data set 'npz' needs path=<file.npz>")
    file = Path(path)
    arrays = _read_archive(file)
    missing = [key for key in ("x", "y") if key not in arrays]
    if missing:
        raise DataError(
            f"{file}: missing required array(s) {', '.join(missing)}; "
            f"found {', '.join(sorted(arrays)) or '(none)'}"
        )
    if ("x_val" in arrays) != ("y_val" in arrays):
        raise DataError(f"{file}: 'x_val' and 'y_val' must be given together")
    x = _to_nchw(arrays["x"], layout, "x", file)
    if x.shape[0] == 0:
        raise DataError(f"{file}: array 'x' holds no samples")
    y = _labels(arrays["y"], x.shape[0], "y", "x", file)
    all_labels = [y]
    if "x_val" in arrays:
        xv = _to_nchw(arrays["x_val"], layout, "x_val", file)
        if xv.shape[1:] != x.shape[1:]:
            raise DataError(
                f"{file}: 'x_val' samples have shape {xv.shape[1:]}, 'x' samples {x.shape[1:]}"
            )
        if xv.shape[0] == 0:
            raise DataError(f"{file}: array 'x_val' holds no samples")
        yv = _labels(arrays["y_val"], xv.shape[0], "y_val", "x_val", file)
        all_labels.append(yv)
    classes = _class_names(arrays, max(int(lab.max()) for lab in all_labels), file)
    if len(classes) < 2:
        raise DataError(f"{file}: need at least 2 classes, got {len(classes)}")

    if "x_val" in arrays:
        train = ArraySplit(x, y, np.arange(x.shape[0]))
        val = ArraySplit(xv, yv, np.arange(xv.shape[0]))
        source = f"{file} (x_val/y_val split)"
    else:
        train_idx, val_idx = stratified_split(y, val_fraction, seed)
        train = ArraySplit(x, y, train_idx)
        val = ArraySplit(x, y, val_idx)
        source = str(file)
    return finish("npz", train, val, classes=classes, normalize=normalize, seed=seed, source=source)


def _read_archive(file: Path) -> dict[str, np.ndarray]:
    """Every array of the .npz archive ``file`` (no pickled objects); DataError if it is not one."""
    if not file.exists():
        raise DataError(f"npz file not found: {file}")
    if not file.is_file():
        raise DataError(f"npz path is not a file: {file}")
    if not zipfile.is_zipfile(file):
        raise DataError(f"{file} is not an .npz archive")
    try:
        with np.load(file, allow_pickle=False) as archive:
            return {key: archive[key] for key in archive.files}
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as exc:
        raise DataError(f"cannot read npz file {file}: {exc}") from None


def _class_names(arrays: dict[str, np.ndarray], top: int, file: Path) -> list[str]:
    """The archive's ``classes``, or ``0 .. top`` where it has none."""
    if "classes" not in arrays:
        return [str(i) for i in range(top + 1)]
    names = arrays["classes"]
    if names.ndim != 1 or names.shape[0] < 1:
        raise DataError(f"{file}: 'classes' must be a non-empty 1-D array, got shape {names.shape}")
    classes = [str(c) for c in names.tolist()]
    if top >= len(classes):
        raise DataError(f"{file}: label {top} out of range for {len(classes)} classes")
    return classes
