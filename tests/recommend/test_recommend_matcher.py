"""The matcher's fit against scikit-learn, its bounds, interval and file; the domain; the pick."""

import json

import msgspec
import numpy as np
import pytest

from aihpc.base.errors import ConfigError, DataError
from aihpc.recommend import matcher as M
from aihpc.recommend.domain import check, describe
from aihpc.recommend.ranking import choose, choose_by_fallback, decide
from aihpc.recommend.scoring import CandidateScore
from aihpc.recommend.validate import vote
from aihpc.records.kinds_recommend import ComplexityRecord

CX = ComplexityRecord(
    f1=1.0,
    n1=0.2,
    n3=0.1,
    t2=20.0,
    probe_error=0.1,
    num_samples=1280,
    sample_size=1000,
    num_classes=10,
    dimension=64,
)


def _score(name, params, ops, synflow=1.0, snip=1.0, naswot=100.0):
    return CandidateScore(
        name,
        "spec",
        "",
        params,
        ops,
        {"snip": snip, "grad_norm": 1.0, "synflow": synflow, "jacob_cov": -5.0, "naswot": naswot},
    )


def test_the_newton_fit_matches_scikit_learn_on_fractional_targets():
    """Fractions y as two weighted rows (1 with weight y, 0 with 1 - y): sklearn's L2 logistic
    regression with C = 1 / alpha (intercept not penalised) has the same optimum."""
    from sklearn.linear_model import LogisticRegression

    rng = np.random.default_rng(0)
    z = rng.normal(size=(200, 5))
    y = M._sigmoid(z @ np.array([1.5, -1.0, 0.5, 0.0, 2.0]) + 0.3 + rng.normal(0, 0.5, 200))
    w = M._newton(
        np.hstack([z, np.ones((200, 1))]), y, np.array([3.0] * 5 + [0.0])
    )  # intercept free
    coef, icpt = w[:-1], w[-1]
    ref = LogisticRegression(C=1 / 3.0, tol=1e-12, max_iter=10_000).fit(
        np.vstack([z, z]), np.r_[np.ones(200), np.zeros(200)], sample_weight=np.r_[y, 1 - y]
    )
    np.testing.assert_allclose(coef, ref.coef_[0], atol=1e-6)
    assert icpt == pytest.approx(ref.intercept_[0], abs=1e-6)


def _matcher(coef0=1.0, residuals=(-1.0, 0.5)):
    n = len(M.FEATURES)
    return M.Matcher(
        (0.0,) * n,
        (1.0,) * n,
        (coef0,) + (0.0,) * (n - 1),
        0.0,
        (1.0, 1.0),
        residuals,
        (-1.0,) * n,
        (1.0,) * n,
        {"seed": 0},
    )


def test_predictions_stay_between_chance_and_one_with_the_interval_around_them(tmp_path):
    m = _matcher()
    x = np.zeros((4, len(M.FEATURES)))
    x[:, 0] = [-1e9, -1.0, 0.0, 1e9]  # far outside anything calibrated
    p = m.predict(x, classes=10)
    assert np.all((p.low >= 0.1) & (p.high <= 1.0))
    assert np.all(p.low <= p.accuracy) and np.all(p.accuracy <= p.high)
    assert p.accuracy[0] == pytest.approx(0.1) and p.accuracy[-1] == pytest.approx(1.0)
    assert p.eta[0] < p.eta[1] < p.eta[2] < p.eta[3]  # the order survives saturation
    assert p.accuracy[2] == pytest.approx(0.1 + 0.9 * 0.5)
    assert p.low[2] == pytest.approx(0.1 + 0.9 * M._sigmoid(np.array(-1.0)))
    path = tmp_path / "m.json"
    path.write_text(json.dumps(m.to_dict()))
    assert M.load(path) == m
    for bad, words in (
        ({"features": ["x"]}, "features differ"),
        ({"format_version": 1}, "format_version 2"),
        ({"residuals": [0.1]}, "malformed matcher"),
        ({"alpha": 1.0}, "malformed matcher"),
    ):
        path.write_text(json.dumps({**m.to_dict(), **bad}))
        with pytest.raises(DataError, match=words):
            M.load(path)


def test_two_stage_learns_the_within_task_order_apart_from_the_task_levels():
    """Candidates ordered by one candidate feature, task levels by one task feature: the fit
    recovers both, and the penalties are chosen by leave-one-family-out cross-validation."""
    rng = np.random.default_rng(1)
    tasks = np.repeat(np.arange(30), 10)
    x = rng.normal(size=(300, len(M.FEATURES)))
    x[:, : len(M.TASK_FEATURES)] = rng.normal(size=(30, len(M.TASK_FEATURES)))[
        tasks
    ]  # task features per task
    cand, task = M.FEATURES.index("log_synflow"), M.FEATURES.index("n3")
    classes = np.repeat([2, 10, 100], 100)
    eta = 1.5 * x[:, cand] - 1.0 * x[:, task]
    acc = 1 / classes + (1 - 1 / classes) * M._sigmoid(eta)
    m = M.fit(x, acc, classes, tasks % 5, tasks, {"command": "test"})
    assert m.alpha[0] in M.ALPHAS and m.alpha[1] in M.ALPHAS
    assert m.provenance["cv_tau_by_within_alpha"][str(m.alpha[0])] > 0.95
    coef = np.asarray(m.coef) / np.asarray(m.scale)
    assert coef[cand] > 1.0 and coef[task] < -0.5
    others = np.delete(np.abs(coef), [cand, task])
    assert others.max() < 0.2 * coef[cand]
    assert m.residuals[0] <= 0 <= m.residuals[1]
    assert m.lower == tuple(x.min(0)) and m.upper == tuple(x.max(0))


def test_the_shipped_matcher_says_how_it_was_made_and_is_refitted_from_its_observations():
    from dataclasses import fields

    from aihpc.recommend.calibrate import fit_observations
    from aihpc.recommend.study import shipped_calibration

    m = M.load()
    assert m.provenance["command"].startswith("aihpc recommend calibrate")
    assert (
        len(m.provenance["families"]) == 5
        and m.provenance["rows"] == len(m.provenance["tasks"]) * 20
    )
    refit = fit_observations(shipped_calibration(), {})
    # the same fit to rounding: numpy and BLAS builds differ in the last bits (4e-15 here)
    for field in fields(m):
        if field.name != "provenance":
            assert getattr(refit, field.name) == pytest.approx(
                getattr(m, field.name), rel=1e-9, abs=1e-12
            )


def test_features_take_logs_of_sizes_and_proxies():
    f = dict(zip(M.FEATURES, M.features(CX, _score("a", 1000, 1e6, synflow=100.0)), strict=True))
    assert f["log_params"] == pytest.approx(3.0) and f["log_ops"] == pytest.approx(6.0)
    assert f["log_ops_per_value"] == pytest.approx(6.0 - np.log10(64))
    assert f["log_synflow"] == pytest.approx(2.0) and f["naswot"] == pytest.approx(100 / 64)
    assert f["log_classes"] == pytest.approx(1.0) and f["log_params*probe_error"] == pytest.approx(
        0.3
    )


def test_the_domain_names_what_lies_outside_in_one_line():
    m = _matcher()
    rows = np.zeros((2, len(M.FEATURES)))
    assert check(m, rows, ["a", "b"]) == []
    assert describe([]).startswith("inside the calibrated domain")
    rows[:, M.FEATURES.index("log_dimension")] = 1.15  # within the 10 % tolerance
    assert check(m, rows, ["a", "b"]) == []
    rows[:, M.FEATURES.index("log_dimension")] = np.log10(12288)  # a task feature: once
    rows[1, M.FEATURES.index("log_params")] = 5.0  # a candidate feature: named
    out = check(m, rows, ["a", "b"])
    assert [(o.feature, o.candidate) for o in out] == [("log_dimension", None), ("log_params", "b")]
    line = describe(out)
    assert (
        "\n" not in line
        and "input values C*H*W 12288 not in 0..10" in line
        and "parameters (b) 1e+05" in line
    )


def test_choose_trades_down_only_within_the_margin_at_any_level_and_the_budget():
    from aihpc.recommend.matcher import Prediction

    scores = [_score("big", 1, 100.0), _score("mid", 1, 10.0), _score("tiny", 1, 1.0)]

    def pred(eta):
        eta = np.asarray(eta, float)
        acc = 0.1 + 0.9 * M._sigmoid(eta)
        return Prediction(acc, acc, acc, eta, 0.1)

    band = 4 * 0.02 / 0.9  # an eta gap this small is at most 0.02 accuracy at any level
    assert choose(scores, pred([0.0, -0.9 * band, -3.0]), margin=0.02) == 1
    assert choose(scores, pred([0.0, -1.1 * band, -3.0]), margin=0.02) == 0
    assert choose(scores, pred([0.0, -0.9 * band, -3.0]), margin=0.0) == 0
    # all three saturated near chance: not ties, the best predicted is taken
    assert choose(scores, pred([-6.0, -7.0, -8.0]), margin=0.02) == 0
    assert choose(scores, pred([0.0, -0.9 * band, -3.0]), margin=0.02, budget_ops=5) == 2
    with pytest.raises(ConfigError, match="cheapest needs 1 training"):
        choose(scores, pred([0.0, 0.0, 0.0]), budget_ops=0.5)


def test_the_vote_is_the_mean_proxy_rank_and_the_fallback_takes_the_largest_synflow():
    from scipy.stats import rankdata  # 0.5 s to import: in the tests, not at collection

    scores = [
        _score("a", 1, 3.0, synflow=1.0, snip=3.0, naswot=float("nan")),
        _score("b", 1, 2.0, synflow=2.0, snip=3.0, naswot=5.0),
        _score("c", 1, 4.0, synflow=3.0, snip=1.0, naswot=4.0),
    ]
    votes = vote(scores)
    ranks = []
    for p in ("snip", "grad_norm", "synflow", "jacob_cov", "naswot"):
        v = np.nan_to_num(np.array([s.proxies[p] for s in scores]), nan=-np.inf)
        ranks.append(rankdata(-v))  # 1 = largest, ties averaged
    np.testing.assert_allclose(votes, np.mean(ranks, axis=0))
    assert choose_by_fallback(scores) == 2 and choose_by_fallback(scores, budget_ops=2.5) == 1


def test_decide_predicts_inside_the_domain_and_falls_back_to_synflow_outside():
    from aihpc.recommend.study import shipped_calibration

    o = shipped_calibration()[0]  # a calibration task: inside by construction
    inside = decide(o.complexity, list(o.scores), M.load())
    assert inside.method == "matcher" and inside.prediction is not None and not inside.outside
    np.testing.assert_array_equal(inside.values, inside.prediction.eta)
    far = msgspec.structs.replace(o.complexity, dimension=3 * 128 * 128)
    outside = decide(far, list(o.scores), M.load())
    assert outside.method == "synflow" and outside.prediction is None
    assert any(x.feature == "log_dimension" for x in outside.outside)
    assert outside.pick == int(np.argmax([s.proxies["synflow"] for s in o.scores]))


def test_kendall_tau_matches_scipy_with_ties_and_in_batches():
    from scipy.stats import kendalltau

    from aihpc.recommend.stats import kendall_tau

    rng = np.random.default_rng(3)
    a = rng.integers(0, 4, (50, 7)).astype(float)
    b = rng.integers(0, 4, (50, 7)).astype(float)
    tau = kendall_tau(a, b)
    for k in range(50):
        if np.ptp(a[k]) and np.ptp(b[k]):
            assert tau[k] == pytest.approx(kendalltau(a[k], b[k]).statistic, abs=1e-12)
    assert kendall_tau(np.ones(4), np.arange(4.0)) == 0.0
    assert kendall_tau(np.array([-np.inf, -np.inf, 1.0]), np.arange(3.0)) == pytest.approx(
        kendalltau([0, 0, 1], [0, 1, 2]).statistic
    )


def test_judge_scores_every_predictor_per_task_and_summarises():
    from dataclasses import replace

    from scipy.stats import rankdata

    from aihpc.recommend.study import shipped_calibration
    from aihpc.recommend.validate import RECOMMENDER, judge, summary

    o = shipped_calibration()[0]
    params = np.array([s.params for s in o.scores], float)
    truth = 0.5 + 0.4 * rankdata(params) / len(params)  # bigger is better, exactly
    held = replace(o, accuracy=np.stack([truth, truth], axis=1))
    v = judge([held], {o.family: M.load()}, margin=0.0)
    by = {s.predictor: s for s in v.scores}
    assert set(by) >= {
        RECOMMENDER,
        "most parameters",
        "most operations",
        "synflow alone",
        "proxies' vote",
    }
    assert by["most parameters"].tau == pytest.approx(1.0) and by["most parameters"].regret == 0.0
    d = decide(o.complexity, list(o.scores), M.load(), 0.0)
    assert by[RECOMMENDER].regret == pytest.approx(truth.max() - truth[d.pick])
    assert (
        v.seed_tau[o.candidate_set] == pytest.approx(1.0)
        and 0.0 <= v.coverage[o.candidate_set] <= 1.0
    )
    row = next(r for r in summary(v) if r[1] == "most parameters")
    assert row == (o.candidate_set, "most parameters", pytest.approx(1.0), 0.0, 0.0, 1)
