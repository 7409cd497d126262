"""Data staging in chunks, the two tiers, the batches they feed, the weight writer and the model
build."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from aihpc.base.errors import DataError
from aihpc.records.messages import DataRef, EpochTask
from aihpc.records.trial import Hyperparameters
from aihpc.tasks import task_of
from aihpc.tasks.image.build import SpecNet
from aihpc.tasks.image.data import load_dataset
from aihpc.tasks.image.seeds import seed_spec
from aihpc.train import feed, staging
from aihpc.train.trainer import build_model
from aihpc.train.weights import SnapshotWriter, load
from aihpc.train.worker import run_epoch

IMAGE = task_of("image")

SYNTH = (("difficulty", 0.6), ("image_size", 12), ("num_classes", 7), ("num_samples", 900))


def test_chunked_staging_is_bit_identical_to_the_whole_split(monkeypatch):
    monkeypatch.setattr(
        staging, "CHUNK_BYTES", 12 * 12 * 3 * 4 * 50
    )  # 50 images a chunk: 15 chunks, 2 threads
    data = load_dataset("synthetic", seed=5, **dict(SYNTH))
    x_whole, y_whole = data.tensors("train")
    split = staging.stage_split(
        data.train, torch.device("cpu"), torch.float32, threads=2, path=None
    )
    assert torch.equal(split.x, x_whole) and torch.equal(split.y, y_whole) and not split.streamed


def test_the_stream_tier_maps_a_file_in_the_stage_dir_with_the_same_values(tmp_path, monkeypatch):
    monkeypatch.setattr(staging, "CHUNK_BYTES", 12 * 12 * 3 * 4 * 64)
    ref = DataRef("synthetic", options=SYNTH, seed=5, staging="stream", stage_dir=str(tmp_path))
    staged = staging._stage(IMAGE, ref, torch.device("cpu"), share=1, threads=2)
    data = load_dataset("synthetic", seed=5, **dict(SYNTH))
    assert staged.tier == "stream" and staged.train.streamed
    assert Path(staged.train.path).parent.parent == tmp_path
    assert (
        os.path.getsize(staged.train.path) == staged.train.x.nbytes
    )  # the file is the split, float32
    assert torch.equal(staged.train.x, data.tensors("train")[0]) and torch.equal(
        staged.val.y, data.tensors("val")[1]
    )
    assert staged.record() == {
        "tier": "stream",
        "seconds": staged.seconds,
        "bytes": staged.nbytes,
        "dtype": "float32",
    }


def test_auto_takes_the_device_when_the_set_fits_and_streams_when_it_does_not():
    cpu = torch.device("cpu")
    budget = staging.device_budget(cpu)
    assert 0 < budget and staging.device_budget(cpu, share=4) == pytest.approx(budget / 4, rel=0.05)
    assert staging.choose_tier("auto", 1 << 20, cpu) == "device"
    assert staging.choose_tier("auto", 4 * budget, cpu) == "stream"
    assert (
        staging.choose_tier("stream", 1, cpu) == "stream"
        and staging.choose_tier("device", 1 << 50, cpu) == "device"
    )
    with pytest.raises(DataError, match="staging must be one of auto, device, stream, got 'disk'"):
        staging.choose_tier("disk", 1, cpu)


def test_a_stage_dir_without_room_is_one_clear_error(tmp_path):
    ref = DataRef("synthetic", options=SYNTH, staging="stream", stage_dir=str(tmp_path))
    with pytest.raises(
        DataError, match=r"needs .* GiB in .*, which has .* GiB free; give stage_dir a folder"
    ):
        staging.stage_folder(ref, 1 << 60)


def test_folders_of_dead_processes_are_removed_and_live_ones_kept(tmp_path):
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    stale = tmp_path / f"aihpc-stage-{dead.stdout.strip()}-0123456789ab"
    live = tmp_path / f"aihpc-stage-{os.getpid()}-0123456789ab"
    other = tmp_path / "aihpc-stage-notapid"
    for folder in (stale, live, other):
        folder.mkdir()
    staging.remove_stale_folders(tmp_path)
    assert not stale.exists() and live.exists() and other.exists()


@pytest.mark.parametrize("world", [1, 2])
def test_streamed_batches_are_the_gathered_ones(tmp_path, world):
    ref = DataRef("synthetic", options=SYNTH, seed=1, staging="stream", stage_dir=str(tmp_path))
    streamed = staging._stage(IMAGE, ref, torch.device("cpu"), share=1, threads=1).train
    gathered = staging.StagedSplit(streamed.x.clone(), streamed.y.clone())
    order = torch.randperm(len(streamed), generator=torch.Generator().manual_seed(0))
    cpu = torch.device("cpu")
    for rank in range(world):
        a = list(feed.train_batches(gathered, order, 64, 11, rank, world, cpu))
        b = list(feed.train_batches(streamed, order, 64, 11, rank, world, cpu))
        assert len(a) == len(b) == 11
        for (xa, ya, na), (xb, yb, nb) in zip(a, b, strict=True):
            assert (
                torch.equal(xa, xb)
                and torch.equal(ya, yb)
                and na == nb == 64
                and len(ya) == len(range(rank, 64, world))
            )
        ev_a = list(feed.eval_batches(gathered, 100, rank, world, cpu))
        ev_b = list(feed.eval_batches(streamed, 100, rank, world, cpu))
        assert [n for *_, n in ev_a] == [n for *_, n in ev_b] == [100] * 7 + [20]
        assert all(torch.equal(p[0], q[0]) for p, q in zip(ev_a, ev_b, strict=True))


def _task(tmp_path: Path, data: DataRef, **changes) -> EpochTask:
    spec = seed_spec((3, 12, 12), 7)
    hp = {
        "lr": 0.05,
        "batch_size": 64,
        "weight_decay": 1e-4,
        "momentum": 0.9,
        "dropout": 0.0,
        "optimizer": "sgd",
        "schedule": "cosine",
    }
    base = dict(
        trial_id=0,
        epoch=1,
        epochs=2,
        arch=spec.to_dict(),
        hparams=hp,
        data=data,
        deadline=time.time() + 300,
        seed=3,
        threads=1,
        device="cpu",
        weights_dir=str(tmp_path),
    )
    task = {**base, **changes}
    return EpochTask(**{**task, "hparams": Hyperparameters.from_dict(task["hparams"])})


def test_an_epoch_streamed_through_the_loader_equals_one_gathered_on_the_device(tmp_path):
    results = {}
    for tier in ("device", "stream"):
        ref = DataRef(
            "synthetic", options=SYNTH, seed=2, staging=tier, stage_dir=str(tmp_path / "stage")
        )
        (tmp_path / tier).mkdir()
        results[tier] = run_epoch(IMAGE, _task(tmp_path / tier, ref))
    a, b = results["device"], results["stream"]
    assert a.status == b.status == "ok", (a.reason, b.reason)
    assert (
        a.metrics["train_samples"] == 704 and a.metrics["val_samples"] == 180
    )  # 720 train: 11 full batches of 64
    for key in ("train_samples", "train_loss", "train_accuracy", "val_loss", "val_accuracy"):
        assert a.metrics[key] == b.metrics[key], (
            key
        )  # same batches, same order: the same numbers, bit for bit
    assert a.weights.digest == b.weights.digest


def test_the_writer_saves_the_state_as_it_was_when_the_write_started(tmp_path):
    model = torch.nn.Linear(300, 200)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    model(torch.randn(4, 300)).sum().backward()
    optimizer.step()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    writer = SnapshotWriter()
    future = writer.start(tmp_path, "w.pt", model.state_dict(), optimizer.state_dict())
    with torch.no_grad():
        model.weight.add_(1.0)  # training goes on while the file is written
    ref = future.result()
    state, opt_state = load(tmp_path, ref)  # SHA-256 checked: the digest is the file's
    assert all(torch.equal(state[k], before[k]) for k in before)
    assert opt_state["state"][0]["momentum_buffer"].shape == (200, 300)
    again = writer.start(tmp_path, "w2.pt", model.state_dict(), None).result()
    assert torch.equal(load(tmp_path, again)[0]["weight"], before["weight"] + 1.0)


def test_a_model_built_on_the_meta_device_takes_its_weights_exactly(tmp_path):
    spec = seed_spec((3, 16, 16), 10)
    torch.manual_seed(0)
    reference = SpecNet(spec).eval()
    state = {k: v.clone() for k, v in reference.state_dict().items()}
    model = build_model(task_of("image"), spec, state, seed=123, device=torch.device("cpu")).eval()
    assert not any(t.is_meta for t in [*model.parameters(), *model.buffers()])
    x = torch.randn(5, 3, 16, 16)
    torch.testing.assert_close(model(x), reference(x), rtol=0, atol=0)
    fresh = build_model(
        task_of("image"), spec, None, seed=0, device=torch.device("cpu")
    )  # the same seed: the same net
    assert all(
        torch.equal(a, b)
        for a, b in zip(fresh.state_dict().values(), reference.state_dict().values(), strict=True)
    )


def test_tasks_read_back_from_json_keep_how_the_data_is_staged():
    ref = DataRef("synthetic", options=SYNTH, seed=4, staging="stream", stage_dir="/local/scratch")
    assert DataRef.from_dict(dataclasses.asdict(ref)) == ref
