"""The trainer of one trial-epoch: operations counted exactly, deadlines, divergence, data
parallelism."""

from __future__ import annotations

import dataclasses
import math
import time
from pathlib import Path

import pytest
import torch

from aihpc.counting import count_ops
from aihpc.records.messages import DataRef, EpochTask
from aihpc.records.trial import Hyperparameters
from aihpc.tasks import task_of
from aihpc.tasks.image.build import SpecNet
from aihpc.tasks.image.data import load_dataset
from aihpc.tasks.image.seeds import seed_spec
from aihpc.train.optim import learning_rate, step_position
from aihpc.train.weights import load
from aihpc.train.worker import run_epoch

IMAGE = task_of("image")

DATA = DataRef("digits")
HP = {
    "lr": 0.05,
    "batch_size": 100,
    "weight_decay": 1e-4,
    "momentum": 0.9,
    "dropout": 0.0,
    "optimizer": "sgd",
    "schedule": "cosine",
}


def _task(weights_dir, **changes) -> EpochTask:
    spec = seed_spec((1, 8, 8), 10)
    base = dict(
        trial_id=0,
        epoch=1,
        epochs=2,
        arch=spec.to_dict(),
        hparams=HP,
        data=DATA,
        deadline=time.time() + 300,
        seed=3,
        threads=1,
        device="cpu",
        weights_dir=str(weights_dir),
    )
    base.update(changes)
    return EpochTask(**{**base, "hparams": Hyperparameters.from_dict(base["hparams"])})


def test_operations_are_samples_times_counted_ops_per_sample(tmp_path):
    r = run_epoch(IMAGE, _task(tmp_path))
    assert r.status == "ok", r.reason
    data = load_dataset("digits")
    trained = (
        data.num_train // 100 * 100
    )  # full batches only: the last, partial one is left out (1,438 -> 1,400)
    assert r.metrics["train_samples"] == trained and r.metrics["val_samples"] == data.num_val
    # independent count: one training step and one eval pass at the trial's batch size
    model = SpecNet(seed_spec((1, 8, 8), 10))
    x, y = torch.zeros(100, 1, 8, 8), torch.zeros(100, dtype=torch.long)
    train = count_ops(model, (x,), train=True, target=y).total / 100
    infer = count_ops(model, (x,), train=False).total / 100
    assert r.ops_train == round(train * trained)
    assert r.ops_eval == round(infer * data.num_val)
    assert r.metrics["ops"] == r.ops_train + r.ops_eval
    assert 0.0 <= r.metrics["val_accuracy"] <= 1.0
    assert set(r.phase_seconds) == {
        "data",
        "forward",
        "backward",
        "optimizer",
        "eval",
        "compile",
        "other",
    }
    assert r.phase_seconds["compile"] == 0.0  # not compiled on the CPU by default
    state, opt_state = load(tmp_path, r.weights)
    assert r.weights.name == "trial0-epoch1-try1.pt" and opt_state["state"]  # momentum buffers kept
    model.load_state_dict(state, strict=True)  # the weights a child will start from


def test_a_sized_last_epoch_trains_its_share_of_the_steps_and_validates(tmp_path):
    """A share of 0.3 of 14 steps trains 4 (the share rounded down), counts their samples alone,
    and is validated on the whole split."""
    r = run_epoch(IMAGE, _task(tmp_path, share=0.3))
    assert r.status == "ok", r.reason
    assert r.metrics["train_samples"] == 400
    assert r.metrics["val_samples"] == load_dataset("digits").num_val
    assert r.metrics["val_accuracy"] is not None


def test_a_passed_deadline_trains_nothing_and_counts_nothing(tmp_path):
    r = run_epoch(IMAGE, _task(tmp_path, deadline=time.time() - 1))
    assert r.status == "deadline"
    assert r.ops == 0 and r.metrics["train_samples"] == 0 and r.metrics["val_accuracy"] is None


def test_a_huge_learning_rate_diverges(tmp_path):
    r = run_epoch(IMAGE, _task(tmp_path, hparams={**HP, "lr": 1e12, "momentum": 0.0}))
    assert r.status == "diverged" and r.reason == "non-finite training loss"
    assert r.weights is None and not any(tmp_path.iterdir())


def test_a_broken_architecture_fails_without_raising(tmp_path):
    bad = _task(tmp_path).arch | {"num_classes": 10}
    bad["layers"] = [dict(layer) for layer in bad["layers"]]
    bad["layers"][0]["inputs"] = ["nowhere"]
    r = run_epoch(IMAGE, _task(tmp_path, arch=bad))
    assert r.status == "failed" and "nowhere" in r.reason


def test_learning_rate_schedules_by_hand():
    hp = Hyperparameters(lr=0.1, batch_size=1, schedule="cosine")
    assert learning_rate(hp, 0.0) == pytest.approx(0.1)
    assert learning_rate(hp, 0.5) == pytest.approx(0.05)
    assert learning_rate(hp, 1.0) == pytest.approx(0.0, abs=1e-12)
    assert learning_rate(hp, 0.25) == pytest.approx(0.05 * (1 + math.cos(math.pi / 4)))
    assert learning_rate(hp, 1.5) == learning_rate(hp, 1.0)  # held within [0, 1]
    step = Hyperparameters(lr=0.1, batch_size=1, schedule="step")
    assert [learning_rate(step, p / 4) for p in (0, 1.9, 2, 3, 3.9)] == pytest.approx(
        [0.1, 0.1, 0.01, 0.001, 0.001]
    )
    warm = Hyperparameters(lr=0.1, batch_size=1, schedule="cosine", warmup=0.2)
    peak = 0.05 * (1 + math.cos(math.pi * 0.2))  # the schedule's value where the warm-up ends
    assert learning_rate(warm, 0.1) == pytest.approx(peak / 2)
    assert learning_rate(warm, 0.6) == pytest.approx(0.05 * (1 + math.cos(math.pi * 0.6)))


def test_a_task_without_positions_runs_its_own_schedule_and_one_with_them_interpolates():
    task = _task(Path("/nonexistent"), epoch=3, epochs=4)
    assert task.positions() == (0.5, 0.75)  # epoch 3 of 4
    lineage = dataclasses.replace(task, schedule_from=0.2, schedule_to=0.3)
    assert lineage.positions() == (0.2, 0.3)
    steps = 8
    got = [step_position(*lineage.positions(), i, steps) for i in range(steps)]
    assert got == pytest.approx([0.2 + 0.1 * i / steps for i in range(steps)])


def test_the_steps_train_at_the_positions_the_task_gives_and_record_them(tmp_path):
    """At the schedule's end (position 1) a cosine rate is 0: an epoch there leaves every
    parameter at its initialisation; the epoch records the positions it trained between."""
    r = run_epoch(IMAGE, _task(tmp_path, schedule_from=1.0, schedule_to=1.0))
    assert r.status == "ok", r.reason
    assert (r.metrics["schedule_from"], r.metrics["schedule_to"]) == (1.0, 1.0)
    torch.manual_seed(3)
    fresh = SpecNet(seed_spec((1, 8, 8), 10))
    trained = load(tmp_path, r.weights)[0]
    for name, value in fresh.named_parameters():
        torch.testing.assert_close(trained[name], value.detach(), rtol=0, atol=0)
    moved = run_epoch(IMAGE, _task(tmp_path, trial_id=1, schedule_from=0.0, schedule_to=0.1))
    assert (moved.metrics["schedule_from"], moved.metrics["schedule_to"]) == (0.0, 0.1)
    assert not torch.equal(load(tmp_path, moved.weights)[0]["fc.weight"], fresh.fc.weight)


@pytest.mark.slow
def test_two_processes_with_gloo_count_the_same_operations_once(tmp_path):
    one = run_epoch(IMAGE, _task(tmp_path))
    two = run_epoch(IMAGE, _task(tmp_path, procs=2, trial_id=1))
    assert two.status == "ok", two.reason
    for key in ("train_samples", "val_samples"):
        assert two.metrics[key] == one.metrics[key]
    assert two.ops == one.ops  # counted once, from the global samples, not per rank
    assert 0.2 < two.metrics["val_accuracy"] <= 1.0  # well above chance (0.1) after one epoch
    SpecNet(seed_spec((1, 8, 8), 10)).load_state_dict(load(tmp_path, two.weights)[0], strict=True)


@pytest.mark.slow
def test_the_next_epoch_on_the_same_worker_starts_from_the_kept_model_with_the_same_result(
    tmp_path,
):
    from aihpc.train import trainer

    hp = {**HP, "dropout": 0.2}  # dropout draws too must not depend on whether the model was kept
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    first = run_epoch(IMAGE, _task(tmp_path / "a", hparams=hp))
    kept = trainer._RESIDENT
    assert kept is not None and kept.weights == first.weights
    second = run_epoch(IMAGE, _task(tmp_path / "a", hparams=hp, epoch=2, start=first.weights))
    assert (
        second.status == "ok" and trainer._RESIDENT.setup.model is kept.setup.model
    )  # not rebuilt
    # the same two epochs, the second rebuilt from the weight file as on another worker
    again = run_epoch(IMAGE, _task(tmp_path / "b", hparams=hp))
    assert again.weights.digest == first.weights.digest
    trainer._RESIDENT = None
    rebuilt = run_epoch(IMAGE, _task(tmp_path / "b", hparams=hp, epoch=2, start=again.weights))
    assert rebuilt.weights.digest == second.weights.digest  # bit for bit: weights and momentum
    assert rebuilt.metrics["val_loss"] == second.metrics["val_loss"]


def test_a_failed_epoch_leaves_no_kept_model(tmp_path):
    from aihpc.train import trainer

    first = run_epoch(IMAGE, _task(tmp_path))
    assert trainer._RESIDENT is not None
    r = run_epoch(
        IMAGE,
        _task(tmp_path, epoch=2, start=first.weights, hparams={**HP, "lr": 1e12, "momentum": 0.0}),
    )
    assert r.status == "diverged" and trainer._RESIDENT is None  # a retry rebuilds from the file


def _small_spec():
    from aihpc.tasks.image.spec import INPUT, ArchSpec, Layer

    layers = (
        Layer(
            "conv1",
            "conv",
            (INPUT,),
            out_channels=8,
            kernel_size=3,
            stride=1,
            padding=1,
            bias=False,
        ),
        Layer("bn1", "bn", ("conv1",)),
        Layer("relu1", "relu", ("bn1",)),
        Layer("avgpool", "global_avgpool", ("relu1",)),
        Layer("fc", "dense", ("avgpool",), out_features=10),
    )
    return ArchSpec(input_shape=(1, 8, 8), num_classes=10, layers=layers, output="fc")


@pytest.mark.slow
def test_a_compiled_model_trains_full_batches_and_counts_its_compilation_apart(tmp_path):
    """torch.compile forced on, on the CPU (inductor): 30-60 s here, most of it compiling."""
    arch = _small_spec().to_dict()
    first = run_epoch(IMAGE, _task(tmp_path, arch=arch, compile=True))
    assert first.status == "ok", first.reason
    data = load_dataset("digits")
    assert (
        first.metrics["train_samples"] == data.num_train // 100 * 100
    )  # the partial last batch is left out
    assert (
        first.metrics["val_samples"] == data.num_val
    )  # every sample scored: the last batch padded
    assert first.ops_train == round(first.ops_per_sample["train"] * first.metrics["train_samples"])
    assert (
        first.phase_seconds["compile"]
        > first.phase_seconds["forward"] + first.phase_seconds["backward"]
    )
    from aihpc.tasks.image.regions import partition

    regions = len(partition(_small_spec()))  # the convolution's chain, and the head
    assert (
        regions == 2 and first.metrics["regions_needed"] == 2 * regions
    )  # in training and evaluation
    assert first.metrics["regions_compiled"] <= 2 * regions
    second = run_epoch(
        IMAGE, _task(tmp_path, arch=arch, compile=True, epoch=2, start=first.weights)
    )
    assert (
        second.status == "ok" and second.phase_seconds["compile"] == 0.0
    )  # kept: compiled once per trial
    assert "regions_needed" not in second.metrics


def test_a_compiled_child_compiles_only_the_regions_its_morphism_changed(tmp_path, monkeypatch):
    """Regional compilation through the trainer (aot_eager, to be quick: what is compiled, not how
    fast): a child of the parent this worker trained compiles its changed regions alone."""
    import random

    from aihpc.records.messages import Morph
    from aihpc.tasks.image.morphism import random_plan
    from aihpc.tasks.image.regions import partition
    from aihpc.train import regions

    monkeypatch.setattr(regions, "_DEFAULT", regions.RegionCache("aot_eager"))
    parent_spec = seed_spec((1, 8, 8), 10)
    parent = run_epoch(IMAGE, _task(tmp_path, compile=True))
    assert parent.status == "ok", parent.reason
    keys = len(partition(parent_spec))
    assert parent.metrics["regions_needed"] == 2 * keys
    assert parent.metrics["regions_compiled"] == 2 * len(
        {r.signature for r in partition(parent_spec)}
    )
    child_spec, _, how = random_plan(parent_spec, random.Random(4))
    new = {r.signature for r in partition(child_spec)} - {
        r.signature for r in partition(parent_spec)
    }
    assert 0 < len(new) < len(partition(child_spec)), how
    morph = Morph(
        parent_spec.to_dict(), parent.weights, parent_seed=3, seed=4, steps=1, max_params=None
    )
    child = run_epoch(
        IMAGE, _task(tmp_path, trial_id=1, arch=child_spec.to_dict(), morph=morph, compile=True)
    )
    assert child.status == "ok", child.reason
    assert child.metrics["regions_needed"] == 2 * len(partition(child_spec))
    assert child.metrics["regions_compiled"] == 2 * len(new), (
        how
    )  # the unchanged regions came from the cache
