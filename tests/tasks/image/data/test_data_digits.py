"""``digits``: scikit-learn's bundled handwritten digits."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from aihpc.base.errors import ConfigError
from aihpc.tasks.image.data import load_dataset


def test_digits_shapes_counts_and_classes():
    data = load_dataset("digits")
    assert data.name == "digits"
    assert data.num_train + data.num_val == 1797
    assert data.num_val == round(1797 * 0.2)
    assert data.num_classes == 10 and data.classes == [str(i) for i in range(10)]
    assert data.input_shape == (1, 8, 8)
    x, y = data.train[0]
    assert x.shape == (1, 8, 8) and x.dtype == torch.float32 and y.dtype == torch.int64
    assert data.skipped == [] and "1438 train / 359 val" in data.describe()


def test_digits_normalisation_against_numpy():
    from sklearn.datasets import load_digits  # 1.3 s to import: in the test, not at collection

    data = load_dataset("digits", seed=5)
    Xt, yt = data.tensors("train")
    Xv, yv = data.tensors("val")
    ref = load_digits()
    raw = ref.images.astype(np.float64)[:, None] / 16.0
    train_idx, val_idx = data.train.indices, data.val.indices
    assert sorted(train_idx.tolist() + val_idx.tolist()) == list(range(1797))
    assert yt.tolist() == ref.target[train_idx].tolist()
    assert yv.tolist() == ref.target[val_idx].tolist()
    # Statistics of the train split only, computed here with numpy.
    mean, std = raw[train_idx].mean(), raw[train_idx].std()
    assert data.mean[0] == pytest.approx(mean, rel=1e-9)
    assert data.std[0] == pytest.approx(std, rel=1e-9)
    assert mean != pytest.approx(raw.mean(), rel=1e-6)  # the val split did not leak in
    np.testing.assert_allclose(Xt.numpy(), (raw[train_idx] - mean) / std, atol=1e-5)
    np.testing.assert_allclose(Xv.numpy(), (raw[val_idx] - mean) / std, atol=1e-5)
    assert Xt.double().mean().item() == pytest.approx(0.0, abs=1e-5)
    assert Xt.double().std(unbiased=False).item() == pytest.approx(1.0, abs=1e-5)


def test_digits_stratified_split():
    from sklearn.datasets import load_digits

    data = load_dataset("digits", val_fraction=0.3, seed=1)
    _, yv = data.tensors("val")
    counts = np.bincount(load_digits().target, minlength=10)
    val_counts = np.bincount(yv.numpy(), minlength=10)
    assert np.all(np.abs(val_counts - counts * 0.3) <= 1)


def test_digits_determinism_by_seed():
    a = load_dataset("digits", seed=0).tensors("val")
    b = load_dataset("digits", seed=0).tensors("val")
    c = load_dataset("digits", seed=1).tensors("val")
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    assert not torch.equal(a[0], c[0])


def test_digits_without_normalisation_is_in_unit_range():
    data = load_dataset("digits", normalize=False)
    X, _ = data.tensors("train")
    assert X.min().item() == 0.0 and X.max().item() == 1.0
    assert data.mean == (0.0,) and data.std == (1.0,)


def test_digits_takes_no_path():
    with pytest.raises(ConfigError, match="takes no path, got 'x'"):
        load_dataset("digits", path="x")
