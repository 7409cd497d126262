"""How far a child grows (aihpc.runner.search.growth): towards the size compute-optimal for the
operations one worker can still do, on the real tasks' growth steps and counts."""

from __future__ import annotations

import random

import pytest

from aihpc.base.errors import MorphError
from aihpc.runner.search.growth import MAX_STEPS, Sizes, grow, keeps_size, worker_room
from aihpc.tasks import task_of
from aihpc.tasks.image.seeds import seed_spec
from aihpc.tasks.language.spec import seed_lm_spec

IMAGE = task_of("image")
DIGITS = {"num_train": 1438}
SEED = seed_spec((1, 8, 8), 10)


def _replay(spec, seed: int, steps: int):
    """The architecture after ``steps`` growth steps drawn from ``seed``, and the next step's."""
    rng = random.Random(seed)
    for _ in range(steps):
        spec = IMAGE.plan(spec, rng, 2_000_000)[0]
    return spec, IMAGE.plan(spec, rng, 2_000_000)[0]


def test_the_room_is_the_runs_rate_per_worker_over_the_time_left():
    assert worker_room(ops=6e12, elapsed=100.0, workers=2, left=50.0) == pytest.approx(1.5e12)
    assert worker_room(ops=6e12, elapsed=100.0, workers=2, left=-1.0) == 0.0
    assert worker_room(ops=0, elapsed=100.0, workers=2, left=50.0) is None  # nothing counted yet
    assert worker_room(ops=6e12, elapsed=0.0, workers=2, left=50.0) is None


def test_min_train_ops_is_the_tasks_rule_on_the_counted_operations():
    """Against the worker's own counter (count_per_sample: counted on the meta device)."""
    sizes = Sizes(IMAGE, DIGITS)
    train, _ = IMAGE.count_per_sample(SEED, 1, 0.0)
    assert sizes.min_train_ops(SEED) == pytest.approx(4 * 1438 * train, rel=1e-12)
    assert sizes.ops_per_sample(SEED) == pytest.approx(train, rel=1e-12)
    lm = task_of("lm")
    spec = seed_lm_spec(
        vocab_size=257, context=32, width=48, layers=2, heads=3, head_dim=16, mlp_hidden=192
    )
    per_window = lm.count_per_sample(spec, 1, 0.0)[0]  # 32 tokens predicted
    expected = 20 * spec.num_params() * per_window / 32
    assert lm.min_train_ops(spec, {}) == pytest.approx(expected, rel=1e-12)


def test_each_architecture_is_counted_once(monkeypatch):
    calls = []
    real = IMAGE.recount_per_sample

    def counting(arch, batch, dropout):
        calls.append(arch.content_hash())
        return real(arch, batch, dropout)

    monkeypatch.setattr(IMAGE, "recount_per_sample", counting)
    sizes = Sizes(IMAGE, DIGITS)
    for _ in range(3):
        sizes.min_train_ops(SEED)
        sizes.ops_per_sample(SEED)
    assert len(calls) == 2  # min_train_ops's own count and the per-sample one, once each


@pytest.mark.parametrize("times", [3.0, 10.0, 40.0])
def test_a_child_grows_while_its_size_fits_the_room(times: float):
    """Steps are applied while the next one's min_train_ops is within the room: the child fits,
    one more step would not."""
    sizes = Sizes(IMAGE, DIGITS)
    room = times * sizes.min_train_ops(SEED)
    for seed in range(4):
        child, steps, described = grow(
            IMAGE,
            SEED,
            random.Random(seed),
            2_000_000,
            fits=lambda a: sizes.min_train_ops(a) <= room,
            is_new=lambda a: True,
        )
        assert len(described) == steps >= 1
        replayed, after = _replay(SEED, seed, steps)
        assert replayed.content_hash() == child.content_hash()  # what a worker replays
        assert steps == 1 or sizes.min_train_ops(child) <= room
        assert steps == MAX_STEPS or sizes.min_train_ops(after) > room


def test_a_child_grows_one_step_where_nothing_fits_and_on_only_until_it_is_new():
    rng_seed = 3
    first, second = _replay(SEED, rng_seed, 1)
    child, steps, _ = grow(
        IMAGE, SEED, random.Random(rng_seed), 2_000_000, lambda a: False, lambda a: True
    )
    assert steps == 1 and child.content_hash() == first.content_hash()
    seen = {first.content_hash()}
    child, steps, _ = grow(
        IMAGE,
        SEED,
        random.Random(rng_seed),
        2_000_000,
        lambda a: False,
        lambda a: a.content_hash() not in seen,
    )
    assert steps == 2 and child.content_hash() == second.content_hash()


def test_growth_stops_at_max_params_and_fails_where_nothing_new_is_left():
    small = SEED.num_params() + 4000  # room for a step or two
    child, steps, _ = grow(IMAGE, SEED, random.Random(0), small, lambda a: True, lambda a: True)
    assert 1 <= steps < MAX_STEPS and child.num_params() <= small
    with pytest.raises(MorphError):
        grow(IMAGE, SEED, random.Random(0), 2_000_000, lambda a: True, lambda a: False)


def test_a_parent_past_the_room_keeps_its_size():
    sizes = Sizes(IMAGE, DIGITS)
    size = sizes.min_train_ops(SEED)
    assert keeps_size(sizes, SEED, size) and keeps_size(sizes, SEED, size / 2)
    assert not keeps_size(sizes, SEED, size * 1.01)
    assert not keeps_size(sizes, SEED, None)  # no rate yet: it grows
