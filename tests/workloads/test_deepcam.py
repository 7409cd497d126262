"""DeepCAM-style workload: IOU against hand-worked cases, reader on files written here, signal,
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
from aihpc.workloads.deepcam import generate_fields, iou

W = get("deepcam")
TINY = W.size("tiny")  # 16 x 24


def test_iou_hand_worked():
    label = torch.tensor([[[0, 0, 1, 1], [0, 2, 2, 0]]])
    pred = torch.tensor([[[0, 1, 1, 1], [0, 2, 0, 0]]])
    # class 0: TP 3 (positions (0,0), (1,0), (1,3)), union 5 -> 3/5
    # class 1: TP 2, union 3 -> 2/3; class 2: TP 1, union 2 -> 1/2
    assert iou(pred, label).item() == pytest.approx((3 / 5 + 2 / 3 + 1 / 2) / 3)


def test_iou_absent_class_counts_one_and_samples_average():
    label = torch.tensor([[[0, 0], [1, 1]], [[0, 0], [0, 0]]])
    pred = torch.tensor([[[0, 0], [1, 1]], [[0, 0], [0, 2]]])
    scores = iou(pred, label)
    assert scores[0].item() == pytest.approx(
        1.0
    )  # classes 0 and 1 perfect, class 2 absent from both
    assert scores[1].item() == pytest.approx(
        (3 / 4 + 1 + 0) / 3
    )  # class 2 predicted once, never true


def _write_sample(
    path: Path, data: np.ndarray, labels: np.ndarray, key: str = "climate/labels_0"
) -> None:
    with h5py.File(path, "w") as f:
        f.create_dataset("climate/data", data=data)
        f.create_dataset(key, data=labels)


def _write_stats(path: Path, lo, hi) -> None:
    with h5py.File(path, "w") as f:
        f.create_dataset("climate/minval", data=np.asarray(lo, np.float32))
        f.create_dataset("climate/maxval", data=np.asarray(hi, np.float32))


def test_reader_normalises_with_the_stats_file_and_transposes(tmp_path: Path):
    (tmp_path / "train").mkdir()
    rng = np.random.default_rng(0)
    data = rng.uniform(0, 10, size=(2, 4, 6, 4)).astype(np.float32)
    labels = rng.integers(0, 3, size=(2, 4, 6))
    _write_sample(tmp_path / "train" / "data-0.h5", data[0], labels[0])
    _write_sample(tmp_path / "train" / "data-1.h5", data[1], labels[1], key="climate/labels")
    lo, hi = [0.0, 1.0, 2.0, -5.0], [10.0, 5.0, 4.0, 5.0]
    _write_stats(tmp_path / "stats.h5", lo, hi)
    s = W.read(tmp_path, "train", TINY)
    assert s.x.shape == (2, 4, 4, 6) and s.y.dtype == torch.int64
    # channel 3 of sample 1 at (2, 5): (x - min) / (max - min)
    assert s.x[1, 3, 2, 5].item() == pytest.approx((data[1, 2, 5, 3] + 5.0) / 10.0, rel=1e-6)
    assert s.x[0, 1, 0, 0].item() == pytest.approx((data[0, 0, 0, 1] - 1.0) / 4.0, rel=1e-6)
    assert torch.equal(s.y, torch.from_numpy(labels))


def test_reader_rejects_bad_files(tmp_path: Path):
    (tmp_path / "train").mkdir()
    _write_sample(
        tmp_path / "train" / "data-0.h5", np.zeros((4, 6, 4), np.float32), np.zeros((4, 6), int)
    )
    with pytest.raises(DataError, match="statistics"):
        W.read(tmp_path, "train", TINY)
    _write_stats(tmp_path / "stats.h5", [0, 0, 0, 0], [1, 1, 1, 0])
    with pytest.raises(DataError, match="max > min"):
        W.read(tmp_path, "train", TINY)
    _write_stats(tmp_path / "stats.h5", [0, 0, 0, 0], [1, 1, 1, 1])
    _write_sample(
        tmp_path / "train" / "data-0.h5", np.zeros((4, 6, 4), np.float32), np.full((4, 6), 3)
    )
    with pytest.raises(DataError, match="labels must lie in"):
        W.read(tmp_path, "train", TINY)
    _write_sample(
        tmp_path / "train" / "data-0.h5", np.zeros((4, 6, 3), np.float32), np.zeros((4, 6), int)
    )
    with pytest.raises(DataError, match="expected data"):
        W.read(tmp_path, "train", TINY)


def test_generated_files_read_back(tmp_path: Path):
    W.generate(tmp_path, TINY, seed=3)
    train, valid = W.read(tmp_path, "train", TINY), W.read(tmp_path, "validation", TINY)
    assert train.x.shape == (TINY.n_train, 4, 16, 24) and len(valid) == TINY.n_valid
    # normalised by the training set's own min and max: every training value in [0, 1]
    assert train.x.min().item() == pytest.approx(
        0.0, abs=1e-6
    ) and train.x.max().item() == pytest.approx(1.0)


def test_generated_features_sit_where_the_labels_are():
    """Cyclone pixels have low pressure, river pixels high water vapour: the labels carry signal."""
    data, labels = generate_fields(60, (32, 48), 0)
    tmq, psl = data[..., 0], data[..., 3]
    cyclone, river, background = labels == 1, labels == 2, labels == 0
    assert 0.005 < cyclone.mean() < 0.1 and 0.01 < river.mean() < 0.2
    assert psl[cyclone].mean() < psl[background].mean() - 1.0 * psl[background].std()
    assert tmq[river].mean() > tmq[background].mean() + 0.5 * tmq[background].std()
    # and no single threshold on water vapour separates rivers from the rest (IOU of the best one <
    # 0.8)
    best = max(
        ((tmq > t) & river).sum() / ((tmq > t) | river).sum()
        for t in np.percentile(tmq, range(50, 100, 2))
    )
    assert best < 0.8


def test_model_is_counted_completely():
    model = W.model(TINY)
    assert model(torch.zeros(2, 4, 16, 24)).shape == (2, 3, 16, 24)
    train = count_ops(model, (2, 4, 16, 24), loss="cross_entropy")
    assert train.uncounted == {}
    assert count_ops(model, (2, 4, 16, 24), train=False).uncounted == {}
    # the transposed convolutions by hand: each input position x C_in x C_out x kernel (2 x 2)
    up2 = 2 * (4 * 6) * 16 * 8 * 4  # 16 -> 8 channels, from the 4 x 6 bottleneck
    up1 = 2 * (8 * 12) * 8 * 4 * 4  # 8 -> 4 channels, from 8 x 12
    # 2 ops per MAC, + 1 per output element for the bias (batch 2 x output positions x channels)
    assert train.by_module["up2"]["forward"] == 2 * up2 + 2 * (8 * 12) * 8
    assert train.by_module["up1"]["forward"] == 2 * up1 + 2 * (16 * 24) * 4
