"""The task families the matcher is calibrated and validated on.

A *family* is one source of tasks; its tasks differ in size, channels,
classes, samples and difficulty.  Validation leaves one family out at a
time (the matcher is refitted without it and judged on held-out tasks of
it), so a family is the unit a user's own data is most likely to differ
by.  Everything is built from data the project has or generates, and every
task goes through one of :mod:`aihpc.tasks.image.data`'s readers, as a user's would:

* ``digits`` -- scikit-learn's 8x8 digits: class subsets, added noise,
  fewer samples, label noise (1x8x8; the ``digits`` reader);
* ``digits-placed`` -- the digits scaled up to 60-80 % of a 16 or 32 pixel
  canvas at a random place, with pixel noise (1 channel; written to an
  ``.npz`` file and read back by the ``npz`` reader);
* ``digits-colour`` -- the same in 3 channels, a random stroke and
  background colour per image (``npz`` reader);
* ``synthetic`` -- the procedural generator at 8, 16 and 32 pixels, 1 and 3
  channels, 2 to 100 classes, 400 to 30,000 samples, difficulty 0.2 to 0.95
  (the ``synthetic`` reader);
* ``photos`` -- patches of scikit-learn's two sample photographs; a class
  is one region of a grid over a photograph, a sample a randomly placed
  crop of it (48 to 96 pixels) resized to 16 or 32 (PNG files read by the
  ``imagefolder`` reader).

The placed and colour digits keep train and validation apart at the source:
the 1,797 digits are split 70/30 (class-stratified) first, and each split's
samples are drawn from its own digits only.  Photo crops for validation
come from the right fifth of each region, training crops from the rest.

:func:`calibration_tasks` and :func:`validation_tasks` list
:class:`TaskSpec` s (picklable recipes, built where they are observed);
no task of one list is in the other.
"""

from __future__ import annotations

import functools
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.nn import functional as F

from aihpc.recommend.tasks import Task, fewer, from_dataset, label_noise, noisy, relabel

FAMILIES = ("digits", "digits-placed", "digits-colour", "synthetic", "photos")


@dataclass(frozen=True)
class TaskSpec:
    """A task to build: its family, its name, its input shape and the recipe."""

    family: str
    name: str
    shape: tuple[int, int, int]
    recipe: Callable[[], Task]

    def build(self) -> Task:
        return replace(self.recipe(), name=self.name)

    @property
    def cost(self) -> int:
        """Relative cost of observing it (values per image), to schedule the largest first."""
        return int(np.prod(self.shape))


def _digits_variant(kind: str, seed: int, **how: Any) -> Task:
    digits = from_dataset("digits", seed=seed)
    if "classes" in how:
        digits = relabel(digits, list(how["classes"]), "d")
    if kind == "noise":
        return noisy(digits, how["sigma"], seed + 10, "d")
    if kind == "fewer":
        return fewer(digits, how["fraction"], seed + 10, "d")
    if kind == "label_noise":
        return label_noise(digits, how["rate"], seed + 10, "d")
    return digits


def _base_digits(seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Digit images in [0, 1] (N, 8, 8), labels, and a train mask (70 %, class-stratified)."""
    from sklearn.datasets import load_digits

    d = load_digits()
    images, labels = d.images.astype(np.float32) / 16.0, d.target.astype(np.int64)
    rng = np.random.default_rng(seed)
    train = np.zeros(len(labels), dtype=bool)
    for k in np.unique(labels):
        members = rng.permutation(np.flatnonzero(labels == k))
        train[members[: int(round(0.7 * len(members)))]] = True
    return images, labels, train


def _place(
    images: np.ndarray, side: int, channels: int, noise: float, rng: np.random.Generator
) -> np.ndarray:
    """Each 8x8 digit scaled to 60-80 % of ``side`` at a random place; colours if 3 channels."""
    out = np.empty((len(images), channels, side, side), dtype=np.float32)
    for i, img in enumerate(images):
        size = int(rng.integers(int(0.6 * side), int(0.8 * side) + 1))
        glyph = F.interpolate(
            torch.from_numpy(img)[None, None],
            size=(size, size),
            mode="bilinear",
            align_corners=False,
        )[0, 0].numpy()
        mask = np.zeros((side, side), dtype=np.float32)
        top, left = rng.integers(0, side - size + 1, size=2)
        mask[top : top + size, left : left + size] = glyph
        if channels == 1:
            fg, bg = np.ones(1, np.float32), np.zeros(1, np.float32)
        else:  # a random stroke and background colour, at least 0.5 apart
            fg = rng.random(3).astype(np.float32)
            bg = np.clip(fg + rng.choice([-1, 1], 3) * rng.uniform(0.5, 1.0, 3), 0, 1).astype(
                np.float32
            )
        out[i] = bg[:, None, None] + (fg - bg)[:, None, None] * mask[None]
    return out + noise * rng.standard_normal(out.shape).astype(np.float32)


def _draw(
    images: np.ndarray,
    labels: np.ndarray,
    pool: np.ndarray,
    count: int,
    side: int,
    channels: int,
    noise: float,
    rng: np.random.Generator,
) -> tuple[np.ndarray, np.ndarray]:
    pick = rng.choice(pool, size=count, replace=count > len(pool))
    return _place(images[pick], side, channels, noise, rng), labels[pick]


def _via_npz(
    x_tr: np.ndarray, y_tr: np.ndarray, x_va: np.ndarray, y_va: np.ndarray, seed: int
) -> Task:
    with tempfile.TemporaryDirectory(prefix="aihpc-task-") as tmp:
        path = Path(tmp) / "task.npz"
        np.savez(path, x=x_tr, y=y_tr, x_val=x_va, y_val=y_va)
        return from_dataset("npz", path, seed=seed)


def _placed_digits(
    side: int,
    channels: int,
    samples: int,
    noise: float,
    seed: int,
    classes: tuple[int, ...] = tuple(range(10)),
) -> Task:
    images, labels, train = _base_digits(seed)
    keep = np.isin(labels, classes)
    lut = np.full(10, -1)
    lut[list(classes)] = np.arange(len(classes))
    rng = np.random.default_rng(seed + 1)
    x_tr, y_tr = _draw(
        images, lut[labels], np.flatnonzero(train & keep), samples, side, channels, noise, rng
    )
    x_va, y_va = _draw(
        images,
        lut[labels],
        np.flatnonzero(~train & keep),
        max(200, samples // 4),
        side,
        channels,
        noise,
        rng,
    )
    return _via_npz(x_tr, y_tr, x_va, y_va, seed)


def _photo_patches(side: int, grid: tuple[int, int], per_class: int, seed: int) -> Task:
    """Crops of the two sample photographs; class = (photo, grid cell); through imagefolder."""
    from PIL import Image
    from sklearn.datasets import load_sample_images

    photos = load_sample_images().images
    rng = np.random.default_rng(seed)
    with tempfile.TemporaryDirectory(prefix="aihpc-photos-") as tmp:
        root = Path(tmp)
        label = 0
        for photo in photos:
            h, w = photo.shape[0] // grid[0], photo.shape[1] // grid[1]
            for r in range(grid[0]):
                for c in range(grid[1]):
                    cell = photo[r * h : (r + 1) * h, c * w : (c + 1) * w]
                    for split, count in (("train", per_class), ("val", max(10, per_class // 4))):
                        folder = root / split / f"c{label:03d}"
                        folder.mkdir(parents=True)
                        for i in range(count):
                            crop = _crop(cell, split, rng)
                            Image.fromarray(crop).resize(
                                (side, side), Image.Resampling.BILINEAR
                            ).save(folder / f"{i}.png")
                    label += 1
        return from_dataset("imagefolder", root, seed=seed, image_size=side)


def _crop(cell: np.ndarray, split: str, rng: np.random.Generator) -> np.ndarray:
    """A random square crop of 48-96 pixels: validation from the cell's right fifth, training
    not."""
    h, w = cell.shape[:2]
    size = int(rng.integers(48, min(96, h, w // 2) + 1))
    cut = int(w * 0.8)
    lo, hi = (cut, w - size) if split == "val" else (0, cut - size)
    left = int(rng.integers(min(lo, hi), max(lo, hi) + 1))
    top = int(rng.integers(0, h - size + 1))
    return np.ascontiguousarray(cell[top : top + size, left : left + size])


def _synthetic(
    side: int, channels: int, classes: int, samples: int, difficulty: float, seed: int
) -> Task:
    return from_dataset(
        "synthetic",
        seed=seed,
        num_samples=samples,
        num_classes=classes,
        channels=channels,
        image_size=side,
        difficulty=difficulty,
    )


def _spec(
    family: str, name: str, shape: tuple[int, int, int], fn: Callable[..., Task], **kw: Any
) -> TaskSpec:
    return TaskSpec(family, name, shape, functools.partial(fn, **kw))


def _digits_specs(
    seed: int, variants: list[tuple[str, tuple[str, dict[str, Any]]]]
) -> list[TaskSpec]:
    return [
        _spec("digits", name, (1, 8, 8), _digits_variant, kind=kind, seed=seed, **how)
        for name, (kind, how) in variants
    ]


def _placed(
    channels: int,
    side: int,
    samples: int,
    noise: float,
    seed: int,
    classes: tuple[int, ...] = tuple(range(10)),
) -> TaskSpec:
    family = "digits-placed" if channels == 1 else "digits-colour"
    sub = "" if len(classes) == 10 else "_k" + "".join(map(str, classes))
    return _spec(
        family,
        f"{family}_{side}_n{samples}_s{noise:g}{sub}",
        (channels, side, side),
        _placed_digits,
        side=side,
        channels=channels,
        samples=samples,
        noise=noise,
        seed=seed,
        classes=tuple(classes),
    )


def _synth(
    channels: int, side: int, classes: int, samples: int, difficulty: float, seed: int
) -> TaskSpec:
    return _spec(
        "synthetic",
        f"synthetic_{channels}x{side}_k{classes}_n{samples}_d{difficulty:g}",
        (channels, side, side),
        _synthetic,
        side=side,
        channels=channels,
        classes=classes,
        samples=samples,
        difficulty=difficulty,
        seed=seed,
    )


def _photos(side: int, grid: tuple[int, int], per_class: int, seed: int) -> TaskSpec:
    return _spec(
        "photos",
        f"photos_{side}_k{2 * grid[0] * grid[1]}_n{per_class}",
        (3, side, side),
        _photo_patches,
        side=side,
        grid=grid,
        per_class=per_class,
        seed=seed,
    )


def calibration_tasks() -> list[TaskSpec]:
    """The tasks the matcher is fitted on (none of them is in :func:`validation_tasks`)."""
    return [
        *_digits_specs(
            1,
            [
                ("digits_0to4", ("plain", {"classes": (0, 1, 2, 3, 4)})),
                ("digits_noise0.8", ("noise", {"sigma": 0.8})),
                ("digits_20pct", ("fewer", {"fraction": 0.2})),
                ("digits_labelnoise0.3", ("label_noise", {"rate": 0.3})),
                ("digits_5to9_noise2", ("noise", {"sigma": 2.0, "classes": (5, 6, 7, 8, 9)})),
            ],
        ),
        _placed(1, 16, 3000, 0.1, 1),
        _placed(1, 16, 600, 0.5, 2),
        _placed(1, 32, 4000, 0.3, 3),
        _placed(1, 32, 1000, 0.2, 4, classes=(0, 1, 2, 3, 4)),
        _placed(3, 16, 3000, 0.1, 5),
        _placed(3, 16, 800, 0.4, 6, classes=(3, 5, 8, 9)),
        _placed(3, 32, 3000, 0.2, 7),
        _placed(3, 32, 1200, 0.5, 8),
        _placed(3, 32, 300, 0.3, 9),
        _synth(1, 8, 10, 1800, 0.2, 21),
        _synth(3, 8, 2, 400, 0.7, 22),
        _synth(1, 16, 20, 500, 0.8, 23),
        _synth(3, 16, 100, 30000, 0.85, 24),
        _synth(3, 16, 5, 3000, 0.9, 25),
        _synth(1, 32, 10, 2000, 0.8, 26),
        _synth(3, 32, 10, 20000, 0.95, 27),
        _synth(3, 32, 50, 5000, 0.9, 28),
        _photos(16, (1, 3), 150, 31),
        _photos(16, (3, 4), 60, 32),
        _photos(32, (1, 2), 300, 33),
        _photos(32, (2, 3), 100, 34),
        _photos(16, (2, 2), 25, 35),
    ]


def validation_tasks() -> list[TaskSpec]:
    """Held-out tasks of every family: other sizes, noise, subsets, difficulties and seeds."""
    return [
        *_digits_specs(
            0,
            [
                ("digits", ("plain", {})),
                ("digits_noise1.4", ("noise", {"sigma": 1.4})),
                ("digits_3589", ("plain", {"classes": (3, 5, 8, 9)})),
            ],
        ),
        _placed(1, 16, 1500, 0.3, 41),
        _placed(1, 32, 2000, 0.1, 42),
        _placed(3, 16, 2000, 0.2, 43),
        _placed(3, 32, 2000, 0.3, 44),
        _synth(1, 8, 10, 1800, 0.65, 45),
        _synth(3, 16, 30, 4000, 0.85, 46),
        _synth(3, 32, 10, 10000, 0.9, 47),
        _photos(16, (2, 2), 100, 48),
        _photos(32, (1, 3), 150, 49),
    ]
