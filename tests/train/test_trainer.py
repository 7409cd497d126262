"""The trainer of one trial-epoch: operations counted exactly, deadlines, divergence, data parallelism."""

from __future__ import annotations

import math
import time

import pytest
import torch

from aihpc.counting import count_ops
from aihpc.data import load_dataset
from aihpc.nas.seeds import seed_spec
from aihpc.train.task import DataRef, EpochTask
from aihpc.train.weights import load
from aihpc.train.trainer import learning_rate
from aihpc.train.worker import run_epoch

DATA = DataRef("digits")
HP = {"lr": 0.05, "batch_size": 100, "weight_decay": 1e-4, "momentum": 0.9, "dropout": 0.0,
      "optimizer": "sgd", "schedule": "cosine"}  # fmt: skip


def _task(weights_dir, **changes) -> EpochTask:
    spec = seed_spec((1, 8, 8), 10)
    base = dict(trial_id=0, epoch=1, epochs=2, arch=spec.to_dict(), hparams=HP, data=DATA,
                deadline=time.time() + 300, seed=3, threads=1, device="cpu", weights_dir=str(weights_dir))  # fmt: skip
    base.update(changes)
    return EpochTask(**base)


def test_operations_are_samples_times_counted_ops_per_sample(tmp_path):
    r = run_epoch(_task(tmp_path))
    assert r.status == "ok", r.reason
    data = load_dataset("digits")
    assert r.metrics["train_samples"] == data.num_train and r.metrics["val_samples"] == data.num_val
    # independent count: one training step and one eval pass at the trial's batch size
    model = seed_spec((1, 8, 8), 10).build()
    x, y = torch.zeros(100, 1, 8, 8), torch.zeros(100, dtype=torch.long)
    train = count_ops(model, (x,), train=True, target=y).total / 100
    infer = count_ops(model, (x,), train=False).total / 100
    assert r.ops_train == round(train * data.num_train)
    assert r.ops_eval == round(infer * data.num_val)
    assert r.metrics["ops"] == r.ops_train + r.ops_eval
    assert 0.0 <= r.metrics["val_accuracy"] <= 1.0
    assert set(r.phase_seconds) == {"data", "forward", "backward", "optimizer", "eval", "compile", "other"}
    assert r.phase_seconds["compile"] == 0.0  # not compiled on the CPU by default
    state, opt_state = load(tmp_path, r.weights)
    assert r.weights.name == "trial0-epoch1-try1.pt" and opt_state["state"]  # momentum buffers kept
    model.load_state_dict(state, strict=True)  # the weights a child will start from


def test_a_passed_deadline_trains_nothing_and_counts_nothing(tmp_path):
    r = run_epoch(_task(tmp_path, deadline=time.time() - 1))
    assert r.status == "deadline"
    assert r.ops == 0 and r.metrics["train_samples"] == 0 and r.metrics["val_accuracy"] is None


def test_a_huge_learning_rate_diverges(tmp_path):
    r = run_epoch(_task(tmp_path, hparams={**HP, "lr": 1e12, "momentum": 0.0}))
    assert r.status == "diverged" and r.reason == "non-finite training loss"
    assert r.weights is None and not any(tmp_path.iterdir())


def test_a_broken_architecture_fails_without_raising(tmp_path):
    bad = _task(tmp_path).arch | {"num_classes": 10}
    bad["layers"] = [dict(layer) for layer in bad["layers"]]
    bad["layers"][0]["inputs"] = ["nowhere"]
    r = run_epoch(_task(tmp_path, arch=bad))
    assert r.status == "failed" and "nowhere" in r.reason


def test_learning_rate_schedules_by_hand():
    hp = {"lr": 0.1, "schedule": "cosine"}
    assert learning_rate(hp, 4, 0) == pytest.approx(0.1)
    assert learning_rate(hp, 4, 2) == pytest.approx(0.05)
    assert learning_rate(hp, 4, 4) == pytest.approx(0.0, abs=1e-12)
    assert learning_rate(hp, 4, 1) == pytest.approx(0.05 * (1 + math.cos(math.pi / 4)))
    step = {"lr": 0.1, "schedule": "step"}
    assert [learning_rate(step, 4, p) for p in (0, 1.9, 2, 3, 3.9)] == pytest.approx([0.1, 0.1, 0.01, 0.001, 0.001])


@pytest.mark.slow
def test_two_processes_with_gloo_count_the_same_operations_once(tmp_path):
    one = run_epoch(_task(tmp_path))
    two = run_epoch(_task(tmp_path, procs=2, trial_id=1))
    assert two.status == "ok", two.reason
    for key in ("train_samples", "val_samples"):
        assert two.metrics[key] == one.metrics[key]
    assert two.ops == one.ops  # counted once, from the global samples, not per rank
    assert 0.2 < two.metrics["val_accuracy"] <= 1.0  # well above chance (0.1) after one epoch
    seed_spec((1, 8, 8), 10).build().load_state_dict(load(tmp_path, two.weights)[0], strict=True)
