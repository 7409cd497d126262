"""Architectures written as their parent's plus the morphisms' edits, and rebuilt exactly."""

from __future__ import annotations

import json
import random

import pytest

from aihpc.base.errors import DataError
from aihpc.records.archdiff import ArchBook, diff, patch
from aihpc.results.read import trial_arch
from aihpc.tasks.image.morphism import random_plan
from aihpc.tasks.image.seeds import seed_spec
from aihpc.tasks.image.spec import ArchSpec


def _lineage(n: int, seed: int = 0) -> list[tuple[int, int | None, dict]]:
    """``n`` trials: the seed, then children of random earlier trials, each morphed 1 to 3 times."""
    rng = random.Random(seed)
    specs = [seed_spec((3, 32, 32), 10)]
    trials = [(0, None, specs[0].to_dict())]
    for trial_id in range(1, n):
        parent = rng.randrange(trial_id)
        spec = specs[parent]
        for _ in range(rng.randint(1, 3)):
            spec = random_plan(spec, rng, 5_000_000)[0]
        specs.append(spec)
        trials.append((trial_id, parent, spec.to_dict()))
    return trials


def test_patch_rebuilds_every_child_exactly_and_the_diff_is_small() -> None:
    trials = _lineage(60)
    archs = {i: arch for i, _, arch in trials}
    sizes = []
    for trial_id, parent, arch in trials[1:]:
        delta = json.loads(json.dumps(diff(arch, archs[parent])))  # as read back from the file
        rebuilt = patch(delta, archs[parent])
        assert rebuilt == arch, trial_id
        assert ArchSpec.from_dict(rebuilt).content_hash() == ArchSpec.from_dict(arch).content_hash()
        sizes.append(len(json.dumps(delta)) / len(json.dumps(arch)))
    assert max(sizes) < 0.5 and sum(sizes) / len(sizes) < 0.2


def test_fields_that_differ_or_disappear_are_written() -> None:
    base = {
        "input_shape": [1, 8, 8],
        "layers": [{"name": "a"}, {"name": "b"}],
        "num_classes": 10,
        "old": 1,
    }
    child = {"input_shape": [1, 8, 8], "layers": [{"name": "b"}, {"name": "c"}], "num_classes": 5}
    delta = diff(child, base)
    assert delta == {"layers": [[1, 2], {"name": "c"}], "num_classes": 5, "removed": ["old"]}
    assert patch(delta, base) == child


@pytest.mark.parametrize("item", [[0, 9], [2, 1], "0-1", [0.5, 1]])
def test_a_diff_that_does_not_fit_its_parent_is_a_data_error(item) -> None:
    with pytest.raises(DataError, match="not a range of the parent's layers"):
        patch({"layers": [item]}, {"layers": [{"name": "a"}, {"name": "b"}]})


def test_the_book_keeps_a_parent_only_until_its_last_child() -> None:
    trials = _lineage(80, seed=3)
    book = ArchBook((i, p) for i, p, _ in trials)
    last_child = {}
    for i, p, _ in trials:
        if p is not None:
            last_child[p] = i
    most = 0
    for trial_id, parent, arch in trials:
        if parent is not None:
            assert book.parent_arch(parent) == trials[parent][2]
        book.read(trial_id, parent, arch)
        alive = {p for p, last in last_child.items() if p <= trial_id < last}
        assert len(book) == len(alive)
        most = max(most, len(book))
    assert len(book) == 0 and most < len(trials) // 2


def test_trial_arch_walks_the_diffs_of_results_json() -> None:
    trials = _lineage(30, seed=5)
    archs = {i: arch for i, _, arch in trials}
    records = {
        i: {
            "id": i,
            "parent": p,
            **({"arch": a} if p is None else {"arch_diff": diff(a, archs[p])}),
        }
        for i, p, a in trials
    }
    for i in archs:
        assert trial_arch(records, i) == archs[i]
    del records[0]
    assert trial_arch(records, 29) is None and trial_arch(records, 99) is None
