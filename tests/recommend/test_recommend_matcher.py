"""The matcher's fit, its file format, the pick, and the validation statistics."""

import json

import numpy as np
import pytest
from scipy.stats import kendalltau

from aihpc.errors import ConfigError
from aihpc.recommend import matcher as M
from aihpc.recommend.complexity import Complexity
from aihpc.recommend.ranking import choose
from aihpc.recommend.scoring import CandidateScore
from aihpc.recommend.study import Observation, observation_from_dict
from aihpc.recommend.validate import _judge, judge_set, rejudge


def _score(name, params, ops, synflow=1.0):
    return CandidateScore(name, "spec", "", params, ops, {"snip": 1.0, "grad_norm": 1.0, "synflow": synflow,
                                                         "jacob_cov": -5.0, "naswot": 100.0})


CX = Complexity(f1=1.0, n1=0.2, n3=0.1, t2=20.0, probe_error=0.1, num_samples=1280, sample_size=1000,
                num_classes=10, dimension=64)


def test_fit_recovers_a_linear_truth_and_picks_alpha_by_task_cross_validation():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(120, len(M.FEATURES)))
    w = rng.normal(size=len(M.FEATURES)) * 0.02
    t = 0.5 + x @ w
    m, cv = M.fit(x, t, np.repeat(np.arange(6), 20), {"command": "test"})
    assert m.alpha == min(M.ALPHAS)  # noise-free: the least penalty wins
    np.testing.assert_allclose(m.raw(x), t, atol=1e-3)
    assert set(cv) == set(M.ALPHAS)


def test_predict_clips_raw_does_not_and_the_file_round_trips(tmp_path):
    n = len(M.FEATURES)
    m = M.Matcher((0.0,) * n, (1.0,) * n, (1.0,) + (0.0,) * (n - 1), 0.5, 1.0, {"seed": 0})
    x = np.zeros((2, n))
    x[0, 0], x[1, 0] = 2.0, -0.2
    np.testing.assert_allclose(m.raw(x), [2.5, 0.3])
    np.testing.assert_allclose(m.predict(x), [1.0, 0.3])
    path = tmp_path / "m.json"
    path.write_text(json.dumps(m.to_dict()))
    assert M.load(path) == m
    path.write_text(json.dumps({**m.to_dict(), "features": ["x"]}))
    with pytest.raises(ConfigError, match="features differ"):
        M.load(path)


def test_the_shipped_matcher_loads_and_says_how_it_was_made():
    m = M.load()
    assert m.provenance["command"].startswith("aihpc recommend calibrate")
    assert m.provenance["rows"] == len(m.provenance["tasks"]) * 20
    assert len(m.coef) == len(M.FEATURES)


def test_features_take_logs_of_sizes_and_proxies():
    f = dict(zip(M.FEATURES, M.features(CX, _score("a", 1000, 1e6, synflow=100.0))))
    assert f["log_params"] == pytest.approx(3.0) and f["log_ops"] == pytest.approx(6.0)
    assert f["log_synflow"] == pytest.approx(2.0) and f["naswot"] == pytest.approx(100 / 64)
    assert f["log_params*probe_error"] == pytest.approx(0.3)


def test_choose_takes_the_cheapest_within_the_margin_and_the_budget():
    scores = [_score("big", 1, 100.0), _score("mid", 1, 10.0), _score("tiny", 1, 1.0)]
    pred = np.array([0.90, 0.89, 0.80])
    assert choose(scores, pred, margin=0.02) == 1
    assert choose(scores, pred, margin=0.0) == 0
    assert choose(scores, pred, margin=0.02, budget_ops=5) == 2
    with pytest.raises(ConfigError, match="cheapest needs 1 training"):
        choose(scores, pred, budget_ops=0.5)


def test_judge_a_perfect_and_a_reversed_predictor():
    rng = np.random.default_rng(0)
    truths = [np.array([0.5, 0.7, 0.9, 0.6]), np.array([0.2, 0.3, 0.1, 0.4])]
    perfect = _judge("p", truths, truths, [2, 3], rng)
    assert perfect.tau == pytest.approx(1.0) and perfect.rho == pytest.approx(1.0) and perfect.lost == 0
    worst = _judge("w", [-t for t in truths], truths, [0, 2], rng)
    assert worst.tau == pytest.approx(-1.0) and worst.lost == pytest.approx((0.4 + 0.3) / 2)
    assert worst.lost_max == pytest.approx(0.4)
    rand = _judge("r", truths, truths, None, rng)
    assert abs(rand.tau) < 0.1 and rand.lost == pytest.approx(((0.9 - 0.675) + (0.4 - 0.25)) / 2)


def test_judge_set_reports_baselines_and_seed_agreement_and_rejudges_from_a_file():
    scores = tuple(_score(f"c{i}", 10 ** (i + 1), 10.0 ** (i + 2), synflow=float(i + 1)) for i in range(4))
    acc = np.array([[0.5, 0.6, 0.5], [0.6, 0.5, 0.6], [0.8, 0.8, 0.8], [0.9, 0.9, 0.9]])
    obs = [Observation("t", "small", CX, scores, acc)]
    report = judge_set(obs, M.load(), seed=100)
    names = [p.name for p in report.predictors]
    assert names[:4] == ["matcher", "most parameters", "most operations", "random"]
    by = dict(zip(names, report.predictors))
    assert by["most parameters"].tau == pytest.approx(1.0) and by["most parameters"].lost == 0
    pairs = [kendalltau(acc[:, i], acc[:, j]).statistic for i, j in ((0, 1), (0, 2), (1, 2))]
    assert report.seed_tau == pytest.approx(np.mean(pairs))
    again = rejudge([observation_from_dict(json.loads(json.dumps(obs[0].to_dict())))], M.load())
    assert again[0] == report


def test_kendall_and_spearman_match_scipy_with_ties_and_in_batches():
    from scipy.stats import spearmanr

    from aihpc.recommend.validate import kendall_spearman

    rng = np.random.default_rng(3)
    a = rng.integers(0, 4, (50, 7)).astype(float)
    b = rng.integers(0, 4, (50, 7)).astype(float)
    tau, rho = kendall_spearman(a, b)
    for k in range(50):
        if np.ptp(a[k]) and np.ptp(b[k]):
            assert tau[k] == pytest.approx(kendalltau(a[k], b[k]).statistic, abs=1e-12)
            assert rho[k] == pytest.approx(spearmanr(a[k], b[k]).statistic, abs=1e-12)
    assert kendall_spearman(np.ones(4), np.arange(4.0)) == (0.0, 0.0)
