"""Seed specs: sizes, shapes, and ResNet-50's exact parameter count."""

from __future__ import annotations

import pytest
import torch

from aihpc.base.errors import SpecError
from aihpc.tasks.image.build import SpecNet, state_shapes
from aihpc.tasks.image.seeds import seed_spec


def _basic_block_params(c_in: int, c: int, projection: bool) -> int:
    """Two 3x3 convs + 2 BNs (+ 1x1 projection + BN), no conv biases."""
    n = 9 * c_in * c + 9 * c * c + 4 * c
    return n + (c_in * c + 2 * c if projection else 0)


def test_resnet50_parameter_count() -> None:
    spec = seed_spec((3, 224, 224), 1000)
    assert spec.num_params() == 25_557_032
    model = SpecNet(spec)
    assert sum(p.numel() for p in model.parameters()) == 25_557_032
    shapes = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    assert shapes == state_shapes(spec)
    # torchvision layout, with "_" for "."
    assert shapes["conv1.weight"] == (64, 3, 7, 7)
    assert shapes["layer1_0_downsample_conv.weight"] == (256, 64, 1, 1)
    assert shapes["layer2_0_conv2.weight"] == (128, 128, 3, 3)  # v1.5: stride in the 3x3
    assert spec.layer("layer2_0_conv2").stride == 2
    assert spec.layer("layer2_0_conv1").stride == 1
    assert shapes["layer4_2_conv3.weight"] == (2048, 512, 1, 1)
    assert shapes["fc.weight"] == (1000, 2048)
    s = spec.shapes()
    assert s["maxpool"] == (64, 56, 56)
    assert s["layer4_2_relu"] == (2048, 7, 7)
    assert sum(1 for x in spec.layers if x.type == "conv") == 53


def test_tiny_seed_for_digits() -> None:
    spec = seed_spec((1, 8, 8), 10)
    s = spec.shapes()
    assert not any(x.type in ("maxpool", "avgpool") for x in spec.layers)
    assert s["layer1_1_relu"] == (16, 8, 8)
    assert s["layer2_1_relu"] == (32, 4, 4)
    expected = (
        9 * 16
        + 32
        + 2 * _basic_block_params(16, 16, False)
        + _basic_block_params(16, 32, True)
        + _basic_block_params(32, 32, False)
        + 32 * 10
        + 10
    )
    assert spec.num_params() == expected
    out = SpecNet(spec).eval()(torch.randn(2, 1, 8, 8))
    assert out.shape == (2, 10)


def test_cifar_seed_is_resnet20() -> None:
    spec = seed_spec((3, 32, 32), 10)
    assert sum(1 for x in spec.layers if x.type == "conv") == 19 + 2  # + 2 projections
    expected = (
        9 * 3 * 16
        + 32
        + 3 * _basic_block_params(16, 16, False)
        + _basic_block_params(16, 32, True)
        + 2 * _basic_block_params(32, 32, False)
        + _basic_block_params(32, 64, True)
        + 2 * _basic_block_params(64, 64, False)
        + 64 * 10
        + 10
    )
    assert spec.num_params() == expected
    assert spec.shapes()["avgpool"] == (64,)
    assert spec.shapes()["layer3_2_relu"] == (64, 8, 8)


def test_overrides_and_auto_choice() -> None:
    small = seed_spec((3, 32, 32), 5, width=4, blocks=1)
    assert small.shapes()["avgpool"] == (16,)
    assert sum(1 for x in small.layers if x.type == "add") == 3
    assert seed_spec((3, 12, 12), 5).layer("layer2_0_conv1").out_channels == 32
    assert seed_spec((3, 64, 64), 5).shapes()["avgpool"] == (64,)  # cifar style
    assert seed_spec((3, 128, 128), 5).shapes()["avgpool"] == (2048,)


def test_seed_errors() -> None:
    with pytest.raises(SpecError, match="seed size must be one of.*'huge'"):
        seed_spec((3, 32, 32), 10, "huge")
    with pytest.raises(SpecError, match="width does not apply"):
        seed_spec((3, 224, 224), 10, width=8)
    with pytest.raises(SpecError, match="blocks must be an integer >= 1, got 0"):
        seed_spec((1, 8, 8), 10, blocks=0)
    with pytest.raises(SpecError, match=r"input_shape must be \(C, H, W\)"):
        seed_spec((8, 8), 10)  # type: ignore[arg-type]
    with pytest.raises(SpecError, match="num_classes"):
        seed_spec((1, 8, 8), 0)
