"""Complexity measures against small cases worked out by hand, and scipy as a reference."""

import numpy as np
import pytest

from aihpc.base.errors import DataError
from aihpc.recommend import complexity as C


def test_f1_is_the_best_features_fisher_ratio():
    # feature 0: class 0 at {0, 2}, class 1 at {4, 6}: means 1, 5, overall 3;
    # between = 2*(1-3)^2 + 2*(5-3)^2 = 16, within = 1+1+1+1 = 4 -> 4.
    # feature 1: both class means 2 -> between 0 -> ratio 0.
    x = np.array([[0, 0], [2, 4], [4, 1], [6, 3]], dtype=float)
    y = np.array([0, 0, 1, 1])
    assert C.fisher_f1(x, y) == pytest.approx(4.0)


def test_f1_caps_a_feature_constant_within_classes():
    x = np.array([[0.0], [0.0], [1.0], [1.0]])
    assert C.fisher_f1(x, np.array([0, 0, 1, 1])) == C.F1_CAP


def test_n1_counts_the_points_on_a_cross_class_tree_edge():
    # points on a line 0, 1, 2 (class 0) and 10, 11 (class 1): the tree is the chain,
    # its one cross edge 2-10 puts 2 of 5 points on the boundary.
    x = np.array([[0.0], [1.0], [2.0], [10.0], [11.0]])
    assert C.boundary_n1(x, np.array([0, 0, 0, 1, 1])) == pytest.approx(0.4)


def test_prim_tree_weighs_what_scipys_minimum_spanning_tree_weighs():
    from scipy.sparse.csgraph import minimum_spanning_tree  # in the test, not at collection

    rng = np.random.default_rng(0)
    x = rng.normal(size=(60, 5))
    d = C._distances(x)
    rows, cols = C.minimum_spanning_edges(d)
    assert len(rows) == 59
    assert d[rows, cols].sum() == pytest.approx(minimum_spanning_tree(d).sum(), rel=1e-12)


def test_n3_is_the_leave_one_out_nearest_neighbour_error():
    # 0(a) -> 1(b) wrong; 1(b) -> 0(a) wrong; 3(a) -> 1(b) wrong; 10, 11 (b) right: 3/5.
    x = np.array([[0.0], [1.0], [3.0], [10.0], [11.0]])
    assert C.nn_error_n3(x, np.array([0, 1, 0, 1, 1])) == pytest.approx(0.6)


def test_probe_separates_separable_classes_and_not_random_labels():
    rng = np.random.default_rng(1)
    y = np.repeat([0, 1], 60)
    x = rng.normal(size=(120, 1, 6, 6)) + 3.0 * y[:, None, None, None]
    assert C.probe_error(x, y) == 0.0
    assert C.probe_error(rng.normal(size=(120, 1, 6, 6)), y) > 0.25


def test_ridge_cv_error_matches_a_hand_fold():
    # two well separated 1-D classes: every fold classifies its points right.
    feats = np.array([[-2.0], [-1.9], [-2.1], [2.0], [1.9], [2.1]])
    assert C.ridge_cv_error(feats, np.array([0, 0, 0, 1, 1, 1]), folds=3) == 0.0


def test_measure_bounds_its_sample_and_t2_uses_the_whole_set():
    rng = np.random.default_rng(2)
    y = np.repeat(np.arange(4), 300)
    x = rng.normal(size=(1200, 1, 4, 4)) + y[:, None, None, None]
    c = C.measure(x, y, max_samples=200)
    assert c.sample_size == 200 and c.num_samples == 1200 and c.dimension == 16
    assert c.t2 == pytest.approx(1200 / 16)
    assert 0 <= c.n3 <= c.n1 <= 1 and c.f1 > 0


@pytest.mark.parametrize(
    "labels, words",
    [
        (np.zeros(50, dtype=int), "one class"),
        (np.repeat([0, 1], 5), "10 training samples"),
        (np.r_[np.zeros(30, dtype=int), [1]], "class 1 has 1"),
    ],
)
def test_unusable_tasks_are_data_errors(labels, words):
    with pytest.raises(DataError, match=words):
        C.check_task(labels)
