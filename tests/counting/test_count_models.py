"""count_ops on whole models: a hand-counted CNN, the published counts of the
zoo, train vs eval, the caller's model left alone, the result type, errors."""

from __future__ import annotations

import json
import time

import pytest
import torch
from torch import nn

from aihpc.base.errors import ConfigError, ModelError
from aihpc.base.fmt import format_si
from aihpc.counting import OpCount, count_ops, format_count


def small_cnn() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Conv2d(3, 4, 3, padding=1, bias=False),
        nn.BatchNorm2d(4),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(4 * 4 * 4, 5),
    )


def test_hand_count_small_cnn() -> None:
    c = count_ops(small_cnn(), (2, 3, 8, 8))
    n_conv = 2 * 4 * 8 * 8  # conv output elements: 512
    conv_macs = n_conv * 3 * 3 * 3  # 27 MACs each
    bn_fwd = 8 * n_conv + 2 * 4 + 7 * 4  # stats, normalise, affine, running stats
    relu = n_conv  # one max each
    pool = 2 * 4 * 4 * 4 * 3  # 128 outputs, 3 compares each
    fc_macs = 2 * 64 * 5
    fc = 2 * fc_macs + 2 * 5  # + bias add
    logsm, nll = 5 * 10 - 2, 2 * 2  # log_softmax 5n - r, nll mean 2T
    expected_fwd = {
        "convolution": 2 * conv_macs,
        "batch_norm": bn_fwd,
        "add": 1,
        "relu": relu,
        "max_pool2d": pool,
        "addmm": fc,
        "log_softmax": logsm,
        "nll_loss": nll,
    }
    assert {k: v["forward"] for k, v in c.by_operator.items() if v["forward"]} == expected_fwd
    expected_bwd = {
        "nll_loss": 2 + 1,  # T negations + 1 divide
        "log_softmax": 4 * 10 - 2,  # 4n - r
        "mm": 2 * 2 * fc_macs,  # dx and dW of the linear layer
        "sum": 2 * 5 - 5,  # bias gradient
        "max_pool2d": 128,  # one add per routed gradient
        "relu": 2 * n_conv,  # compare + select
        "batch_norm": 9 * n_conv + 4,
        "convolution": 2 * conv_macs,  # dW only: the input needs no gradient
    }
    assert {k: v["backward"] for k, v in c.by_operator.items() if v["backward"]} == expected_bwd
    assert c.forward == sum(expected_fwd.values())
    assert c.backward == sum(expected_bwd.values())
    assert c.total == c.forward + c.backward
    assert c.conv_linear_macs == conv_macs + fc_macs
    assert c.uncounted == {} and c.batch_size == 2 and c.train

    e = count_ops(small_cnn(), (2, 3, 8, 8), train=False)
    assert e.backward == 0 and not e.train
    assert e.forward == 2 * conv_macs + (2 * n_conv + 5 * 4) + relu + pool + fc


def test_by_module_is_consistent() -> None:
    c = count_ops(small_cnn(), (2, 3, 8, 8))
    mods = c.by_module
    assert list(mods)[0] == "(model)" and list(mods)[-1] == "(loss)"
    for phase, total in (("forward", c.forward), ("backward", c.backward)):
        assert mods["(model)"][phase] + mods["(loss)"][phase] == total
        assert (
            sum(mods[str(i)][phase] for i in range(6) if str(i) in mods) == mods["(model)"][phase]
        )
    assert mods["0"] == {"forward": 2 * 512 * 27, "backward": 2 * 512 * 27}


def test_caller_model_untouched() -> None:
    for mode in (True, False):
        model = small_cnn().train(mode)
        before = {k: v.clone() for k, v in model.state_dict().items()}
        count_ops(model, (2, 3, 8, 8), train=not mode)
        count_ops(model, torch.randn(2, 3, 8, 8), train=mode)
        assert model.training is mode
        assert all(m.training is mode for m in model.modules())
        after = model.state_dict()
        assert before.keys() == after.keys()
        for k, v in before.items():
            assert after[k].device.type == "cpu"
            torch.testing.assert_close(after[k], v, rtol=0, atol=0)
        assert all(p.grad is None and p.requires_grad for p in model.parameters())


def test_opcount_helpers() -> None:
    c = count_ops(small_cnn(), (4, 3, 8, 8))
    per = c.per_sample()
    assert per["total"] == pytest.approx(c.total / 4)
    assert per["conv_linear_macs"] == c.conv_linear_macs / 4
    doc = json.loads(json.dumps(c.to_dict()))
    assert doc["total"] == c.total and doc["by_operator"] == c.by_operator
    assert doc["by_module"] == c.by_module and doc["batch_size"] == 4
    with pytest.raises(ValueError, match="total"):
        OpCount(forward=1, backward=2, total=4)
    table = format_count(c, title="small")
    assert "convolution" in table and "TOTAL" in table and "uncounted ops: none" in table
    assert "conv+linear MACs" in table
    assert "  0" in format_count(c, by="module", depth=1)
    assert format_si(4_110_000_000, count=True) == "4.11 G" and format_si(512, count=True) == "512"
    assert format_si(15_470_000_000, "MACs", count=True) == "15.5 GMACs"
    assert format_si(5, "OPs", count=True) == "5 OPs" and format_si(1.5, count=True) == "1.5"


def test_bad_arguments() -> None:
    model = small_cnn()
    with pytest.raises(ConfigError, match="loss must be one of"):
        count_ops(model, (1, 3, 8, 8), loss="hinge")
    with pytest.raises(ConfigError, match="device"):
        count_ops(model, (1, 3, 8, 8), device="cuda")
    with pytest.raises(ConfigError, match=">= 1"):
        count_ops(model, (0, 3, 8, 8))
    with pytest.raises(ConfigError, match="example_inputs"):
        count_ops(model, "3x8x8")
    with pytest.raises(ModelError, match="nn.Module"):
        count_ops(lambda x: x, (1, 3))  # type: ignore[arg-type]
    with pytest.raises(ModelError, match="failed while being counted"):
        count_ops(model, (1, 5, 8, 8))  # wrong number of channels


def test_losses_and_explicit_target() -> None:
    model = nn.Linear(6, 3)
    mse = count_ops(model, (4, 6), loss="mse")
    assert mse.by_operator["mse_loss"] == {"forward": 3 * 12, "backward": 2 * 12 + 2}
    ce = count_ops(model, (4, 6), target=torch.tensor([0, 1, 2, 0]))
    assert ce.by_operator["nll_loss"]["forward"] == 2 * 4


# ------------------------------------------------------------ the model zoo
PUBLISHED_GMACS = {  # torchvision / papers ("GFLOPS" that are really MACs), 3x224x224
    "resnet18": 1.81,
    "resnet50": 4.09,
    "vgg16": 15.47,
    "mobilenet_v2": 0.30,
    "alexnet": 0.71,
}


def _zoo_model(name: str) -> nn.Module:
    models = pytest.importorskip("aihpc.models")
    with torch.device("meta"):  # no weights allocated
        return models.create(name)


@pytest.mark.parametrize("name", list(PUBLISHED_GMACS))
def test_published_macs(name: str) -> None:
    model = _zoo_model(name)
    c = count_ops(model, (1, 3, 224, 224))
    assert c.conv_linear_macs / 1e9 == pytest.approx(PUBLISHED_GMACS[name], rel=0.01)
    assert c.uncounted == {}
    conv = c.by_operator["convolution"]
    assert 1.85 < conv["backward"] / conv["forward"] <= 2.0
    # the classifier (not a first layer) needs dx and dW: 2x its forward (whose
    # bias adds, 1 per K MACs, make the only difference)
    assert c.by_operator["mm"]["backward"] == pytest.approx(
        2 * c.by_operator["addmm"]["forward"], rel=1e-3
    )


@pytest.mark.parametrize(
    "name, first_conv_macs",
    [
        ("resnet18", 112 * 112 * 64 * 3 * 7 * 7),  # 7x7/2 stem, 64 channels
        ("mobilenet_v2", 112 * 112 * 32 * 3 * 3 * 3),  # 3x3/2 stem, 32 channels
    ],
)
def test_conv_backward_is_twice_forward_but_first_layer(name: str, first_conv_macs: int) -> None:
    c = count_ops(_zoo_model(name), (1, 3, 224, 224))
    conv = c.by_operator["convolution"]  # no conv biases in these models
    assert conv["backward"] == 2 * conv["forward"] - 2 * first_conv_macs


def test_train_vs_eval_resnet18() -> None:
    model = _zoo_model("resnet18")
    tr = count_ops(model, (2, 3, 224, 224), train=True)
    ev = count_ops(model, (2, 3, 224, 224), train=False)
    for op in ("convolution", "addmm", "relu", "max_pool2d", "mean"):
        assert tr.by_operator[op]["forward"] == ev.by_operator[op]["forward"]
    # training BN is 8n + 9C per layer, eval folds to 2n + 5C
    ratio = tr.by_operator["batch_norm"]["forward"] / ev.by_operator["batch_norm"]["forward"]
    assert 3.9 < ratio < 4.0
    assert "log_softmax" not in ev.by_operator and "nll_loss" not in ev.by_operator
    assert ev.backward == 0 and tr.backward > 1.9 * tr.forward
    assert tr.conv_linear_macs == ev.conv_linear_macs


def test_resnet50_batch256_training_time(record_property: pytest.RecordProperty) -> None:
    model = _zoo_model("resnet50")
    start = time.perf_counter()
    c = count_ops(model, (256, 3, 224, 224), train=True)
    seconds = time.perf_counter() - start
    record_property("resnet50_b256_train_count_seconds", round(seconds, 3))
    print(
        f"\nresnet50 batch 256 forward+backward counted in {seconds:.2f} s: "
        f"{format_si(c.total, 'OPs', count=True)}"
    )
    assert c.conv_linear_macs == 256 * count_ops(model, (1, 3, 224, 224)).conv_linear_macs
