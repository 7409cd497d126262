"""PBT's exploit and explore (aihpc.runner.search.inherit): a child's hyperparameters are its
parent's, the weight decay x0.8 or x1.25, within the search space, the learning rate kept."""

from __future__ import annotations

import dataclasses
import random
from collections import Counter

import pytest

from aihpc.nas.search import Candidate
from aihpc.records.trial import Hyperparameters
from aihpc.runner.search.inherit import FACTORS, origin, perturb, worth_inheriting
from aihpc.tasks import read_config, task_of
from aihpc.tasks.image.task import image_space

SPACE = image_space((32, 64, 128), "sgd", "cosine")  # lr in [1e-3, 0.4], wd in [1e-6, 1e-2]
PARENT = Hyperparameters(lr=0.05, batch_size=64, weight_decay=1e-4, momentum=0.8, dropout=0.2)


def test_a_child_multiplies_the_weight_decay_and_keeps_the_learning_rate_and_the_rest():
    rng = random.Random(0)
    seen: Counter[float] = Counter()
    for _ in range(400):
        child = perturb(PARENT, rng, SPACE)
        wd = child.weight_decay / PARENT.weight_decay
        assert wd == pytest.approx(FACTORS[wd > 1])
        seen[round(wd, 2)] += 1
        assert dataclasses.replace(child, weight_decay=PARENT.weight_decay) == PARENT
    # each factor with equal chances: about half each
    assert set(seen) == {0.8, 1.25} and all(160 < n < 240 for n in seen.values()), seen


def test_a_perturbed_value_is_held_within_the_search_space():
    for edge in (1e-6, 1e-2):
        parent = dataclasses.replace(PARENT, weight_decay=edge)
        seen = {perturb(parent, random.Random(seed), SPACE).weight_decay for seed in range(20)}
        assert seen == ({1e-6, 1e-6 * 1.25} if edge < 1e-3 else {1e-2 * 0.8, 1e-2})


def test_the_draws_repeat_with_the_seed():
    a = [perturb(PARENT, random.Random(5), SPACE) for _ in range(3)]
    assert a[0] == a[1] == a[2]


def test_the_origins_read_as_results_json_shows_them():
    assert origin(None) == "tpe" and origin(7) == "inherited from trial 7"


@pytest.mark.parametrize("name", ["image", "lm"])
@pytest.mark.parametrize("optimizer", ["sgd", "adamw"])
def test_the_tasks_defaults_lie_within_their_search_space(name: str, optimizer: str):
    """TPE is told a default trial's result, which it takes only within its ranges."""
    task = task_of(name)
    for device in ("cpu", "cuda"):
        config = task.default_workload(read_config(dict(task=name, optimizer=optimizer)), device)
        hp = task.default_hparams(config)
        space = task.search_space(config)
        for key, low, high, _ in space.floats:
            assert low <= getattr(hp, key) <= high, (name, device, key)
        for key, choices in space.choices:
            assert getattr(hp, key) in choices
        assert all(getattr(hp, key) == value for key, value in space.fixed)


def test_only_a_parent_in_the_better_half_of_the_window_passes_its_hyperparameters_on():
    window = [Candidate(i, acc) for i, acc in enumerate([0.03, 0.70, 0.55, 0.80])]
    assert [worth_inheriting(c.trial_id, window) for c in window] == [False, True, False, True]
    assert worth_inheriting(0, window[:1])  # alone: the best there is
    assert not worth_inheriting(0, window[:2]) and worth_inheriting(1, window[:2])
    three = window[:3]  # the median, 0.55, is in the better half
    assert [worth_inheriting(c.trial_id, three) for c in three] == [False, True, True]
    assert worth_inheriting(9, window)  # a parent the window no longer holds
    ties = [Candidate(0, 0.5), Candidate(1, 0.5)]
    assert worth_inheriting(0, ties) and worth_inheriting(1, ties)
