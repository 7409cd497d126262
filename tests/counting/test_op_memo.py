"""count_ops's op memo (aihpc.counting.op_memo) changes no number: every field of the OpCount is
the one of the count that runs every op, on the models of the zoo (convolutions, batch norm,
residual adds, depthwise convolutions, an LSTM, a transformer), on morphed architectures of the
search, in training and in evaluation, with each loss, counted first on an empty memo and then
again on a full one.  Ops that return an input or a view of one always run, and nothing is kept
from a count on the CPU device."""

from __future__ import annotations

import random

import pytest
import torch
from torch import nn

from aihpc import models
from aihpc.counting import count_ops, op_memo
from aihpc.tasks.image.build import SpecNet
from aihpc.tasks.image.morphism import random_plan
from aihpc.tasks.image.seeds import seed_spec

SMALL_ZOO = ("resnet20", "vgg_small", "mobilenet_v2_small", "digits_cnn")


@pytest.fixture(autouse=True)
def empty_memo():
    op_memo.clear()
    yield
    op_memo.clear()


def _inputs(name: str, batch: int) -> torch.Tensor:
    info = models.info(name)
    if info.input_kind == "tokens":
        return torch.zeros((batch, *info.input_shape), dtype=torch.long, device="meta")
    return torch.empty((batch, *info.input_shape), device="meta")


def _meta_model(name: str) -> nn.Module:
    with torch.device("meta"):
        return models.create(name)


def _assert_memo_changes_nothing(model: nn.Module, inputs: torch.Tensor, **kwargs) -> None:
    """The count without the memo, then with it on the memo as it is (cold or warm), twice."""
    expected = count_ops(model, (inputs,), memo=False, **kwargs).to_dict()
    for _ in range(2):
        assert count_ops(model, (inputs,), **kwargs).to_dict() == expected


@pytest.mark.parametrize("name", [*SMALL_ZOO, "lstm_lm", "transformer_small"])
def test_the_small_zoo_counts_alike_in_training_and_evaluation(name: str) -> None:
    model = _meta_model(name)
    _assert_memo_changes_nothing(model, _inputs(name, 2), train=True)
    _assert_memo_changes_nothing(model, _inputs(name, 2), train=False)
    assert op_memo.size() > 0


def test_resnet18_counts_alike_with_each_loss() -> None:
    """Four residual stages of repeated blocks: most of the second count's ops are replayed."""
    model = _meta_model("resnet18")
    x = torch.empty((2, 3, 64, 64), device="meta")
    for loss in ("cross_entropy", "mse", "sum"):
        _assert_memo_changes_nothing(model, x, train=True, loss=loss)
    target = torch.zeros(2, dtype=torch.long, device="meta")
    _assert_memo_changes_nothing(model, x, train=True, target=target)


def test_morphed_architectures_count_alike_one_after_another() -> None:
    """As a worker counts its trials: children of one seed, each at a batch size and a dropout of
    its own, on the memo the ones before left."""
    rng = random.Random(3)
    spec = seed_spec((3, 16, 16), 10)
    for _ in range(6):
        spec = random_plan(spec, rng, 2_000_000)[0]
        with torch.device("meta"):
            model = SpecNet(spec)
        for m in model.modules():
            if isinstance(m, nn.Dropout):
                m.p = rng.uniform(0.0, 0.5)
        batch = rng.choice((32, 64))
        x = torch.empty((batch, *spec.input_shape), device="meta")
        y = torch.zeros(batch, dtype=torch.long, device="meta")
        _assert_memo_changes_nothing(model, x, train=True, target=y)
        _assert_memo_changes_nothing(model, x, train=False)


def test_ops_that_return_an_input_or_a_view_are_not_kept() -> None:
    count_ops(_meta_model("resnet20"), (2, 3, 32, 32))
    kept = op_memo.kept_ops()
    assert torch.ops.aten.convolution.default in kept
    assert torch.ops.aten.native_batch_norm.default in kept
    # a view, an in-place add (the gradients summed into one), and a detach (a view)
    for op in (torch.ops.aten.view.default, torch.ops.aten.add_.Tensor, torch.ops.aten.t.default):
        assert op not in kept


def test_nothing_is_kept_from_a_count_on_the_cpu_device() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU(), nn.Flatten())
    on_cpu = count_ops(model, (2, 3, 8, 8), device="cpu")
    assert op_memo.size() == 0
    assert count_ops(model, (2, 3, 8, 8)).to_dict() == on_cpu.to_dict()


def test_a_full_memo_starts_again(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(op_memo, "LIMIT", 10)
    _assert_memo_changes_nothing(_meta_model("resnet20"), _inputs("resnet20", 2), train=True)
    assert 0 < op_memo.size() <= 10


def test_a_higher_order_op_runs_through_the_memo() -> None:
    """torch.cond reaches the memo's dispatch mode, which lets it run (the counter counts both
    branches and keeps the larger)."""

    class Branching(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.linear = nn.Linear(4, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.cond(
                x.sum() > 0, lambda v: self.linear(v), lambda v: self.linear(v) * 2, (x,)
            )

    torch.manual_seed(0)
    model = Branching()
    _assert_memo_changes_nothing(model, torch.empty((2, 4), device="meta"), train=False)
