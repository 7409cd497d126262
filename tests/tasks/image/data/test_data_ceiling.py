"""The synthetic data set's ceiling: the model-aware oracle classifier."""

from __future__ import annotations

import numpy as np
import pytest

from aihpc.base.errors import DataError
from aihpc.tasks.image.data import load_dataset
from aihpc.tasks.image.data.ceiling import (
    clopper_pearson,
    oracle_predict,
    synthetic_ceiling,
    task_description,
)


def _synthetic(**options):
    return load_dataset("synthetic", seed=3, **{"num_samples": 1000, "image_size": 8, **options})


def test_noise_free_mixtures_are_read_exactly():
    # Built by hand from the true prototypes: contrast 1.2, the label's prototype
    # plus 0.6 of another class's at the same shift, offset 0.1, no noise.
    gen = _synthetic(num_classes=5).val.generator
    templates = list(gen.shifted_templates())
    c, h, w = gen.shape
    cases = [(0, 3, 0), (2, 1, 4), (4, 0, len(templates) - 1)]
    raw = np.stack(
        [0.5 + 0.25 * (1.2 * (templates[s][k] + 0.6 * templates[s][j]) + 0.1) for k, j, s in cases]
    ).reshape(-1, c, h, w)
    assert oracle_predict(gen, raw).tolist() == [k for k, _, _ in cases]
    # The stronger of two overlaid prototypes is the label: swap the weights, swap the answer.
    swapped = np.stack(
        [0.5 + 0.25 * (1.2 * (0.6 * templates[s][k] + templates[s][j]) + 0.1) for k, j, s in cases]
    ).reshape(-1, c, h, w)
    assert oracle_predict(gen, swapped).tolist() == [j for _, j, _ in cases]


def test_easy_task_has_a_ceiling_of_one():
    ceiling = synthetic_ceiling(_synthetic(difficulty=0.0))
    assert ceiling.oracle_accuracy == 1.0 and ceiling.high == 1.0
    assert ceiling.samples == 200  # the whole validation split (val_fraction 0.2)


def test_oracle_beats_a_classifier_learnt_from_the_data():
    # A known model is worth more than 1800 labelled samples: the oracle must
    # beat logistic regression on the same validation samples.
    from sklearn.linear_model import LogisticRegression

    data = load_dataset("synthetic", seed=0, num_samples=2400, image_size=16, difficulty=0.7)
    x_train, y_train = data.tensors("train")
    x_val, y_val = data.tensors("val")
    probe = LogisticRegression(max_iter=300).fit(x_train.flatten(1).numpy(), y_train.numpy())
    learnt = probe.score(x_val.flatten(1).numpy(), y_val.numpy())
    ceiling = synthetic_ceiling(data)
    assert ceiling.samples == 480
    assert ceiling.oracle_accuracy > learnt + 0.05, (ceiling.oracle_accuracy, learnt)
    assert ceiling.low < ceiling.oracle_accuracy < ceiling.high


def test_ambiguous_overlay_lowers_the_ceiling():
    easy = synthetic_ceiling(_synthetic(difficulty=0.5, num_samples=4000))
    hard = synthetic_ceiling(_synthetic(difficulty=1.0, num_samples=4000))
    assert hard.oracle_accuracy < easy.oracle_accuracy - 0.1


def test_clopper_pearson_against_closed_forms():
    # 0 of n: upper = 1 - (alpha/2)^(1/n); n of n: lower = (alpha/2)^(1/n).
    assert clopper_pearson(0, 10, 0.95) == pytest.approx((0.0, 1 - 0.025**0.1))
    assert clopper_pearson(10, 10, 0.95) == pytest.approx((0.025**0.1, 1.0))
    low, high = clopper_pearson(50, 100, 0.95)
    assert low == pytest.approx(1 - high) and low == pytest.approx(0.3983, abs=1e-4)


def test_only_the_synthetic_data_set_has_a_known_ceiling():
    digits = load_dataset("digits", seed=0)
    with pytest.raises(DataError, match="only for the synthetic data set, got 'digits'"):
        synthetic_ceiling(digits)
    info = task_description(digits)
    assert info["ceiling"] is None and info["generator"] is None and "digits" in info["description"]
    info = task_description(_synthetic(difficulty=0.25))
    assert info["generator"]["distractor_max_weight"] == pytest.approx(0.375)
    assert info["ceiling"]["oracle_accuracy"] == pytest.approx(1.0)
    # ImageNet-sized synthetic data: estimating would take minutes, so it is not estimated
    big = load_dataset("synthetic", seed=0, num_samples=200, num_classes=100, image_size=224)
    assert task_description(big)["ceiling"] is None
