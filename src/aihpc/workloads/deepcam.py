"""DeepCAM-style workload: an encoder-decoder segments extreme weather in multi-channel 2D fields.

MLPerf HPC's DeepCAM (Kurth et al., SC'18; mlcommons/hpc ``deepcam``) reads
CAM5 climate snapshots, 16 channels on a 768 x 1152 grid, and labels every
pixel background (0), tropical cyclone (1) or atmospheric river (2); quality
is the intersection over union (MLPerf HPC v3.0 target: IOU 0.82).

Generator (the real data set is 8.8 TB)
---------------------------------------
Each sample is ``CHANNELS`` fields on an H x W grid (channels last, as the
CAM5 files): ``TMQ`` (water vapour, rising towards the grid's middle row,
the "equator"), ``U850``/``V850`` (wind) and ``PSL`` (sea-level pressure),
each a smooth Gaussian random background plus noise.  Into it go

* 0-2 **cyclones**: a pressure minimum ``-a exp(-d^2 / 2 r^2)``, a vortex of
  tangential wind peaking at radius ``r`` and a moist core; labelled 1
  where ``d < 1.5 r``;
* 0-1 **atmospheric river**: a long band (random angle, offset, length) of
  high water vapour with wind along it; labelled 2 within its half-width.

Every feature's strength is drawn per sample between weak (hidden in the
background's variation) and clear, so the task is learnable but not a
threshold on one channel.

Files and reader
----------------
One sample per HDF5 file, as in the reference: ``climate/data`` (H, W, C)
float32 and ``climate/labels_0`` (H, W) (``climate/labels`` is accepted
too), and ``stats.h5`` beside ``train/`` with ``climate/minval`` and
``climate/maxval`` per channel: the reader maps each channel to
``(x - minval) / (maxval - minval)`` and transposes to (C, H, W), as the
reference ``CamDataset`` does.

Metric: the reference ``utils/metric.py`` IOU: per sample, the mean over the
3 classes of TP / (TP + FP + FN), a class absent from both prediction and
label counting 1; averaged over samples.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from torch import nn

from aihpc.base.errors import DataError
from aihpc.workloads.base import Samples, Size, Workload, split_files

CLASSES = 3
CHANNEL_NAMES = ("TMQ", "U850", "V850", "PSL")


def _smooth_noise(rng: np.random.Generator, shape: tuple[int, int], scale: float) -> np.ndarray:
    """A unit-variance Gaussian random field with correlation length ~``scale`` pixels."""
    ky, kx = np.fft.fftfreq(shape[0])[:, None], np.fft.rfftfreq(shape[1])[None, :]
    h = np.exp(-0.5 * (ky**2 + kx**2) * (2 * np.pi * scale) ** 2)
    field = np.fft.irfftn(np.fft.rfftn(rng.standard_normal(shape)) * h, s=shape, axes=(0, 1))
    return field / max(float(field.std()), 1e-12)


def generate_fields(n: int, shape: tuple[int, int], seed: int) -> tuple[np.ndarray, np.ndarray]:
    """``n`` samples: fields (n, H, W, 4) float32 (channels last) and labels (n, H, W) uint8."""
    rng = np.random.default_rng(seed)
    h, w = shape
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float64)
    data = np.empty((n, h, w, len(CHANNEL_NAMES)), dtype=np.float32)
    labels = np.zeros((n, h, w), dtype=np.uint8)
    equator = np.exp(-(((yy - h / 2) / (h / 3)) ** 2))
    for i in range(n):
        tmq = 20 + 25 * equator + 6 * _smooth_noise(rng, shape, 3.0)
        u, v = 4 * _smooth_noise(rng, shape, 4.0), 4 * _smooth_noise(rng, shape, 4.0)
        psl = 1010 + 5 * _smooth_noise(rng, shape, 5.0)
        lab = labels[i]
        if rng.random() < 0.8:  # an atmospheric river: a band of vapour with wind along it
            angle, strength = rng.uniform(-0.6, 0.6), rng.uniform(0.4, 1.0)
            cx, cy, half = (
                rng.uniform(0.2 * w, 0.8 * w),
                rng.uniform(0.2 * h, 0.8 * h),
                rng.uniform(1.5, 2.5),
            )
            along = (xx - cx) * np.cos(angle) + (yy - cy) * np.sin(angle)
            across = -(xx - cx) * np.sin(angle) + (yy - cy) * np.cos(angle)
            length = rng.uniform(0.3, 0.5) * w
            band = np.exp(-0.5 * (across / half) ** 2) * (np.abs(along) < length)
            tmq += 22 * strength * band
            u += 10 * strength * band * np.cos(angle)
            v += 10 * strength * band * np.sin(angle)
            lab[(np.abs(across) < half) & (np.abs(along) < length)] = 2
        for _ in range(rng.integers(0, 3)):  # cyclones: pressure low, vortex, moist core
            cx, cy, r = rng.uniform(4, w - 4), rng.uniform(4, h - 4), rng.uniform(1.8, 3.0)
            strength = rng.uniform(0.4, 1.0)
            dx, dy = xx - cx, yy - cy
            d2 = dx**2 + dy**2
            core = np.exp(-0.5 * d2 / r**2)
            psl -= 18 * strength * core
            swirl = (
                14
                * strength
                * np.sqrt(d2)
                / r
                * np.exp(0.5 - 0.5 * d2 / r**2)
                / np.maximum(np.sqrt(d2), 1e-6)
            )
            u += -swirl * dy
            v += swirl * dx
            tmq += 12 * strength * core
            lab[d2 < (1.5 * r) ** 2] = 1
        noise = rng.standard_normal((4, h, w))
        data[i] = np.stack(
            [tmq + 3 * noise[0], u + 2 * noise[1], v + 2 * noise[2], psl + 2 * noise[3]], -1
        )
    return data, labels


def iou(prediction: torch.Tensor, label: torch.Tensor, classes: int = CLASSES) -> torch.Tensor:
    """Per-sample IOU (N,) of class maps (N, H, W): the reference ``compute_score``'s rule.

    For each sample and class, TP / (TP + FP + FN); a class absent from both
    prediction and label scores 1; the mean over classes.
    """
    p, g = prediction.reshape(prediction.shape[0], -1), label.reshape(label.shape[0], -1)
    scores = []
    for c in range(classes):
        pc, gc = p == c, g == c
        tp = (pc & gc).sum(1).double()
        union = (pc | gc).sum(1).double()  # TP + FP + FN
        scores.append(torch.where(union > 0, tp / union.clamp(min=1), torch.ones_like(tp)))
    return torch.stack(scores, 1).mean(1)


class DeepCAM(Workload):
    name = "deepcam"
    benchmark = "aihpc_deepcam"
    description = (
        "DeepCAM-style encoder-decoder: segment cyclones and rivers in 4-channel 2D fields (IOU)"
    )
    metric = "iou"
    metric_key = "eval_accuracy"
    higher_is_better = True
    loss_name = "cross_entropy"
    # How the target was chosen (measured on this project's shared 2-core CPU,
    # the "small" size: 32 x 48 fields, 512 training and 64 validation
    # samples): predicting background everywhere scores IOU 0.44; the network
    # passed 0.82 -- MLPerf HPC's own DeepCAM target -- after 5 epochs (about
    # a minute on one busy core), then hovered between 0.78 and 0.82 and
    # climbed to 0.87 by epoch 14.  So MLPerf's target is kept: it is met in
    # a few epochs, with a budget of 20 for the slow seeds.  Checked with
    # `aihpc train-to-target --workload deepcam --runs 5`: met after 4, 9, 5,
    # 5, 5 epochs, 88-191 s (olympic mean 127 s).
    target = 0.82
    target_note = (
        "IOU 0.82, MLPerf HPC's DeepCAM target: all-background scores 0.44; the small size "
        "passed 0.82 after 5 epochs and reached 0.87 by epoch 14 on a busy 2-core CPU"
    )
    sizes = {
        "small": Size(
            n_train=512,
            n_valid=64,
            batch_size=16,
            lr=3e-3,
            max_epochs=20,
            options={"shape": (32, 48), "width": 8},
        ),
        "tiny": Size(
            n_train=16,
            n_valid=8,
            batch_size=8,
            lr=3e-3,
            max_epochs=4,
            options={"shape": (16, 24), "width": 4},
        ),
    }

    def generate(self, out_dir: Path, size: Size, seed: int) -> None:
        import h5py

        height, width = (int(s) for s in size.options["shape"])
        shape = (height, width)
        out_dir = Path(out_dir)
        for i, (split, n) in enumerate((("train", size.n_train), ("validation", size.n_valid))):
            folder = out_dir / split
            folder.mkdir(parents=True, exist_ok=True)
            data, labels = generate_fields(n, shape, seed * 2 + i)
            # normalisation statistics from the training set, as the reference's stats.h5
            if split == "train":
                with h5py.File(out_dir / "stats.h5", "w") as f:
                    f.create_dataset("climate/minval", data=data.min(axis=(0, 1, 2)))
                    f.create_dataset("climate/maxval", data=data.max(axis=(0, 1, 2)))
            for j in range(n):
                with h5py.File(folder / f"data-{j:06d}.h5", "w") as f:
                    f.create_dataset("climate/data", data=data[j])
                    f.create_dataset("climate/labels_0", data=labels[j])

    def read(self, data_dir: Path, split: str, size: Size) -> Samples:
        shift, scale = read_stats(Path(data_dir) / "stats.h5")
        xs, ys = [], []
        for path in split_files(data_dir, split, (".h5", ".hdf5")):
            x, y = read_cam_file(path, len(shift))
            xs.append(x)
            ys.append(y)
        x = (np.stack(xs) - shift) * scale
        return Samples(
            torch.from_numpy(x).float().permute(0, 3, 1, 2).contiguous(),
            torch.from_numpy(np.stack(ys)).long(),
        )

    def input_shape(self, size: Size) -> tuple[int, ...]:
        return (len(CHANNEL_NAMES), *(int(s) for s in size.options["shape"]))

    def model(self, size: Size) -> nn.Module:
        return SegmentationNet(len(CHANNEL_NAMES), int(size.options["width"]))

    def loss(self, train: Samples) -> nn.Module:
        # Class weights 1 / sqrt(frequency), normalised to mean 1: the rare classes
        # (a few % of pixels) count more, as the reference's weighted loss does.
        freq = torch.bincount(train.y.reshape(-1), minlength=CLASSES).double() / train.y.numel()
        weight = 1.0 / torch.sqrt(freq.clamp(min=1e-4))
        return nn.CrossEntropyLoss(weight=(weight / weight.mean()).float())

    def evaluate(self, model: nn.Module, samples: Samples, batch_size: int) -> float:
        model.eval()
        total = 0.0
        with torch.no_grad():
            for i in range(0, len(samples), batch_size):
                pred = model(samples.x[i : i + batch_size]).argmax(1)
                total += float(iou(pred, samples.y[i : i + batch_size]).sum())
        return total / len(samples)


def read_stats(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """(shift, scale) per channel from a DeepCAM stats file: x -> (x - min) / (max - min)."""
    import h5py

    try:
        with h5py.File(path, "r") as f:
            lo, hi = (
                f["climate/minval"][...].astype(np.float64),
                f["climate/maxval"][...].astype(np.float64),
            )
    except (OSError, KeyError) as exc:
        raise DataError(
            f"cannot read DeepCAM statistics {path} (climate/minval, climate/maxval): {exc}"
        ) from None
    if lo.shape != hi.shape or lo.ndim != 1 or not np.all(hi > lo):
        raise DataError(f"{path}: minval and maxval must be per-channel vectors with max > min")
    return lo, 1.0 / (hi - lo)


def read_cam_file(path: Path, channels: int) -> tuple[np.ndarray, np.ndarray]:
    """(fields (H, W, C), labels (H, W) int64) of one DeepCAM HDF5 file."""
    import h5py

    try:
        with h5py.File(path, "r") as f:
            key = "climate/labels_0" if "climate/labels_0" in f else "climate/labels"
            if "climate/data" not in f or key not in f:
                raise DataError(
                    f"{path}: a DeepCAM file needs datasets climate/data and climate/labels_0"
                )
            x, y = f["climate/data"][...], f[key][...].astype(np.int64)
    except OSError as exc:
        raise DataError(f"cannot read HDF5 file {path}: {exc}") from None
    if x.ndim != 3 or x.shape[2] != channels or y.shape != x.shape[:2]:
        raise DataError(
            f"{path}: expected data (H, W, {channels}) and labels (H, W), "
            f"got {x.shape} and {y.shape}"
        )
    if y.min() < 0 or y.max() >= CLASSES:
        raise DataError(f"{path}: labels must lie in [0, {CLASSES - 1}], got {y.min()}..{y.max()}")
    return x, y


def _block(cin: int, cout: int) -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(cin, cout, 3, padding=1, bias=False),
        nn.BatchNorm2d(cout),
        nn.ReLU(),
        nn.Conv2d(cout, cout, 3, padding=1, bias=False),
        nn.BatchNorm2d(cout),
        nn.ReLU(),
    )


class SegmentationNet(nn.Module):
    """A small U-Net-style encoder-decoder (DeepCAM's reference is DeepLabv3+ on Xception).

    Encoder: two conv blocks at full and half resolution, a bottleneck at a
    quarter; decoder: ConvTranspose2d (stride 2) up, concatenated with the
    encoder's features at that resolution, a conv block; a 1x1 conv to the
    3 class logits at full resolution.  H and W must be multiples of 4.
    """

    def __init__(self, in_channels: int, width: int) -> None:
        super().__init__()
        w = width
        self.enc1, self.enc2, self.mid = (
            _block(in_channels, w),
            _block(w, 2 * w),
            _block(2 * w, 4 * w),
        )
        self.pool = nn.MaxPool2d(2)
        self.up2, self.dec2 = nn.ConvTranspose2d(4 * w, 2 * w, 2, stride=2), _block(4 * w, 2 * w)
        self.up1, self.dec1 = nn.ConvTranspose2d(2 * w, w, 2, stride=2), _block(2 * w, w)
        self.head = nn.Conv2d(w, CLASSES, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        e1 = self.enc1(x)
        e2 = self.enc2(self.pool(e1))
        m = self.mid(self.pool(e2))
        d2 = self.dec2(torch.cat([self.up2(m), e2], 1))
        d1 = self.dec1(torch.cat([self.up1(d2), e1], 1))
        out: torch.Tensor = self.head(d1)
        return out
