"""The calibration and validation task families, and observing them in parallel."""

import numpy as np
import pytest

from aihpc.recommend.families import FAMILIES, TaskSpec, calibration_tasks, validation_tasks


def test_the_families_span_the_range_users_bring_and_calibration_and_validation_are_disjoint():
    cal, val = calibration_tasks(), validation_tasks()
    assert {s.family for s in cal} == {s.family for s in val} == set(FAMILIES)
    assert not {s.name for s in cal} & {s.name for s in val}
    shapes = {s.shape for s in cal}
    assert {c for c, _, _ in shapes} == {1, 3} and {h for _, h, _ in shapes} == {8, 16, 32}
    assert (3, 32, 32) in {s.shape for s in val}


@pytest.mark.parametrize("name", ["digits-colour_16_n800_s0.4_k3589", "photos_16_k24_n60"])
def test_a_family_task_is_built_through_a_reader_with_its_shape_and_classes(name):
    spec = next(s for s in calibration_tasks() if s.name == name)
    task = spec.build()
    assert task.name == name and task.input_shape == spec.shape
    assert task.num_classes == (4 if "k3589" in name else 24)
    assert set(task.y_train.tolist()) == set(range(task.num_classes))
    assert (
        abs(float(task.x_train.mean())) < 0.2 and 0.5 < float(task.x_train.std()) < 2
    )  # normalised


def test_placed_digits_keep_train_and_validation_digits_apart():
    from aihpc.recommend.families import _base_digits

    images, labels, train = _base_digits(3)
    assert 0.68 < train.mean() < 0.72
    for k in range(10):  # stratified: every class on both sides
        assert train[labels == k].any() and (~train[labels == k]).any()


@pytest.mark.slow
def test_observations_do_not_depend_on_the_number_of_workers():
    from aihpc.recommend.study import observe_all

    specs: list[TaskSpec] = [
        s for s in calibration_tasks() if s.name in ("digits_0to4", "digits_20pct")
    ]
    # one training step per candidate: what is checked is that the workers change nothing
    one = observe_all(specs, seeds=1, steps=1, limit=2, workers=1)
    two = observe_all(specs, seeds=1, steps=1, limit=2, workers=2)
    assert [o.task for o in one] == [s.name for s in specs for _ in range(2)]
    for a, b in zip(one, two, strict=True):
        assert a.to_record() == b.to_record()
        np.testing.assert_array_equal(a.accuracy, b.accuracy)
