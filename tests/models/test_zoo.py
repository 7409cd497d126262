"""Model zoo: exact parameter counts, shapes, arguments and errors."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from torch import nn

from aihpc import models
from aihpc.base.errors import AihpcError, ModelError

# Parameter counts at num_classes=1000, in_channels=3, as published in the
# torchvision model documentation (pytorch.org/vision/stable/models.html,
# "num_params" of each weights entry, e.g. ResNet18_Weights.IMAGENET1K_V1).
TORCHVISION_PARAMS = {
    "resnet18": 11_689_512,
    "resnet34": 21_797_672,
    "resnet50": 25_557_032,
    "vgg11": 132_863_336,
    "vgg16": 138_357_544,
    "mobilenet_v2": 3_504_872,
    "alexnet": 61_100_840,
}

SMALL = ["resnet20", "vgg_small", "mobilenet_v2_small", "digits_cnn"]
# Tokens models (token ids in, N*T rows of logits out): tests/models/test_sequence_models.py.
SEQUENCE = ["lstm_lm", "transformer_small"]
IMAGE_MODELS = [n for n in models.names() if models.info(n).input_kind == "image"]


def _forward(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    model.eval()
    with torch.no_grad():
        return model(x)


def test_names_and_info_are_consistent() -> None:
    names = models.names()
    assert set(TORCHVISION_PARAMS) | set(SMALL) | set(SEQUENCE) == set(names)
    assert len(names) == len(set(names))
    assert set(names) - set(IMAGE_MODELS) == set(SEQUENCE)
    for name in names:
        meta = models.info(name)
        assert meta.name == name
        rank = 3 if meta.input_kind == "image" else 1
        assert len(meta.input_shape) == rank and all(d >= 1 for d in meta.input_shape)
        assert meta.num_classes >= 1 and meta.family and meta.description
    with pytest.raises(dataclasses.FrozenInstanceError):
        models.info("resnet18").num_classes = 5  # type: ignore[misc]
    assert models.info("resnet18").input_shape == (3, 224, 224)
    assert models.info("resnet20").input_shape == (3, 32, 32)
    assert models.info("digits_cnn").input_shape == (1, 8, 8)


@pytest.mark.parametrize("name", list(TORCHVISION_PARAMS))
def test_imagenet_models_match_torchvision(name: str) -> None:
    """Exact parameter count (real and meta-device build) and a 224x224 forward."""
    model = models.create(name)
    assert models.num_parameters(model) == TORCHVISION_PARAMS[name]
    assert models.parameter_count(name) == TORCHVISION_PARAMS[name]
    out = _forward(model, torch.randn(1, 3, 224, 224))
    assert out.shape == (1, 1000)
    assert torch.isfinite(out).all()


def test_resnet20_matches_paper() -> None:
    # He et al. 2016, Table 6: ResNet-20 on CIFAR-10 has 0.27M parameters.
    # With option-A (parameter-free) shortcuts the exact count is
    # stem 432+32, stage1 3*(2*2304+64), stage2 (4608+9216+128)+2*(2*9216+128),
    # stage3 (18432+36864+256)+2*(2*36864+256), fc 64*10+10 = 269,722.
    assert models.parameter_count("resnet20") == 269_722
    model = models.create("resnet20")
    convs = [m for m in model.modules() if isinstance(m, nn.Conv2d)]
    assert len(convs) == 19  # 6n+1 convs + 1 fc = 20 weighted layers
    assert [c.out_channels for c in convs[1::6]] == [16, 32, 64]


@pytest.mark.parametrize("name", SMALL)
def test_small_models_default_and_other_sizes(name: str) -> None:
    meta = models.info(name)
    model = models.create(name)
    out = _forward(model, torch.randn(4, *meta.input_shape))
    assert out.shape == (4, meta.num_classes)
    assert torch.isfinite(out).all()
    c, h, w = meta.input_shape
    assert _forward(model, torch.randn(2, c, h + 3, w + 5)).shape == (2, meta.num_classes)


@pytest.mark.parametrize("name", IMAGE_MODELS)
def test_shapes_at_other_sizes(name: str) -> None:
    """Shape check only, on the meta device (no memory, no arithmetic)."""
    c = models.info(name).input_shape[0]
    with torch.device("meta"):
        model = models.create(name, num_classes=7).eval()
        for h, w in ((64, 64), (97, 80), (128, 160)):
            assert model(torch.empty(2, c, h, w)).shape == (2, 7)


@pytest.mark.parametrize("name", IMAGE_MODELS)
def test_in_channels_changes_first_layer_only(name: str) -> None:
    default_c = models.info(name).input_shape[0]
    with torch.device("meta"):
        base = models.create(name)
        other = models.create(name, in_channels=default_c + 2, num_classes=5)
    base_shapes = [(n, tuple(p.shape)) for n, p in base.named_parameters()]
    other_shapes = [(n, tuple(p.shape)) for n, p in other.named_parameters()]
    assert [n for n, _ in base_shapes] == [n for n, _ in other_shapes]
    diff = [i for i, (a, b) in enumerate(zip(base_shapes, other_shapes, strict=True)) if a != b]
    first_conv = next(m for m in other.modules() if isinstance(m, nn.Conv2d))
    last_linear = [m for m in other.modules() if isinstance(m, nn.Linear)][-1]
    assert first_conv.in_channels == default_c + 2 and last_linear.out_features == 5
    # Only the first conv's weight and the classifier's weight and bias differ.
    assert diff[0] == 0 and other_shapes[0][1][1] == default_c + 2
    assert [base_shapes[i][0] for i in diff[1:]] == [n for n, _ in base_shapes[-2:]]


def test_num_classes_and_in_channels_forward() -> None:
    model = models.create("resnet20", num_classes=3, in_channels=5)
    assert _forward(model, torch.randn(2, 5, 32, 32)).shape == (2, 3)
    model = models.create("digits_cnn", num_classes=1)
    assert _forward(model, torch.randn(3, 1, 8, 8)).shape == (3, 1)
    model = models.create("mobilenet_v2_small", num_classes=4, in_channels=1)
    assert _forward(model, torch.randn(2, 1, 16, 16)).shape == (2, 4)


def test_torchvision_initialisation() -> None:
    torch.manual_seed(0)
    model = models.create("vgg_small")
    conv = model.features[0]
    fc = model.classifier[1]
    # Kaiming normal, fan_out, ReLU gain: std = sqrt(2 / (out_channels * k * k)).
    assert conv.weight.std().item() == pytest.approx((2.0 / (32 * 9)) ** 0.5, rel=0.1)
    assert torch.count_nonzero(conv.bias) == 0
    assert fc.weight.std().item() == pytest.approx(0.01, rel=0.1)  # N(0, 0.01)
    assert torch.count_nonzero(fc.bias) == 0
    resnet = models.create("resnet20")
    assert torch.all(resnet.bn1.weight == 1) and torch.all(resnet.bn1.bias == 0)
    last = resnet.layers[-1].conv2.weight  # 64 filters of 64x3x3
    assert last.std().item() == pytest.approx((2.0 / (64 * 9)) ** 0.5, rel=0.05)


def test_unknown_name_lists_valid_names() -> None:
    with pytest.raises(ModelError, match="unknown model 'resnet19'") as info:
        models.create("resnet19")
    for name in models.names():
        assert name in str(info.value)
    with pytest.raises(AihpcError):
        models.info("nope")


@pytest.mark.parametrize(
    "kwargs, text",
    [
        ({"num_classes": 0}, "num_classes must be an integer >= 1, got 0"),
        ({"num_classes": -3}, "got -3"),
        ({"in_channels": 0}, "in_channels must be an integer >= 1, got 0"),
        ({"num_classes": 2.5}, "got 2.5"),
        ({"in_channels": True}, "got True"),
    ],
)
def test_bad_arguments(kwargs: dict[str, object], text: str) -> None:
    with pytest.raises(ModelError, match=text.replace(".", r"\.")):
        models.create("digits_cnn", **kwargs)  # type: ignore[arg-type]
