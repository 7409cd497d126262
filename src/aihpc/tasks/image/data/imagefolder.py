"""``imagefolder``: one folder per class of JPEG/PNG images (the ImageNet layout).

Layout
------
``root/<class_name>/**/*.jpg`` (also ``.jpeg``, ``.png``; case-insensitive;
searched recursively inside each class folder; hidden files and folders are
ignored, as are files with other extensions).  Classes are the sorted class
folder names.  If both ``root/train`` and ``root/val`` are folders, they are
used as the split (each in the layout above; ``val_fraction`` is then not
used, and every val class must also exist in train); otherwise the images are
split stratified by ``seed``.

Scan and corrupt files
----------------------
At load time every file's header is opened with Pillow and checked with
``Image.verify()`` (cheap: for JPEG it reads the header only, for PNG it also
checks chunk CRCs).  ``verify="full"`` decodes every image instead (slow on
large sets, but it also catches truncated JPEG data).  A file that fails
raises DataError naming it, or with ``skip_corrupt=True`` is left out and
recorded in ``ImageData.skipped`` as ``(path, reason)``.  A file that passes
the scan but fails to decode later raises DataError naming it from
``__getitem__`` (a Dataset cannot drop samples mid-epoch).

Decoding
--------
Lazy, in ``__getitem__``: the file is decoded with Pillow, converted to RGB
(or L for ``channels=1``), and brought to ``image_size``: unchanged when it
already has that size; otherwise resized (bilinear) so that it covers the
target while keeping its aspect ratio, then center-cropped.  Pixel values
are scaled to [0, 1] before normalisation.  Default ``image_size``: the size
of the images if they all have the same size, else 224 (224 x 224).

Options: ``image_size`` (int or (h, w)), ``channels`` (3 or 1),
``verify`` ("header" or "full"), ``stats_samples`` (1000: normalisation
statistics use at most this many seeded-random train images), ``workers``
(threads for scanning and bulk decoding; default min(8, CPU count)).
"""

from __future__ import annotations

import os
import struct
import zlib
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from aihpc.base.checks import check_options, integer
from aihpc.base.errors import ConfigError, DataError
from aihpc.tasks.image.data.base import (
    ImageData,
    SplitDataset,
    check_size,
    finish,
    stratified_split,
)

OPTIONS = ("image_size", "channels", "verify", "stats_samples", "workers")
EXTENSIONS = (".jpg", ".jpeg", ".png")
#: Target size when the images differ in size and no image_size is given.
DEFAULT_SIZE = 224


def _pil_errors() -> tuple[type[BaseException], ...]:
    from PIL import Image

    return (
        OSError,
        ValueError,
        SyntaxError,
        EOFError,
        struct.error,
        zlib.error,
        Image.DecompressionBombError,
    )


def _list_images(folder: Path) -> list[Path]:
    """Image files under ``folder`` (recursive, sorted, hidden entries skipped)."""
    found: list[Path] = []
    for dirpath, dirnames, filenames in os.walk(folder, followlinks=True):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        for name in sorted(filenames):
            if not name.startswith(".") and name.lower().endswith(EXTENSIONS):
                found.append(Path(dirpath) / name)
    return found


def _class_folders(root: Path) -> list[Path]:
    """Sorted non-hidden subfolders of ``root``; DataError if there are none."""
    folders = sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))
    if not folders:
        raise DataError(
            f"no class folders in {root}: expected {root}/<class_name>/*.jpg "
            f"(or {root}/train and {root}/val)"
        )
    return folders


def _check_file(path: Path, full: bool) -> tuple[tuple[int, int] | None, str]:
    """Open and verify one image: ((height, width), "") or (None, reason)."""
    from PIL import Image

    try:
        with Image.open(path) as im:
            width, height = im.size
            if full:
                im.load()
            else:
                im.verify()
        return (height, width), ""
    except _pil_errors() as exc:
        return None, f"{type(exc).__name__}: {exc}"


def _fit(im: Any, size: tuple[int, int]) -> Any:
    """Resize (bilinear) to cover ``size`` = (h, w) keeping aspect, then center-crop."""
    from PIL import Image

    th, tw = size
    w0, h0 = im.size
    if (h0, w0) == (th, tw):
        return im
    scale = max(th / h0, tw / w0)
    nw, nh = max(tw, round(w0 * scale)), max(th, round(h0 * scale))
    im = im.resize((nw, nh), Image.Resampling.BILINEAR)
    left, top = (nw - tw) // 2, (nh - th) // 2
    return im.crop((left, top, left + tw, top + th))


def decode(path: str, size: tuple[int, int], channels: int) -> np.ndarray:
    """Decode one image file to float32 (C, H, W) in [0, 1]; DataError naming the file."""
    from PIL import Image

    mode = "L" if channels == 1 else "RGB"
    try:
        with Image.open(path) as im:
            w0, h0 = im.size
            if (h0, w0) != size:
                # JPEG only: let the decoder downscale by a power of two while
                # staying at least as large as the resize target.
                scale = max(size[0] / h0, size[1] / w0)
                im.draft(mode, (max(1, round(w0 * scale)), max(1, round(h0 * scale))))
            arr = np.asarray(_fit(im.convert(mode), size), dtype=np.uint8)
    except _pil_errors() as exc:
        raise DataError(f"cannot decode image {path}: {type(exc).__name__}: {exc}") from None
    if arr.ndim == 2:
        arr = arr[None, :, :]
    else:
        arr = arr.transpose(2, 0, 1)
    return arr.astype(np.float32) * np.float32(1.0 / 255.0)


class ImageFileSplit(SplitDataset):
    """A split of image files decoded lazily; see the module docstring."""

    def __init__(
        self,
        files: list[str],
        labels: np.ndarray,
        size: tuple[int, int],
        channels: int,
        workers: int,
    ) -> None:
        self.files = list(files)
        self.labels = np.asarray(labels, dtype=np.int64)
        self.size = size
        self.channels = channels
        self.workers = workers
        self.sample_shape = (channels, size[0], size[1])

    def raw_single(self, position: int) -> np.ndarray:
        return decode(self.files[position], self.size, self.channels)

    def raw(self, positions: np.ndarray) -> np.ndarray:
        out = np.empty((len(positions),) + self.sample_shape, dtype=np.float32)

        def one(i: int) -> None:
            out[i] = self.raw_single(int(positions[i]))

        if self.workers > 1 and len(positions) > 1:
            with ThreadPoolExecutor(self.workers) as pool:
                list(pool.map(one, range(len(positions))))
        else:
            for i in range(len(positions)):
                one(i)
        return out


#: A scan's image files, their labels and their sizes (height, width).
Scanned = tuple[list[str], list[int], list[tuple[int, int]]]


def _scan(
    folders: list[tuple[str, Path]],
    class_index: dict[str, int],
    full: bool,
    skip_corrupt: bool,
    workers: int,
    skipped: list[tuple[str, str]],
) -> Scanned:
    """List and verify the images of ``folders``; returns (files, labels, sizes)."""
    per_class = []
    for name, folder in folders:
        images = _list_images(folder)
        if not images:
            raise DataError(f"class folder {folder} has no images ({', '.join(EXTENSIONS)})")
        per_class.append((name, folder, images))
    flat = [path for _, _, images in per_class for path in images]
    with ThreadPoolExecutor(max(1, workers)) as pool:
        checks = iter(list(pool.map(lambda p: _check_file(p, full), flat)))
    files: list[str] = []
    labels: list[int] = []
    sizes: list[tuple[int, int]] = []
    for name, folder, images in per_class:
        kept = 0
        for path in images:
            size, reason = next(checks)
            if size is None:
                if not skip_corrupt:
                    raise DataError(
                        f"corrupt image {path}: {reason} (pass skip_corrupt=True to skip it)"
                    )
                skipped.append((str(path), reason))
                continue
            files.append(str(path))
            labels.append(class_index[name])
            sizes.append(size)
            kept += 1
        if kept == 0:
            raise DataError(f"class folder {folder} has no readable images (all were corrupt)")
    return files, labels, sizes


def _checked_options(
    path: str | os.PathLike[str] | None, options: dict[str, Any]
) -> tuple[Path, int, str, int, int, tuple[int, int] | None]:
    """The folder and the options of :func:`load`, checked: (root, channels, verify, stats_samples,
    workers, image size or None); ConfigError or DataError naming the bad value."""
    check_options("imagefolder", options, OPTIONS)
    channels = integer("channels", options.get("channels", 3), 1, terse=True, numpy=True)
    if channels not in (1, 3):
        raise ConfigError(f"channels must be 1 or 3 for 'imagefolder', got {channels}")
    verify = options.get("verify", "header")
    if verify not in ("header", "full"):
        raise ConfigError(f"verify must be 'header' or 'full', got {verify!r}")
    stats_samples = integer(
        "stats_samples", options.get("stats_samples", 1000), 1, terse=True, numpy=True
    )
    workers = integer(
        "workers", options.get("workers", min(8, os.cpu_count() or 1)), 1, terse=True, numpy=True
    )
    size = check_size("image_size", options["image_size"]) if "image_size" in options else None
    if path is None:
        raise ConfigError("data set 'imagefolder' needs path=<folder>")
    root = Path(path)
    if not root.exists():
        raise DataError(f"image folder not found: {root}")
    if not root.is_dir():
        raise DataError(f"image folder path is not a directory: {root}")
    return root, channels, verify, stats_samples, workers, size


def _scan_presplit(
    root: Path, full: bool, skip_corrupt: bool, workers: int, skipped: list[tuple[str, str]]
) -> tuple[list[str], Scanned, Scanned]:
    """A folder split already into ``train/`` and ``val/``: its classes (the train folder's) and
    each split's scan; a val class without its train folder is refused."""
    train_folders = _class_folders(root / "train")
    classes = [f.name for f in train_folders]
    index = {name: i for i, name in enumerate(classes)}
    val_folders = _class_folders(root / "val")
    for folder in val_folders:
        if folder.name not in index:
            raise DataError(f"val class folder {folder} has no matching folder in {root / 'train'}")
    tr = _scan([(f.name, f) for f in train_folders], index, full, skip_corrupt, workers, skipped)
    va = _scan([(f.name, f) for f in val_folders], index, full, skip_corrupt, workers, skipped)
    return classes, tr, va


def load(
    path: str | os.PathLike[str] | None,
    *,
    val_fraction: float,
    seed: int,
    normalize: bool,
    skip_corrupt: bool,
    **options: Any,
) -> ImageData:
    """Scan an image folder and build lazily decoded splits (see module docstring)."""
    root, channels, verify, stats_samples, workers, size = _checked_options(path, options)
    skipped: list[tuple[str, str]] = []
    full = verify == "full"
    presplit = (root / "train").is_dir() and (root / "val").is_dir()
    if presplit:
        classes, tr, va = _scan_presplit(root, full, skip_corrupt, workers, skipped)
        sizes = tr[2] + va[2]
    else:
        folders = _class_folders(root)
        classes = [f.name for f in folders]
        index = {name: i for i, name in enumerate(classes)}
        files, labels, sizes = _scan(
            [(f.name, f) for f in folders], index, full, skip_corrupt, workers, skipped
        )
    if len(classes) < 2:
        raise DataError(f"{root} has {len(classes)} class folder(s); need at least 2")
    if size is None:
        size = sizes[0] if all(s == sizes[0] for s in sizes) else (DEFAULT_SIZE, DEFAULT_SIZE)

    def make(files: list[str], labels: Sequence[int] | np.ndarray) -> ImageFileSplit:
        return ImageFileSplit(files, np.asarray(labels, dtype=np.int64), size, channels, workers)

    if presplit:
        train, val = make(tr[0], tr[1]), make(va[0], va[1])
        source = f"{root} (train/val folders)"
    else:
        lab = np.asarray(labels, dtype=np.int64)
        train_idx, val_idx = stratified_split(lab, val_fraction, seed)
        train = make([files[i] for i in train_idx], lab[train_idx])
        val = make([files[i] for i in val_idx], lab[val_idx])
        source = str(root)
    return finish(
        "imagefolder",
        train,
        val,
        classes=classes,
        normalize=normalize,
        seed=seed,
        stats_samples=stats_samples,
        skipped=skipped,
        source=source,
    )
