"""CosmoFlow-style workload: reader on files written here, the generator's signal, the model's
count."""

from __future__ import annotations

from pathlib import Path

import h5py
import numpy as np
import pytest
import torch

from aihpc.base.errors import DataError
from aihpc.counting import count_ops
from aihpc.workloads import get
from aihpc.workloads.cosmoflow import CosmoFlowNet, generate_volumes
from aihpc.workloads.tfrecord import encode_example, write_records

W = get("cosmoflow")
TINY = W.size("tiny")  # dim 8


def _volume(seed: int, side: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 50, size=(side, side, side, 4)).astype(np.int16)


def _write_h5(path: Path, x: np.ndarray, y: np.ndarray, keys=("full", "unitPar")) -> None:
    with h5py.File(path, "w") as f:
        f.create_dataset(keys[0], data=x)
        f.create_dataset(keys[1], data=y)


def test_reader_hdf5_full_and_split_formats(tmp_path: Path):
    for split in ("train", "validation"):
        (tmp_path / split).mkdir()
    x0, x1 = _volume(0, 8), _volume(1, 8)
    y0, y1 = (
        np.array([0.1, -0.2, 0.3, -0.4], np.float32),
        np.array([0.5, 0.6, -0.7, 0.8], np.float32),
    )
    _write_h5(tmp_path / "train" / "a.hdf5", x0, y0)  # the simulation's own layout
    _write_h5(tmp_path / "train" / "b.hdf5", x1, y1, keys=("x", "y"))  # prepare.py's split files
    samples = W.read(tmp_path, "train", TINY)
    assert samples.x.shape == (2, 4, 8, 8, 8) and samples.y.shape == (2, 4)
    # log(1 + counts), channels first: voxel (i, j, k), channel c of file a
    assert samples.x[0, 2, 1, 3, 5].item() == pytest.approx(
        np.log1p(float(x0[1, 3, 5, 2])), rel=1e-6
    )
    assert samples.x[1, 0, 7, 0, 4].item() == pytest.approx(
        np.log1p(float(x1[7, 0, 4, 0])), rel=1e-6
    )
    torch.testing.assert_close(samples.y, torch.tensor(np.stack([y0, y1])))


def test_reader_splits_larger_universes_into_sub_volumes(tmp_path: Path):
    (tmp_path / "train").mkdir()
    big = _volume(2, 16)
    y = np.array([0.0, 0.25, 0.5, 0.75], np.float32)
    _write_h5(tmp_path / "train" / "univ.hdf5", big, y)
    samples = W.read(tmp_path, "train", TINY)
    assert samples.x.shape == (8, 4, 8, 8, 8)
    # sub-volume order follows prepare.py's split_universe: axis 0 outermost, then 1, then 2
    index = 1 * 4 + 0 * 2 + 1  # offsets (8, 0, 8)
    expected = np.log1p(big[8:16, 0:8, 8:16].astype(np.float64)).transpose(3, 0, 1, 2)
    np.testing.assert_allclose(samples.x[index].numpy(), expected, rtol=1e-6)
    assert torch.all(samples.y == torch.tensor(y))


@pytest.mark.parametrize("compress", [False, True])
def test_reader_tfrecord(tmp_path: Path, compress: bool):
    (tmp_path / "validation").mkdir()
    x = _volume(3, 8)
    y = np.array([-1.0, 1.0, 0.5, -0.5], np.float32)
    write_records(
        tmp_path / "validation" / "s.tfrecord",
        [encode_example({"x": x.tobytes(), "y": y})],
        compress=compress,
    )
    samples = W.read(tmp_path, "validation", TINY)
    np.testing.assert_allclose(
        samples.x[0].numpy(), np.log1p(x.astype(np.float64)).transpose(3, 0, 1, 2), rtol=1e-6
    )
    assert samples.y[0].tolist() == [-1.0, 1.0, 0.5, -0.5]


def test_reader_rejects_bad_files(tmp_path: Path):
    (tmp_path / "train").mkdir()
    with pytest.raises(DataError, match="no .hdf5"):
        W.read(tmp_path, "train", TINY)
    with pytest.raises(DataError, match="does not exist"):
        W.read(tmp_path, "validation", TINY)
    _write_h5(tmp_path / "train" / "bad.hdf5", _volume(0, 12), np.zeros(4, np.float32))
    with pytest.raises(DataError, match="multiple of 8"):
        W.read(tmp_path, "train", TINY)
    (tmp_path / "train" / "bad.hdf5").write_bytes(b"not hdf5")
    with pytest.raises(DataError, match="cannot read HDF5"):
        W.read(tmp_path, "train", TINY)


def test_generated_files_read_back(tmp_path: Path):
    W.generate(tmp_path, TINY, seed=5)
    train, valid = W.read(tmp_path, "train", TINY), W.read(tmp_path, "validation", TINY)
    assert len(train) == TINY.n_train and len(valid) == TINY.n_valid
    x, y = generate_volumes(TINY.n_train, 8, 10)  # split "train" uses seed 2 * seed + 0
    torch.testing.assert_close(train.y, torch.from_numpy(y))
    assert torch.all(train.y.abs() <= 1)


@pytest.mark.slow
def test_generated_volumes_carry_the_parameters():
    """Least squares on hand-made summary statistics recovers all 4 parameters (chance MAE: 0.5)."""
    x, y = generate_volumes(240, 16, 0)
    logs = np.log1p(x.astype(np.float64))
    feats = np.concatenate(
        [
            logs.mean(axis=(1, 2, 3)),
            np.log(logs.var(axis=(1, 2, 3))),
            np.log(np.diff(logs, axis=1).var(axis=(1, 2, 3))),
            np.ones((len(x), 1)),
        ],
        1,
    )
    coef, *_ = np.linalg.lstsq(feats[:200], y[:200], rcond=None)
    mae = np.abs(np.clip(feats[200:] @ coef, -1, 1) - y[200:]).mean(0)
    assert np.all(mae < 0.25), mae  # every parameter well below chance (0.5)
    assert mae.mean() < 0.15, mae


def test_mae_of_a_constant_model_is_mean_absolute_target():
    class Zero(torch.nn.Module):
        def forward(self, x):
            return torch.zeros(x.shape[0], 4)

    from aihpc.workloads.base import Samples

    y = torch.tensor([[0.5, -0.5, 0.25, 0.0], [1.0, 0.0, -0.75, 0.25]])
    assert W.evaluate(Zero(), Samples(torch.zeros(2, 4, 8, 8, 8), y), 1) == pytest.approx(3.25 / 8)


def test_model_is_counted_completely():
    model = W.model(TINY)
    assert model(torch.zeros(2, 4, 8, 8, 8)).shape == (2, 4)
    train = count_ops(model, (2, 4, 8, 8, 8), loss="mse")
    assert train.uncounted == {}
    # conv MACs by hand: layer 1 (4 -> 4 channels, 8^3 positions, 27 taps), layer 2 (4 -> 8, 4^3)
    convs = 2 * (8**3 * 4 * 4 * 27 + 4**3 * 4 * 8 * 27)
    fc = 2 * (8 * 2**3 * 16 + 16 * 8 + 8 * 4)  # flatten 8 channels x 2^3 -> 16 -> 8 -> 4
    assert train.conv_linear_macs == convs + fc
    assert count_ops(model, (2, 4, 8, 8, 8), train=False).uncounted == {}


def test_model_shape_follows_the_size():
    net = CosmoFlowNet(16, 8, 3, (32, 16))
    assert net(torch.zeros(1, 4, 16, 16, 16)).shape == (1, 4)
    out = net(torch.randn(3, 4, 16, 16, 16) * 100)
    assert torch.all(out.abs() <= 1.2)  # tanh x 1.2
