"""CosmoFlow-style workload: a 3D CNN regresses 4 cosmological parameters from 3D volumes.

MLPerf HPC's CosmoFlow (Mathuriya et al., SC'18; mlcommons/hpc ``cosmoflow``)
reads 128^3 sub-volumes of N-body dark-matter simulations, 4 channels (the
particle counts at 4 redshifts, int16), and regresses the 4 simulation
parameters, each scaled to [-1, 1] (``unitPar``); quality is the mean
absolute error (MLPerf HPC v3.0 target: MAE 0.124).

Generator (the real data set is terabytes)
------------------------------------------
Each sample draws ``u ~ U(-1, 1)^4`` (its ``unitPar``) and builds a
lognormal density field, the standard toy model of the cosmic density
(Coles & Jones 1991, MNRAS 248, 1), with the 4 parameters acting the way
their physical counterparts do:

* a Gaussian random field ``g`` with power spectrum
  ``P(k) ∝ k^n exp(-(k / k_c)^2)``, ``n = -2 + 1.5 u1`` (the spectral slope),
  scaled to rms ``sigma = 0.5 * 1.6^u0`` (the amplitude, as sigma_8);
* channel ``c = 0..3`` (redshift, earliest first) is the field grown by
  ``D_c = gamma^(3 - c)``, ``gamma = 0.7 + 0.25 u3`` (the growth rate, as the
  matter density sets it), ``delta_c = D_c g``;
* density ``rho_c = exp(delta_c - var(delta_c) / 2)`` (mean 1), and voxel
  counts ``~ Poisson(nbar rho_c)`` with ``nbar = 20 * 2^u2`` particles per
  voxel (the mean density), stored as int16, channels last.

So amplitude, slope, growth and mean density each leave a distinct imprint
(variance, scale dependence, channel-to-channel ratio, mean count), under
shot noise and sample variance, which bound the achievable MAE above 0.

Files and reader
----------------
``generate`` writes one sample per file, either HDF5 with the original
simulation's datasets ``full`` (D, D, D, 4) int16 and ``unitPar`` (4,)
float32, or TFRecord (``prepare.py --write-tfrecord``): one
``tf.train.Example`` with ``x`` (the int16 voxels as bytes) and ``y`` (4
floats).  ``read`` accepts those, ``prepare.py``'s split HDF5 (``x``,
``y``), and ``full`` volumes larger than the sample (split into sub-volumes
of the sample's size, as ``prepare.py`` does).  Inputs are ``log(1 + x)``
(the reference ``apply_log``), channels first.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from torch import nn

from aihpc.base.errors import DataError
from aihpc.workloads.base import Samples, Size, Workload, split_files
from aihpc.workloads.tfrecord import encode_example, parse_example, read_records, write_records

N_PARAMS = 4
CHANNELS = 4
K_CUTOFF = 0.35  # cycles per voxel: the field's smoothing scale, ~3 voxels


def _params(u: np.ndarray) -> dict[str, np.ndarray]:
    """Physical parameters from unit parameters ``u`` (N, 4) in [-1, 1]."""
    return {
        "sigma": 0.5 * 1.6 ** u[:, 0],
        "slope": -2.0 + 1.5 * u[:, 1],
        "nbar": 20.0 * 2.0 ** u[:, 2],
        "gamma": 0.7 + 0.25 * u[:, 3],
    }


def gaussian_fields(n: int, dim: int, slope: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """``n`` unit-variance Gaussian random fields (n, dim, dim, dim), P(k) ∝ k^slope exp(-(k/k_c)²).

    White noise filtered in Fourier space by sqrt(P); the variance is that
    of the filter, mean(|H|^2) over the full grid, so each field is scaled by
    the expected, not its own, rms (sample variance is kept, as in nature).
    """
    k1 = np.fft.fftfreq(dim)
    kz = np.fft.rfftfreq(dim)
    k = np.sqrt(k1[:, None, None] ** 2 + k1[None, :, None] ** 2 + kz[None, None, :] ** 2)
    kfull = np.sqrt(k1[:, None, None] ** 2 + k1[None, :, None] ** 2 + k1[None, None, :] ** 2)
    out = np.empty((n, dim, dim, dim), dtype=np.float64)
    for i in range(n):
        with np.errstate(divide="ignore"):
            h = np.where(k > 0, k ** (slope[i] / 2) * np.exp(-0.5 * (k / K_CUTOFF) ** 2), 0.0)
            hfull = np.where(kfull > 0, kfull ** slope[i] * np.exp(-((kfull / K_CUTOFF) ** 2)), 0.0)
        noise = np.fft.rfftn(rng.standard_normal((dim, dim, dim)))
        out[i] = np.fft.irfftn(noise * h, s=(dim, dim, dim), axes=(0, 1, 2)) / np.sqrt(hfull.mean())
    return out


def generate_volumes(n: int, dim: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """``n`` samples: counts (n, dim, dim, dim, 4) int16, channels last; unitPar (n, 4) float32."""
    rng = np.random.default_rng(seed)
    u = rng.uniform(-1.0, 1.0, size=(n, N_PARAMS))
    p = _params(u)
    g = gaussian_fields(n, dim, p["slope"], rng) * p["sigma"][:, None, None, None]
    counts = np.empty((n, dim, dim, dim, CHANNELS), dtype=np.int16)
    for c in range(CHANNELS):
        growth = (p["gamma"] ** (CHANNELS - 1 - c))[:, None, None, None]
        delta = growth * g
        var = (growth * p["sigma"][:, None, None, None]) ** 2
        rate = p["nbar"][:, None, None, None] * np.exp(delta - var / 2)
        counts[..., c] = np.minimum(rng.poisson(rate), np.iinfo(np.int16).max)
    return counts, u.astype(np.float32)


class CosmoFlow(Workload):
    name = "cosmoflow"
    benchmark = "aihpc_cosmoflow"
    description = (
        "CosmoFlow-style 3D CNN: 4 cosmological parameters from 4-channel 3D volumes (MAE)"
    )
    metric = "mae"
    metric_key = "eval_error"
    higher_is_better = False
    loss_name = "mse"
    # How the target was chosen (measured on this project's shared 2-core CPU,
    # the "small" size: 16^3 volumes, 512 training and 128 validation samples):
    # chance (predicting 0) is MAE 0.5; least squares on hand-made summary
    # statistics (mean, variance and gradient variance of log counts per
    # channel) reaches 0.08, so the data carry all 4 parameters.  The network
    # reached validation MAE 0.19 after 10 epochs and 0.129 after 14 (of a
    # 16-epoch cosine schedule, about 2 minutes on one busy core), with the
    # epoch-to-epoch noise of a small validation set (0.30 -> 0.19 -> 0.20
    # -> 0.17).  MLPerf's 0.124 is then a coin toss within the budget; 0.20
    # is met reliably near the middle of it, so it is the target: 2.5x
    # better than chance, 2.5x worse than the statistics' least squares.
    # Checked with `aihpc train-to-target --workload cosmoflow --runs 5`: met
    # after 8, 6, 10, 11, 11 epochs, 55-148 s (olympic mean 114 s).
    target = 0.20
    target_note = (
        "MAE 0.20: chance 0.5, least squares on summary statistics 0.08; the small size "
        "reached 0.19 after 10 epochs and 0.13 after 14 of its 16-epoch budget on a busy 2-core CPU"
    )
    sizes = {
        "small": Size(
            n_train=512,
            n_valid=128,
            batch_size=16,
            lr=1e-3,
            max_epochs=16,
            options={"dim": 16, "conv": 8, "layers": 3, "fc": (32, 16), "format": "hdf5"},
        ),
        "tiny": Size(
            n_train=32,
            n_valid=16,
            batch_size=8,
            lr=2e-3,
            max_epochs=4,
            options={"dim": 8, "conv": 4, "layers": 2, "fc": (16, 8), "format": "hdf5"},
        ),
    }

    def generate(self, out_dir: Path, size: Size, seed: int) -> None:
        import h5py

        dim, fmt = int(size.options["dim"]), str(size.options.get("format", "hdf5"))
        for i, (split, n) in enumerate((("train", size.n_train), ("validation", size.n_valid))):
            folder = Path(out_dir) / split
            folder.mkdir(parents=True, exist_ok=True)
            x, y = generate_volumes(n, dim, seed * 2 + i)
            for j in range(n):
                if fmt == "tfrecord":
                    record = encode_example({"x": x[j].tobytes(), "y": y[j]})
                    write_records(folder / f"univ_{j:06d}.tfrecord", [record])
                else:
                    with h5py.File(folder / f"univ_{j:06d}.hdf5", "w") as f:
                        f.create_dataset("full", data=x[j])
                        f.create_dataset("unitPar", data=y[j])

    def read(self, data_dir: Path, split: str, size: Size) -> Samples:
        dim = int(size.options["dim"])
        xs, ys = [], []
        for path in split_files(data_dir, split, (".hdf5", ".h5", ".tfrecord")):
            for x, y in read_cosmo_file(path, dim):
                xs.append(x)
                ys.append(y)
        counts = torch.from_numpy(np.stack(xs)).float()
        # the reference's apply_log; channels first
        volumes = torch.log1p(counts).permute(0, 4, 1, 2, 3).contiguous()
        return Samples(volumes, torch.from_numpy(np.stack(ys)).float())

    def input_shape(self, size: Size) -> tuple[int, ...]:
        return (CHANNELS, *(int(size.options["dim"]),) * 3)

    def model(self, size: Size) -> nn.Module:
        o = size.options
        return CosmoFlowNet(int(o["dim"]), int(o["conv"]), int(o["layers"]), tuple(o["fc"]))

    def loss(self, train: Samples) -> nn.Module:
        return nn.MSELoss()

    def evaluate(self, model: nn.Module, samples: Samples, batch_size: int) -> float:
        model.eval()
        total = 0.0
        with torch.no_grad():
            for i in range(0, len(samples), batch_size):
                pred = model(samples.x[i : i + batch_size])
                total += float((pred - samples.y[i : i + batch_size]).abs().sum())
        return total / (len(samples) * N_PARAMS)


def read_cosmo_file(path: Path, dim: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """The (voxels (dim, dim, dim, 4) int16, unitPar (4,)) samples of one CosmoFlow file."""
    if path.name.endswith(".tfrecord"):
        out = []
        for record in read_records(path):
            feats = parse_example(record)
            if "x" not in feats or "y" not in feats or not isinstance(feats["x"], list):
                raise DataError(
                    f"{path}: a CosmoFlow record needs features 'x' (bytes) and 'y' (floats)"
                )
            raw, y = feats["x"][0], np.asarray(feats["y"], dtype=np.float32)
            expected = dim**3 * CHANNELS * 2
            if len(raw) != expected or y.shape != (N_PARAMS,):
                raise DataError(
                    f"{path}: expected {expected} bytes of int16 voxels and {N_PARAMS} "
                    f"parameters, got {len(raw)} bytes and {y.size}"
                )
            out.append((np.frombuffer(raw, dtype="<i2").reshape(dim, dim, dim, CHANNELS), y))
        return out
    return _read_hdf5(path, dim)


def _read_hdf5(path: Path, dim: int) -> list[tuple[np.ndarray, np.ndarray]]:
    import h5py

    try:
        with h5py.File(path, "r") as f:
            xkey, ykey = ("full", "unitPar") if "full" in f else ("x", "y")
            if xkey not in f or ykey not in f:
                raise DataError(
                    f"{path}: a CosmoFlow HDF5 file needs datasets 'full' and 'unitPar' "
                    f"(or 'x' and 'y'), found {sorted(f.keys())}"
                )
            x, y = f[xkey][...], np.asarray(f[ykey][...], dtype=np.float32).reshape(-1)
    except OSError as exc:
        raise DataError(f"cannot read HDF5 file {path}: {exc}") from None
    side = x.shape[0]
    if (
        x.ndim != 4
        or x.shape[3] != CHANNELS
        or x.shape[:3] != (side,) * 3
        or side % dim
        or y.size != N_PARAMS
    ):
        raise DataError(
            f"{path}: expected voxels (D, D, D, {CHANNELS}) with D a multiple of {dim} "
            f"and {N_PARAMS} parameters, got {x.shape} and {y.size}"
        )
    n = side // dim
    return [
        (x[a * dim : (a + 1) * dim, b * dim : (b + 1) * dim, c * dim : (c + 1) * dim], y)
        for a in range(n)
        for b in range(n)
        for c in range(n)
    ]


class CosmoFlowNet(nn.Module):
    """The reference CosmoFlow model (``cosmoflow/models/cosmoflow.py``), narrower.

    ``layers`` x (Conv3d 3x3x3 'same', BatchNorm3d, LeakyReLU, MaxPool3d 2), channels
    ``conv * 2^i``; flatten; two hidden dense layers with LeakyReLU (and
    dropout in the reference: 0 here, the data are plentiful); dense 4, tanh,
    times 1.2 (so the [-1, 1] targets lie inside the output range).
    The batch norm is ours: without it the narrow network learned too slowly
    on this CPU (MAE 0.475 after 2 epochs of the small size, chance 0.5).
    """

    def __init__(self, dim: int, conv: int, layers: int, fc: tuple[int, int]) -> None:
        super().__init__()
        blocks: list[nn.Module] = []
        channels = CHANNELS
        for i in range(layers):
            blocks += [
                nn.Conv3d(channels, conv * 2**i, 3, padding=1, bias=False),
                nn.BatchNorm3d(conv * 2**i),
                nn.LeakyReLU(0.3),
                nn.MaxPool3d(2),
            ]
            channels = conv * 2**i
        side = dim // 2**layers
        self.features = nn.Sequential(*blocks)
        self.head = nn.Sequential(
            nn.Flatten(),
            nn.Linear(channels * side**3, fc[0]),
            nn.LeakyReLU(0.3),
            nn.Linear(fc[0], fc[1]),
            nn.LeakyReLU(0.3),
            nn.Linear(fc[1], N_PARAMS),
            nn.Tanh(),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = 1.2 * self.head(self.features(x))
        return out
