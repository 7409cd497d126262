"""``imagefolder``: root/<class>/*.jpg|png, lazily decoded with Pillow."""

from __future__ import annotations

import io

import numpy as np
import pytest
import torch
from PIL import Image
from torch.utils.data import DataLoader

from aihpc.base.errors import ConfigError, DataError
from aihpc.tasks.image.data import load_dataset


def _png(path, arr):
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(arr).save(path, format="PNG")


def _jpeg_bytes(arr) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(arr).save(buf, format="JPEG", quality=90)
    return buf.getvalue()


def make_folder(root, classes=("cat", "dog", "emu"), per_class=5, size=(12, 10), seed=0):
    """PNG images (lossless) of ``size`` = (h, w), random per class; returns {path: array}."""
    rng = np.random.default_rng(seed)
    written = {}
    for k, name in enumerate(classes):
        for i in range(per_class):
            arr = rng.integers(0, 256, size=size + (3,), dtype=np.uint8)
            arr[..., k % 3] = 200  # class-dependent colour
            p = root / name / f"img_{i}.png"
            _png(p, arr)
            written[str(p)] = arr
    return written


def test_loads_shapes_counts_classes_and_values(tmp_path):
    written = make_folder(tmp_path)
    (tmp_path / "cat" / "notes.txt").write_text("not an image")
    _png(tmp_path / "dog" / ".hidden.png", np.zeros((12, 10, 3), np.uint8))
    data = load_dataset("imagefolder", path=tmp_path, normalize=False)
    assert data.classes == ["cat", "dog", "emu"] and data.num_classes == 3
    assert data.input_shape == (3, 12, 10)  # the common image size, no resize
    assert (data.num_train, data.num_val) == (12, 3)
    _, yv = data.tensors("val")
    assert sorted(yv.tolist()) == [0, 1, 2]  # stratified: one of each
    X, y = data.tensors("train")
    for i, path in enumerate(data.train.files):
        np.testing.assert_allclose(
            X[i].numpy(), written[path].transpose(2, 0, 1) / 255.0, atol=1e-6
        )
        assert data.classes[int(y[i])] == path.split("/")[-2]
        xi, yi = data.train[i]
        assert torch.equal(xi, X[i]) and int(yi) == int(y[i])
    assert data.skipped == [] and data.stats_from == 0


def test_normalisation_statistics_on_train_split(tmp_path):
    written = make_folder(tmp_path, per_class=6)
    data = load_dataset("imagefolder", path=tmp_path, val_fraction=0.5, seed=1)
    train = np.stack([written[p] for p in data.train.files]).astype(np.float64) / 255.0
    # the loader scales to float32 before accumulating in float64: agree to float32 precision
    np.testing.assert_allclose(data.mean, train.mean(axis=(0, 1, 2)), rtol=1e-6)
    np.testing.assert_allclose(data.std, train.std(axis=(0, 1, 2)), rtol=1e-6)
    X, _ = data.tensors("train")
    np.testing.assert_allclose(X.double().mean(dim=(0, 2, 3)).numpy(), 0.0, atol=1e-5)
    np.testing.assert_allclose(
        X.double().std(dim=(0, 2, 3), unbiased=False).numpy(), 1.0, atol=1e-5
    )
    assert data.stats_from == data.num_train
    again = load_dataset("imagefolder", path=tmp_path, val_fraction=0.5, seed=1)
    other = load_dataset("imagefolder", path=tmp_path, val_fraction=0.5, seed=2)
    assert again.train.files == data.train.files and other.train.files != data.train.files
    batches = list(DataLoader(data.train, batch_size=4))
    assert torch.equal(torch.cat([b[0] for b in batches]), X)


def test_extensions_case_insensitive_and_nested(tmp_path):
    arr = np.full((8, 8, 3), 100, np.uint8)
    for name in ("a/x.JPG", "a/y.Jpeg", "a/sub/z.png", "b/w.PNG", "b/v.jpeg", "b/skip.gif"):
        p = tmp_path / name
        p.parent.mkdir(parents=True, exist_ok=True)
        fmt = "PNG" if name.lower().endswith(".png") else "JPEG"
        Image.fromarray(arr).save(p, format=fmt)
    data = load_dataset("imagefolder", path=tmp_path, val_fraction=0.4)
    assert data.num_train + data.num_val == 5
    assert {p.split("/")[-1] for p in data.train.files + data.val.files} == {
        "x.JPG",
        "y.Jpeg",
        "z.png",
        "w.PNG",
        "v.jpeg",
    }


def test_mixed_sizes_default_224_and_center_crop(tmp_path):
    make_folder(tmp_path / "one", classes=("a",), per_class=2, size=(10, 30))
    make_folder(tmp_path / "one", classes=("b",), per_class=2, size=(16, 16))
    data = load_dataset("imagefolder", path=tmp_path / "one", val_fraction=0.5)
    assert data.input_shape == (3, 224, 224)
    assert data.train[0][0].shape == (3, 224, 224)
    # center crop: 30 wide x 10 high, red in the middle third, green elsewhere
    wide = np.zeros((10, 30, 3), np.uint8)
    wide[:, :, 1] = 255
    wide[:, 10:20] = (255, 0, 0)
    root = tmp_path / "two"
    _png(root / "a" / "w.png", wide)
    _png(root / "a" / "w2.png", wide)
    _png(root / "b" / "s.png", np.zeros((40, 40, 3), np.uint8))
    _png(root / "b" / "s2.png", np.zeros((40, 40, 3), np.uint8))
    data = load_dataset("imagefolder", path=root, image_size=10, val_fraction=0.5, normalize=False)
    assert data.input_shape == (3, 10, 10)
    X, y = data.tensors("train")
    red = X[y == 0][0]
    assert torch.equal(red[0], torch.ones(10, 10)) and torch.equal(red[1], torch.zeros(10, 10))
    black = X[y == 1][0]  # 40x40 resized to 10x10
    assert black.shape == (3, 10, 10) and black.abs().max() == 0
    rect = load_dataset("imagefolder", path=root, image_size=(4, 6), val_fraction=0.5)
    assert rect.input_shape == (3, 4, 6) and rect.tensors("val")[0].shape == (2, 3, 4, 6)


def test_grey_scale_channels_1(tmp_path):
    written = make_folder(tmp_path, per_class=2)
    data = load_dataset("imagefolder", path=tmp_path, channels=1, normalize=False, val_fraction=0.5)
    assert data.input_shape == (1, 12, 10)
    x, _ = data.train[0]
    ref = np.asarray(Image.fromarray(written[data.train.files[0]]).convert("L"))
    np.testing.assert_allclose(x[0].numpy(), ref / 255.0, atol=1e-6)


def test_train_val_subfolders_are_the_split(tmp_path):
    make_folder(tmp_path / "train", per_class=4)
    make_folder(tmp_path / "val", classes=("cat", "emu"), per_class=2, seed=1)
    data = load_dataset("imagefolder", path=tmp_path, val_fraction=0.9)
    assert data.classes == ["cat", "dog", "emu"]
    assert (data.num_train, data.num_val) == (12, 4)
    assert all("/val/" in p for p in data.val.files)
    assert sorted(data.tensors("val")[1].tolist()) == [0, 0, 2, 2]


def test_val_class_not_in_train(tmp_path):
    make_folder(tmp_path / "train", per_class=2)
    make_folder(tmp_path / "val", classes=("cat", "yak"), per_class=1)
    with pytest.raises(DataError, match=r"val class folder .*yak has no matching folder"):
        load_dataset("imagefolder", path=tmp_path)


def test_path_errors(tmp_path):
    with pytest.raises(ConfigError, match="needs path"):
        load_dataset("imagefolder")
    with pytest.raises(DataError, match=r"image folder not found: .*missing_dir"):
        load_dataset("imagefolder", path=tmp_path / "missing_dir")
    f = tmp_path / "file.png"
    f.write_bytes(b"x")
    with pytest.raises(DataError, match=r"not a directory: .*file\.png"):
        load_dataset("imagefolder", path=f)


def test_empty_data_sets(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataError, match=r"no class folders in .*empty"):
        load_dataset("imagefolder", path=tmp_path / "empty")
    make_folder(tmp_path / "r", classes=("cat",), per_class=2)
    (tmp_path / "r" / "dog").mkdir()
    (tmp_path / "r" / "dog" / "readme.txt").write_text("no images")
    with pytest.raises(DataError, match=r"class folder .*r/dog has no images"):
        load_dataset("imagefolder", path=tmp_path / "r")
    make_folder(tmp_path / "single", classes=("cat",), per_class=3)
    with pytest.raises(DataError, match="1 class folder"):
        load_dataset("imagefolder", path=tmp_path / "single")


def test_garbage_jpeg_raises_or_is_skipped(tmp_path):
    make_folder(tmp_path, per_class=4)
    (tmp_path / "dog" / "broken.jpg").write_bytes(b"\x00garbage, not a JPEG" * 10)
    (tmp_path / "emu" / "empty.png").write_bytes(b"")
    with pytest.raises(
        DataError, match=r"corrupt image .*(broken\.jpg|empty\.png).*skip_corrupt=True"
    ):
        load_dataset("imagefolder", path=tmp_path)
    data = load_dataset("imagefolder", path=tmp_path, skip_corrupt=True)
    assert data.num_skipped == 2
    assert sorted(p.split("/")[-1] for p, _ in data.skipped) == ["broken.jpg", "empty.png"]
    assert all(reason for _, reason in data.skipped)
    assert data.num_train + data.num_val == 12
    assert "2 corrupt file(s) skipped" in data.describe()


def test_all_corrupt_class_is_an_error(tmp_path):
    make_folder(tmp_path, classes=("cat", "dog"), per_class=3)
    (tmp_path / "yak").mkdir()
    (tmp_path / "yak" / "a.jpg").write_bytes(b"junk")
    with pytest.raises(DataError, match=r"class folder .*yak has no readable images"):
        load_dataset("imagefolder", path=tmp_path, skip_corrupt=True)


def test_truncated_jpeg(tmp_path):
    make_folder(tmp_path, classes=("cat", "dog"), per_class=3, size=(32, 32))
    rng = np.random.default_rng(0)
    good = _jpeg_bytes(rng.integers(0, 256, size=(32, 32, 3), dtype=np.uint8))
    bad = tmp_path / "cat" / "truncated.jpg"
    bad.write_bytes(good[: len(good) // 2])
    # the header check passes; decoding raises naming the file
    data = load_dataset("imagefolder", path=tmp_path, val_fraction=0.3, normalize=False)
    split = data.train if str(bad) in data.train.files else data.val
    with pytest.raises(DataError, match=r"cannot decode image .*truncated\.jpg"):
        split[split.files.index(str(bad))]
    # a full verification catches it at scan time
    with pytest.raises(DataError, match=r"corrupt image .*truncated\.jpg"):
        load_dataset("imagefolder", path=tmp_path, verify="full")
    data = load_dataset("imagefolder", path=tmp_path, verify="full", skip_corrupt=True)
    assert [p for p, _ in data.skipped] == [str(bad)] and data.num_train + data.num_val == 6


def test_tensors_size_limit(tmp_path):
    make_folder(tmp_path, per_class=3)
    data = load_dataset("imagefolder", path=tmp_path, image_size=64)
    with pytest.raises(DataError, match="over max_bytes=100000"):
        data.tensors("train", max_bytes=100_000)
    assert data.tensors("train", max_bytes=10**6)[0].shape == (data.num_train, 3, 64, 64)


@pytest.mark.parametrize(
    "opts, match",
    [
        (dict(channels=2), "channels must be 1 or 3 for 'imagefolder', got 2"),
        (dict(verify="none"), "verify must be 'header' or 'full', got 'none'"),
        (dict(image_size=0), "image_size must be >= 1, got 0"),
        (dict(image_size=(3, 4, 5)), r"image_size must be an int or a pair"),
        (dict(workers=0), "workers must be >= 1, got 0"),
        (dict(size=3), r"unknown option\(s\) for data set 'imagefolder': size"),
    ],
)
def test_bad_options(tmp_path, opts, match):
    make_folder(tmp_path, per_class=2)
    with pytest.raises(ConfigError, match=match):
        load_dataset("imagefolder", path=tmp_path, **opts)
