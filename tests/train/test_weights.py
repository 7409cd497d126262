"""Weight files written by workers: continued from, morphed from, and checked by digest."""

from __future__ import annotations

import random
import time

import torch

from aihpc.records.messages import DataRef, EpochTask, Morph, WeightsRef
from aihpc.records.trial import Hyperparameters
from aihpc.tasks import task_of
from aihpc.tasks.image.build import SpecNet
from aihpc.tasks.image.morphism import random_plan
from aihpc.tasks.image.seeds import seed_spec
from aihpc.train.weights import load, morphed_state, save
from aihpc.train.worker import run_epoch

IMAGE = task_of("image")

HP = {
    "lr": 0.05,
    "batch_size": 100,
    "weight_decay": 1e-4,
    "momentum": 0.9,
    "dropout": 0.0,
    "optimizer": "sgd",
    "schedule": "cosine",
}
SEED = seed_spec((1, 8, 8), 10)


def _task(tmp_path, **changes) -> EpochTask:
    base = dict(
        trial_id=0,
        epoch=1,
        epochs=2,
        arch=SEED.to_dict(),
        hparams=HP,
        data=DataRef("digits"),
        deadline=time.time() + 300,
        seed=3,
        threads=1,
        device="cpu",
        weights_dir=str(tmp_path),
    )
    task = {**base, **changes}
    return EpochTask(**{**task, "hparams": Hyperparameters.from_dict(task["hparams"])})


def _recipe(parent_weights, steps: int = 2, seed: int = 11):
    """The morph recipe of ``steps`` random plans from the seed network, and the child it gives."""
    spec, rng = SEED, random.Random(seed)
    for _ in range(steps):
        spec = random_plan(spec, rng)[0]
    return Morph(
        SEED.to_dict(), parent_weights, parent_seed=5, seed=seed, steps=steps, max_params=None
    ), spec


def test_a_file_round_trips_and_its_digest_is_checked(tmp_path):
    model = {"w": torch.arange(6.0).reshape(2, 3)}
    ref = save(tmp_path, "a.pt", model, None)
    state, opt = load(tmp_path, ref)
    assert torch.equal(state["w"], model["w"]) and opt is None
    path = tmp_path / "a.pt"
    data = bytearray(path.read_bytes())
    data[-20] ^= 0xFF  # one flipped byte
    path.write_bytes(bytes(data))
    r = run_epoch(IMAGE, _task(tmp_path, start=ref))
    assert (
        r.status == "failed"
        and "has changed since it was written" in r.reason
        and str(path) in r.reason
    )


def test_a_large_file_is_hashed_beside_its_write_and_loads_without_torchs_crc(tmp_path):
    """Storages of several MiB (each hashed in the second thread while it is written): the
    digest is the SHA-256 of the file's bytes, and the file loads as written."""
    import hashlib

    from aihpc.train import weights

    big = torch.randn(3, weights.PARALLEL_HASH_BYTES // 4 + 7, generator=torch.Generator())
    model = {"big": big, "small": torch.arange(5.0)}
    optimizer = {"state": {0: {"exp_avg": big * 2}}, "param_groups": [{"params": [0]}]}
    ref = save(tmp_path, "big.pt", model, optimizer)
    assert ref.digest == hashlib.sha256((tmp_path / "big.pt").read_bytes()).hexdigest()
    state, opt = torch.load(tmp_path / "big.pt", weights_only=True).values()
    assert torch.equal(state["big"], big) and torch.equal(opt["state"][0]["exp_avg"], big * 2)


def test_a_missing_start_file_fails_the_epoch_with_its_name(tmp_path):
    r = run_epoch(IMAGE, _task(tmp_path, start=WeightsRef("gone.pt", "0" * 64)))
    assert r.status == "failed" and "cannot read weight file" in r.reason and "gone.pt" in r.reason


def test_the_second_epoch_continues_from_the_first_epochs_file(tmp_path):
    first = run_epoch(IMAGE, _task(tmp_path))
    second = run_epoch(IMAGE, _task(tmp_path, epoch=2, start=first.weights))
    assert second.status == "ok" and second.weights.name == "trial0-epoch2-try1.pt"
    # continuing (weights and momentum) beats starting over at the same point of the schedule
    over = run_epoch(IMAGE, _task(tmp_path, epoch=2, trial_id=1))
    assert second.metrics["train_loss"] < over.metrics["train_loss"]
    assert first.weights != second.weights and (tmp_path / first.weights.name).exists()


def test_a_childs_start_computes_its_parents_function(tmp_path):
    torch.manual_seed(0)
    parent = SpecNet(SEED)
    with torch.no_grad():  # non-trivial BN statistics, so the check is not vacuous
        for m in parent.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                m.running_mean.uniform_(-0.5, 0.5)
                m.running_var.uniform_(0.5, 2.0)
    ref = save(tmp_path, "parent.pt", parent.state_dict(), None)
    recipe, child_spec = _recipe(ref)
    child = SpecNet(child_spec)
    child.load_state_dict(
        morphed_state(task_of("image"), recipe, child_spec.to_dict(), tmp_path)[0], strict=True
    )
    x = torch.randn(16, 1, 8, 8, dtype=torch.float32)
    parent.eval(), child.eval()
    torch.testing.assert_close(child(x), parent(x), atol=1e-4, rtol=1e-4)


def test_a_childs_first_epoch_trains_from_the_recipe_and_a_wrong_recipe_fails(tmp_path):
    recipe, child_spec = _recipe(None)  # the seed's fresh weights, from parent_seed
    r = run_epoch(IMAGE, _task(tmp_path, trial_id=4, arch=child_spec.to_dict(), morph=recipe))
    assert r.status == "ok", r.reason
    SpecNet(child_spec).load_state_dict(load(tmp_path, r.weights)[0], strict=True)
    wrong = Morph(**{**recipe.__dict__, "seed": recipe.seed + 1})
    r = run_epoch(IMAGE, _task(tmp_path, trial_id=5, arch=child_spec.to_dict(), morph=wrong))
    assert r.status == "failed" and "the morph recipe gives architecture" in r.reason


def test_a_state_this_worker_wrote_is_served_from_memory_as_a_copy(tmp_path):
    from aihpc.train.weights import SnapshotWriter, StateCache

    cache = StateCache(max_bytes=10**6)
    writer = SnapshotWriter(cache)
    model = {"w": torch.arange(6.0)}
    ref = writer.start(
        tmp_path, "a.pt", model, {"state": {0: {"momentum_buffer": torch.ones(6)}}}
    ).result()
    (tmp_path / "a.pt").unlink()  # not read again: the copy in memory is the state the file held
    kept = cache.get(ref)
    assert kept is not None and torch.equal(kept[0]["w"], torch.arange(6.0)) and cache.hits == 1
    kept[0]["w"].add_(100.0)  # what trains from it changes its own copy only
    kept[1]["state"][0]["momentum_buffer"].zero_()
    again = cache.get(ref)
    assert (
        torch.equal(again[0]["w"], torch.arange(6.0))
        and again[1]["state"][0]["momentum_buffer"].sum() == 6
    )
    assert cache.get(WeightsRef("other.pt", "0" * 64)) is None and cache.misses == 1


def test_the_state_cache_keeps_the_most_recent_within_its_bytes_and_always_the_last():
    from aihpc.train.weights import StateCache

    cache = StateCache(max_bytes=3 * 400)  # three states of 100 float32
    refs = [WeightsRef(f"{i}.pt", str(i) * 64) for i in range(4)]
    for ref in refs[:3]:
        cache.put(ref, {"w": torch.zeros(100)}, None)
    assert cache.get(refs[0]) is not None  # now the most recently used
    cache.put(refs[3], {"w": torch.zeros(100)}, None)
    assert cache.get(refs[1]) is None  # the least recently used went
    assert all(cache.get(ref) is not None for ref in (refs[0], refs[2], refs[3]))
    large = WeightsRef("large.pt", "9" * 64)
    cache.put(large, {"w": torch.zeros(1000)}, {"m": torch.ones(10)})  # more than max_bytes
    assert all(cache.get(ref) is None for ref in refs)  # the older ones went, not the last one
    model, optimizer = cache.get(large, optimizer=False)  # a child's start: the model alone
    assert model["w"].shape == (1000,) and optimizer is None


def test_a_child_starts_from_the_parent_this_worker_trained_without_its_file(tmp_path):
    from aihpc.train import weights

    parent = run_epoch(IMAGE, _task(tmp_path))
    (tmp_path / parent.weights.name).rename(tmp_path / "moved.pt")  # only the kept copy remains
    hits = weights.STATES.hits
    morph, child = _recipe(parent.weights)
    r = run_epoch(IMAGE, _task(tmp_path, trial_id=1, arch=child.to_dict(), morph=morph))
    assert r.status == "ok", r.reason
    assert weights.STATES.hits == hits + 1
