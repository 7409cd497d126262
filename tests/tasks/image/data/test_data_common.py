"""The shared interface: registry, argument checks, stratified split, statistics."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

import aihpc.tasks.image.data as D
from aihpc.base.errors import AihpcError, ConfigError, DataError
from aihpc.tasks.image.data.base import channel_stats, stratified_split


def test_names_and_describe():
    assert D.names() == ["digits", "imagefolder", "npz", "synthetic"]
    for name in D.names():
        assert D.describe(name).startswith(name + ": ")


def test_unknown_name_lists_valid_ones():
    with pytest.raises(
        ConfigError, match=r"unknown data set 'cifar'.*digits, imagefolder, npz, synthetic"
    ):
        D.load_dataset("cifar")


@pytest.mark.parametrize("fraction", [0, 1, 1.5, -0.1, "0.2", True])
def test_bad_val_fraction(fraction):
    with pytest.raises(ConfigError, match="val_fraction"):
        D.load_dataset("digits", val_fraction=fraction)


@pytest.mark.parametrize("seed", [-1, 1.5, "0"])
def test_bad_seed(seed):
    with pytest.raises(ConfigError, match="seed must be an integer >= 0"):
        D.load_dataset("digits", seed=seed)


def test_unknown_option_is_named():
    with pytest.raises(ConfigError, match=r"unknown option\(s\) for data set 'digits': colour"):
        D.load_dataset("digits", colour=True)
    with pytest.raises(ConfigError, match=r"'synthetic': bogus; valid: channels, difficulty"):
        D.load_dataset("synthetic", bogus=1)


def test_errors_are_aihpc_errors():
    assert issubclass(ConfigError, AihpcError) and issubclass(DataError, AihpcError)


def test_stratified_split_counts_and_determinism():
    labels = np.repeat(np.arange(4), [10, 20, 30, 41])  # 101 samples
    train, val = stratified_split(labels, 0.25, seed=3)
    assert len(val) == round(101 * 0.25)
    assert len(train) + len(val) == 101
    assert np.intersect1d(train, val).size == 0
    # per class: floor or ceil of the class quota
    for k, n_k in enumerate([10, 20, 30, 41]):
        got = int((labels[val] == k).sum())
        assert np.floor(n_k * 0.25) <= got <= np.ceil(n_k * 0.25)
    again = stratified_split(labels, 0.25, seed=3)
    other = stratified_split(labels, 0.25, seed=4)
    assert np.array_equal(train, again[0]) and np.array_equal(val, again[1])
    assert not np.array_equal(val, other[1])


def test_stratified_split_keeps_a_training_sample_per_class():
    labels = np.array([0, 1, 1, 1, 1])
    train, val = stratified_split(labels, 0.9, seed=0)
    assert 0 in train and labels[train].tolist().count(1) >= 1
    with pytest.raises(DataError, match="empty validation split"):
        stratified_split(np.array([0, 1]), 0.2, seed=0)


def test_channel_stats_matches_numpy_over_chunks():
    rng = np.random.default_rng(0)
    x = rng.normal(loc=[[[5.0]], [[-2.0]]], scale=[[[3.0]], [[0.5]]], size=(50, 2, 4, 3))
    mean, std = channel_stats([x[:7], x[7:31], x[31:]])
    np.testing.assert_allclose(mean, x.mean(axis=(0, 2, 3)), rtol=1e-12)
    np.testing.assert_allclose(std, x.std(axis=(0, 2, 3)), rtol=1e-12)
    const = np.full((3, 1, 2, 2), 7.0)
    m, s = channel_stats([const])
    assert m[0] == 7.0 and s[0] == 1.0  # constant channel: std 1, no division by zero


def test_tensors_bad_split_and_size_limit():
    data = D.load_dataset("digits")
    with pytest.raises(ConfigError, match="split must be 'train' or 'val', got 'test'"):
        data.tensors("test")
    with pytest.raises(DataError, match=r"over max_bytes=1000"):
        data.tensors("train", max_bytes=1000)


def test_getitem_matches_tensors_and_dataloader_works():
    data = D.load_dataset("synthetic", num_samples=200, image_size=8, channels=2, difficulty=0.5)
    X, y = data.tensors("val")
    for i in (0, 7, len(data.val) - 1, -1):
        xi, yi = data.val[i]
        assert xi.dtype == torch.float32 and yi.dtype == torch.int64
        assert torch.equal(xi, X[i]) and int(yi) == int(y[i])
    with pytest.raises(IndexError):
        data.val[len(data.val)]
    batches = list(DataLoader(data.val, batch_size=16, shuffle=False))
    assert torch.equal(torch.cat([b[0] for b in batches]), X)
    assert torch.equal(torch.cat([b[1] for b in batches]), y)
