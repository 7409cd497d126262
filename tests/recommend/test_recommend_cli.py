"""``aihpc recommend`` through its command line: bad input is one line and exit 2; the forms run."""

import json

import msgspec
import numpy as np
import pytest

from aihpc.cli import main
from aihpc.tasks.image.seeds import seed_spec
from fixture_run import ENVIRONMENT
from kind_files import real_data, real_file


def _npz(path, n, classes):
    rng = np.random.default_rng(0)
    np.savez(path, x=rng.random((n, 8, 8)).astype(np.float32), y=np.arange(n) % classes)
    return str(path)


def _bad(capsys, argv, words):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    assert words in err, err


def test_bad_arguments_are_one_line_and_exit_2(tmp_path, capsys):
    out = ["--out", str(tmp_path / "r.json")]
    _bad(capsys, ["recommend", *out], "give --dataset")
    _bad(
        capsys,
        ["recommend", "--dataset", "digits", "--budget-ops", "0", *out],
        "--budget-ops must be > 0",
    )
    _bad(capsys, ["recommend", "validate", "--seeds", "1", *out], "--seeds must be >= 2")
    _bad(
        capsys,
        ["recommend", "--dataset", "digits", "--matcher", str(tmp_path / "none.json"), *out],
        "matcher file not found",
    )
    _bad(
        capsys,
        ["recommend", "--dataset", "digits", "--data-option", "image_size", *out],
        "--data-option must be KEY=VALUE, got 'image_size'",
    )
    _bad(
        capsys, ["recommend", "--dataset", "synthetic", "--data-option", "colour=2", *out], "colour"
    )
    _bad(
        capsys, ["recommend", "calibrate", "--workers", "0", *out], "--workers must be >= 1, got 0"
    )
    _bad(
        capsys,
        ["recommend", "validate", "--calibration", str(tmp_path / "none.json"), *out],
        "not found",
    )
    no_steps = tmp_path / "v.json"  # held-out observations whose validation block is missing
    document = json.loads(real_file("recommend-validation").read_text())
    del document["data"]["validation"]
    no_steps.write_text(json.dumps(document))
    _bad(
        capsys,
        ["recommend", "validate", "--observations", str(no_steps), *out],
        f"result file {no_steps}: data: object missing required field validation",
    )
    zero_steps = tmp_path / "v0.json"
    document = json.loads(real_file("recommend-validation").read_text())
    document["data"]["validation"]["steps"] = 0
    zero_steps.write_text(json.dumps(document))
    _bad(
        capsys,
        ["recommend", "validate", "--observations", str(zero_steps), *out],
        f"{zero_steps}: validation.steps: expected >= 1, got 0",
    )
    assert not (tmp_path / "r.json").exists()


@pytest.mark.slow
def test_bad_data_and_candidates_are_one_line_and_exit_2(tmp_path, capsys):
    one = _npz(tmp_path / "one.npz", 60, 1)
    tiny = _npz(tmp_path / "tiny.npz", 12, 2)
    (tmp_path / "broken.json").write_text('[{"zoo": "digits_cnn"},')
    seed_spec((3, 32, 32), 10).save(tmp_path / "big.json")
    (tmp_path / "shape.json").write_text('[{"spec": "big.json"}]')
    out = ["--out", str(tmp_path / "r.json")]
    _bad(
        capsys,
        ["recommend", "--dataset", "npz", "--data-path", one, *out],
        "need at least 2 classes, got 1",
    )
    _bad(
        capsys,
        ["recommend", "--dataset", "npz", "--data-path", tiny, *out],
        "recommending needs >= 20",
    )
    _bad(
        capsys,
        ["recommend", "--dataset", "digits", "--candidates", str(tmp_path / "broken.json"), *out],
        "candidates file",
    )
    _bad(
        capsys,
        ["recommend", "--dataset", "digits", "--candidates", str(tmp_path / "shape.json"), *out],
        "the data set gives 1x8x8 with 10 classes",
    )
    _bad(
        capsys,
        ["recommend", "--dataset", "digits", "--candidates", "huge", *out],
        "--candidates must be",
    )
    assert not (tmp_path / "r.json").exists()


@pytest.mark.slow
def test_recommend_ranks_a_candidates_file_and_writes_its_result(tmp_path, capsys):
    (tmp_path / "c.json").write_text('[{"zoo": "digits_cnn"}, {"children_of": "seed", "count": 2}]')
    out = tmp_path / "r.json"
    assert (
        main(
            [
                "recommend",
                "--dataset",
                "digits",
                "--candidates",
                str(tmp_path / "c.json"),
                "--out",
                str(out),
            ]
        )
        == 0
    )
    text = capsys.readouterr().out
    assert "recommendation (*):" in text and "N3" in text
    doc = json.loads(out.read_text())
    assert doc["kind"] == "recommend"
    data = doc["data"]
    assert {c["name"] for c in data["candidates"]} == {"digits_cnn", "child0", "child1"}
    assert sorted(c["rank"] for c in data["candidates"]) == [1, 2, 3]
    assert data["choice"] in {c["name"] for c in data["candidates"]}
    assert all(c["ops_per_sample"] > 0 and c["params"] > 0 for c in data["candidates"])


def _imagefolder(root, side=16, per_class=100):
    from PIL import Image

    rng = np.random.default_rng(0)
    for k, colour in enumerate(([255, 40, 40], [40, 40, 255], [40, 200, 40])):
        (root / f"class{k}").mkdir(parents=True)
        for i in range(per_class):
            img = rng.integers(0, 120, (side, side, 3)).astype(np.uint8)
            r, c = rng.integers(0, side - 6, 2)
            img[r : r + 6, c : c + 6] = colour
            Image.fromarray(img).save(root / f"class{k}" / f"{i}.png")
    return str(root)


@pytest.mark.slow
def test_an_imagefolder_in_the_domain_gets_predictions_with_intervals(tmp_path, capsys):
    out = tmp_path / "r.json"
    assert (
        main(
            [
                "recommend",
                "--dataset",
                "imagefolder",
                "--data-path",
                _imagefolder(tmp_path / "img"),
                "--data-option",
                "image_size=16",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    text = capsys.readouterr().out
    assert "domain: inside the calibrated domain" in text and "80% interval" in text
    data = json.loads(out.read_text())["data"]
    assert (
        data["method"] == "matcher" and data["in_domain"] and data["complexity"]["dimension"] == 768
    )
    for c in data["candidates"]:
        low, high = c["interval"]
        assert 1 / 3 <= low <= c["predicted_accuracy"] <= high <= 1


@pytest.mark.slow
def test_a_task_outside_the_domain_is_said_in_one_line_and_ranked_by_synflow(tmp_path, capsys):
    out = tmp_path / "r.json"
    assert (
        main(
            [
                "recommend",
                "--dataset",
                "synthetic",
                "--data-option",
                "image_size=40",  # 4800 input values: past the widened range (4520), quick to score
                "--data-option",
                "num_samples=300",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    lines = [line for line in capsys.readouterr().out.splitlines() if "domain:" in line]
    assert len(lines) == 1 and "outside the calibrated domain: " in lines[0]
    assert "input values C*H*W 4800 not in 64..3072" in lines[0]
    data = json.loads(out.read_text())["data"]
    assert data["method"] == "synflow" and not data["in_domain"]
    assert all(
        c["predicted_accuracy"] is None and c["interval"] is None for c in data["candidates"]
    )
    best = max(data["candidates"], key=lambda c: c["proxies"]["synflow"])
    assert data["choice"] == best["name"] and best["rank"] == 1


@pytest.mark.slow
def test_validate_fast_then_rejudged_from_its_file(tmp_path, capsys):
    out = tmp_path / "v.json"
    assert main(["recommend", "validate", "--fast", "--workers", "1", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "leave one family out" in text and "most parameters" in text and "80 % intervals" in text
    data = json.loads(out.read_text())["data"]
    assert {s["candidate_set"] for s in data["validation"]["scores"]} == {"small", "matched"}
    assert all(len(c["accuracy"]) == 2 for o in data["observations"] for c in o["candidates"])
    again = tmp_path / "v2.json"
    assert main(["recommend", "validate", "--observations", str(out), "--out", str(again)]) == 0
    assert json.loads(again.read_text())["data"]["validation"] == data["validation"]


def test_the_report_renders_the_recommend_result_kinds():
    from aihpc.records.files import result_document
    from aihpc.records.kinds_recommend import RankedRecord, TaskScoreRecord
    from aihpc.report.documents import render_page

    recommend = real_data("recommend")
    candidate = RankedRecord(
        name="c2",
        source="spec",
        detail="10 params",
        params=10,
        ops_per_sample=1e6,
        proxies={},
        predicted_accuracy=0.9,
        interval=(0.8, 0.95),
        rank=1,
        within_budget=True,
    )
    validation = real_data("recommend-validation")
    scores = tuple(
        TaskScoreRecord(
            candidate_set="small",
            task="t",
            family="f",
            shape="1x8x8",
            predictor="recommender",
            tau=tau,
            regret=regret,
        )
        for tau, regret in ((0.5, 0.01), (0.7, 0.03))
    )
    docs = [
        result_document(
            "recommend",
            msgspec.structs.replace(
                recommend, choice="c2", method="matcher", candidates=(candidate,)
            ),
            environment=ENVIRONMENT,
        ),
        result_document(
            "recommend-validation",
            msgspec.structs.replace(
                validation,
                validation=msgspec.structs.replace(
                    validation.validation, coverage={"small": 0.81}, scores=scores
                ),
            ),
            environment=ENVIRONMENT,
        ),
        result_document("recommend-calibration", real_data("recommend-calibration")),
    ]
    page = render_page(docs, "t")
    assert "Model recommendation" in page and "c2" in page and "80.0% .. 95.0%" in page
    assert "+0.60" in page and "3.0%" in page and "small 81 %" in page
    assert "Recommendation matcher calibration" in page and "aihpc recommend calibrate" in page


def test_calibrate_refits_the_shipped_matcher_from_its_observations(tmp_path, capsys):
    from dataclasses import fields
    from importlib import resources

    from aihpc.recommend import matcher as matching

    shipped = resources.files("aihpc.recommend").joinpath("data", "calibration.json")
    matcher_out, out = tmp_path / "matcher.json", tmp_path / "calibration.json"
    argv = [
        "recommend",
        "calibrate",
        "--observations",
        str(shipped),
        "--matcher-out",
        str(matcher_out),
        "--out",
        str(out),
    ]
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert text.startswith("matcher: ") and f"matcher file: {matcher_out}" in text
    refit, original = matching.load(matcher_out), matching.load()
    for field in fields(
        original
    ):  # the same fit, to rounding (numpy and BLAS builds differ in the last bits)
        if field.name != "provenance":
            assert getattr(refit, field.name) == pytest.approx(
                getattr(original, field.name), rel=1e-9, abs=1e-12
            )
    assert f"--observations {shipped}" in refit.provenance["refit"]
    assert refit.provenance["command"] == original.provenance["command"]
    assert json.loads(out.read_text())["kind"] == "recommend-calibration"


def test_each_form_has_its_own_defaults_and_an_option_before_the_form_is_kept():
    from aihpc.cli import build_parser
    from aihpc.cli import recommend as cli
    from aihpc.recommend.ranking import MARGIN
    from aihpc.recommend.tasks import STEPS

    assert (cli.STEPS, cli.MARGIN) == (STEPS, MARGIN)
    parse = build_parser().parse_args
    plain, cal, val = (
        parse(["recommend"]),
        parse(["recommend", "calibrate"]),
        parse(["recommend", "validate"]),
    )
    assert (plain.seed, str(plain.out), plain.margin, plain.json) == (
        0,
        "recommend.json",
        MARGIN,
        False,
    )
    assert (cal.seed, cal.steps, str(cal.out)) == (0, STEPS, "recommend-calibration.json")
    assert (val.seed, val.steps, str(val.out)) == (100, None, "recommend-validation.json")
    before = parse(["recommend", "--seed", "0", "--json", "--out", "x.json", "validate"])
    assert (before.seed, before.json, str(before.out)) == (0, True, "x.json")
    both = parse(["recommend", "--seed", "3", "validate", "--seed", "100"])
    assert both.seed == 100
    assert cli._calibrate_command(cal) == (
        "aihpc recommend calibrate --seeds 1 --workers "
        f"{cal.workers} --matcher-out recommend-matcher.json --out recommend-calibration.json"
    )
    given = parse(["recommend", "calibrate", "--seed", "0"])
    assert "--seed 0" in cli._calibrate_command(given)
