"""The contract every registered workload keeps (run on each of them)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from aihpc.base.errors import ConfigError
from aihpc.counting import count_ops
from aihpc.workloads import Workload, get, names


def test_registry_lists_both_and_refuses_others():
    assert names() == ["cosmoflow", "deepcam"]
    with pytest.raises(ConfigError, match="unknown workload 'x'; valid names: cosmoflow, deepcam"):
        get("x")


@pytest.mark.parametrize("name", names())
def test_workload_contract(name: str, tmp_path: Path):
    w = get(name)
    assert isinstance(w, Workload) and w.name == name and w.benchmark == f"aihpc_{name}"
    assert w.metric_key == ("eval_accuracy" if w.higher_is_better else "eval_error")
    assert {"small", "tiny"} <= set(w.sizes) and w.default_size == "small"
    assert w.target > 0 and w.target_note
    assert w.reached(w.target, w.target)
    worse = w.target * (0.5 if w.higher_is_better else 2.0)
    assert not w.reached(worse, w.target) and w.better(w.target, worse)
    size = w.size("tiny")
    w.generate(tmp_path, size, seed=1)
    train, valid = w.read(tmp_path, "train", size), w.read(tmp_path, "validation", size)
    assert (len(train), len(valid)) == (size.n_train, size.n_valid)
    assert tuple(train.x.shape[1:]) == w.input_shape(size)
    torch.manual_seed(0)
    model = w.model(size)
    loss = w.loss(train)(model(train.x[:4]), train.y[:4])
    assert torch.isfinite(loss)
    value = w.evaluate(model, valid, 4)
    assert isinstance(value, float) and not model.training
    assert count_ops(model, (1, *w.input_shape(size)), loss=w.loss_name).uncounted == {}
    # the same seed writes the same data
    w.generate(tmp_path / "again", size, seed=1)
    torch.testing.assert_close(w.read(tmp_path / "again", "train", size).x, train.x)
