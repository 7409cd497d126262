"""``npz``: arrays from a .npz file."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from aihpc.base.errors import ConfigError, DataError
from aihpc.tasks.image.data import load_dataset


def _write(path, **arrays):
    np.savez(path, **arrays)
    return path


def _images(n, shape, seed=0, dtype=np.uint8):
    rng = np.random.default_rng(seed)
    if dtype == np.uint8:
        return rng.integers(0, 256, size=(n,) + shape, dtype=np.uint8)
    return rng.normal(size=(n,) + shape).astype(dtype)


@pytest.mark.parametrize(
    "shape, layout, expect",
    [
        ((3, 6, 5), "auto", (3, 6, 5)),  # NCHW
        ((6, 5, 3), "auto", (3, 6, 5)),  # NHWC
        ((6, 5), "auto", (1, 6, 5)),  # NHW
        ((4, 4, 3), "NHWC", (3, 4, 4)),  # ambiguous shape, explicit layout
        ((4, 4, 3), "auto", (4, 4, 3)),  # ... auto reads it as NCHW
    ],
)
def test_layouts(tmp_path, shape, layout, expect):
    x = _images(40, shape)
    y = np.arange(40) % 4
    f = _write(tmp_path / "d.npz", x=x, y=y)
    data = load_dataset("npz", path=f, layout=layout)
    assert data.input_shape == expect
    assert data.num_train + data.num_val == 40 and data.num_classes == 4
    # values: uint8 scaled to [0, 1], layout converted exactly
    raw = load_dataset("npz", path=f, layout=layout, normalize=False)
    X, _ = raw.tensors("train")
    idx = raw.train.indices
    ref = x.astype(np.float32) / 255.0
    if layout == "NHWC" or (
        layout == "auto" and len(shape) == 3 and shape[2] == 3 and shape[0] > 4
    ):
        ref = ref.transpose(0, 3, 1, 2)
    elif len(shape) == 2:
        ref = ref[:, None]
    np.testing.assert_allclose(X.numpy(), ref[idx], rtol=1e-6)


def test_float_values_normalised_on_train_split_and_stratified(tmp_path):
    x = (
        _images(100, (2, 5, 5), dtype=np.float32) * np.array([1.0, 4.0], np.float32)[:, None, None]
        + 3
    )
    y = np.repeat([0, 1, 2], [20, 30, 50])
    f = _write(tmp_path / "f.npz", x=x, y=y, classes=np.array(["cat", "dog", "emu"]))
    data = load_dataset("npz", path=f, val_fraction=0.2, seed=4)
    assert data.classes == ["cat", "dog", "emu"] and data.num_classes == 3
    assert (data.num_train, data.num_val) == (80, 20)
    _, yv = data.tensors("val")
    assert np.bincount(yv.numpy()).tolist() == [4, 6, 10]
    train = x[data.train.indices].astype(np.float64)
    np.testing.assert_allclose(data.mean, train.mean(axis=(0, 2, 3)), rtol=1e-6)
    np.testing.assert_allclose(data.std, train.std(axis=(0, 2, 3)), rtol=1e-6)
    X, _ = data.tensors("train")
    np.testing.assert_allclose(X.double().mean(dim=(0, 2, 3)).numpy(), 0.0, atol=1e-5)
    np.testing.assert_allclose(
        X.double().std(dim=(0, 2, 3), unbiased=False).numpy(), 1.0, atol=1e-5
    )
    same = load_dataset("npz", path=f, val_fraction=0.2, seed=4).tensors("val")
    other = load_dataset("npz", path=f, val_fraction=0.2, seed=5).tensors("val")
    assert torch.equal(same[0], data.tensors("val")[0])
    assert not torch.equal(other[0], same[0])


def test_explicit_validation_arrays(tmp_path):
    x, xv = _images(30, (1, 4, 4)), _images(12, (1, 4, 4), seed=1)
    f = _write(tmp_path / "v.npz", x=x, y=np.arange(30) % 3, x_val=xv, y_val=np.arange(12) % 3)
    data = load_dataset("npz", path=f, val_fraction=0.5)
    assert (data.num_train, data.num_val) == (30, 12)
    Xv, yv = load_dataset("npz", path=f, normalize=False).tensors("val")
    np.testing.assert_allclose(Xv.numpy(), xv / 255.0, rtol=1e-6)
    assert yv.tolist() == (np.arange(12) % 3).tolist()
    # statistics come from x only, not x_val
    np.testing.assert_allclose(data.mean[0], (x / 255.0).mean(), rtol=1e-6)


def test_missing_path_and_not_a_file(tmp_path):
    with pytest.raises(ConfigError, match="needs path"):
        load_dataset("npz")
    with pytest.raises(DataError, match=r"npz file not found: .*nothere\.npz"):
        load_dataset("npz", path=tmp_path / "nothere.npz")
    with pytest.raises(DataError, match=f"npz path is not a file: {tmp_path}"):
        load_dataset("npz", path=tmp_path)


def test_corrupt_file(tmp_path):
    f = tmp_path / "junk.npz"
    f.write_bytes(b"this is not a zip archive")
    with pytest.raises(DataError, match=r"junk\.npz is not an \.npz archive"):
        load_dataset("npz", path=f)


@pytest.mark.parametrize(
    "arrays, match",
    [
        (dict(x=np.zeros((4, 1, 2, 2))), r"missing required array\(s\) y; found x"),
        (dict(y=np.zeros(4, int)), r"missing required array\(s\) x; found y"),
        (dict(x=np.zeros((4, 1, 2, 2)), y=np.arange(3)), "'x' has 4 samples but 'y' has 3"),
        (dict(x=np.zeros((0, 1, 2, 2)), y=np.zeros(0, int)), "'x' holds no samples"),
        (dict(x=np.zeros((4, 2, 2)), y=np.arange(4), x_val=np.zeros((2, 2, 2))), "given together"),
        (
            dict(
                x=np.zeros((4, 2, 2)),
                y=np.arange(4) % 2,
                x_val=np.zeros((2, 2, 2)),
                y_val=np.arange(3),
            ),
            "'x_val' has 2 samples but 'y_val' has 3",
        ),
        (
            dict(
                x=np.zeros((4, 2, 2)),
                y=np.arange(4) % 2,
                x_val=np.zeros((2, 3, 3)),
                y_val=np.arange(2),
            ),
            r"'x_val' samples have shape \(1, 3, 3\)",
        ),
        (dict(x=np.zeros((4, 2)), y=np.arange(4)), r"must be 3-D .* got shape \(4, 2\)"),
        (dict(x=np.zeros((4, 2, 2)), y=np.array([0, 1, -1, 0])), "negative label -1"),
        (dict(x=np.zeros((4, 2, 2)), y=np.array([0.5, 1, 1, 0])), "integer labels"),
        (dict(x=np.zeros((4, 2, 2)), y=np.zeros(4, int)), "need at least 2 classes, got 1"),
        (
            dict(x=np.zeros((4, 2, 2)), y=np.array([0, 1, 2, 0]), classes=np.array(["a", "b"])),
            "label 2 out of range for 2 classes",
        ),
        (dict(x=np.full((4, 2, 2), np.nan), y=np.arange(4) % 2), "non-finite"),
    ],
)
def test_bad_contents_name_the_file(tmp_path, arrays, match):
    f = _write(tmp_path / "bad.npz", **arrays)
    with pytest.raises(DataError, match=match) as info:
        load_dataset("npz", path=f)
    assert "bad.npz" in str(info.value)


def test_bad_layout_option(tmp_path):
    f = _write(tmp_path / "a.npz", x=np.zeros((4, 2, 2)), y=np.arange(4) % 2)
    with pytest.raises(ConfigError, match="layout must be one of auto, NCHW, NHWC, NHW, got 'CHW'"):
        load_dataset("npz", path=f, layout="CHW")
    with pytest.raises(DataError, match=r"layout NCHW must be 4-D, got shape \(4, 2, 2\)"):
        load_dataset("npz", path=f, layout="NCHW")
