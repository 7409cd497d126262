"""A score that says when it would not repeat (issue 44): where the machine's peak moved past
:data:`aihpc.scoring.peak.PEAK_DRIFT` between before the run and after it, results.json's score,
the run's summary and the report's headline cards mark the score and its share of peak as not
repeatable, and ``aihpc verify`` checks the mark against the run store's peak."""

from __future__ import annotations

import json
import re
from pathlib import Path

import jsonschema
import pytest

from aihpc.records.codec import UNSET
from aihpc.report.digest import ReportRun
from aihpc.report.html import render_html
from aihpc.results.read import decode_results, read_results
from aihpc.results.schema import schema_of
from aihpc.results.write import not_repeatable
from aihpc.runner.display.summary import summary_lines
from aihpc.runner.measure import peak_drift
from aihpc.scoring.peak import PEAK_DRIFT, PeakResult, RunPeak, WorkerPeak
from aihpc.verify.recount import verify_run
from fixture_run import FIXTURES, results_head, write_results_document


def _worker(name: str, rate: float) -> WorkerPeak:
    part = PeakResult(
        device="cpu",
        dtype="float32",
        kernel="matmul 1024x1024",
        flops_per_s=rate,
        min_flops_per_s=rate,
        max_flops_per_s=rate,
        spread=0.0,
        repeats=(rate,),
        calls_per_repeat=1,
        flops_per_call=2 * 1024**3,
        threads=1,
        note=None,
        warning=None,
    )
    return WorkerPeak.of(name, [part])


def _moved(before: dict[str, float], after: dict[str, float]) -> dict:
    """A run's peak as the store keeps it once measured again after the run (runner.measure)."""
    first = RunPeak.of([_worker(n, r) for n, r in before.items()], 1).to_dict()
    then = RunPeak.of([_worker(n, r) for n, r in after.items()], 1).to_dict()
    return {**first, **peak_drift(first, then)}


@pytest.mark.parametrize(
    ("after", "mark"),
    [
        ({"a": 1.15e9, "b": 2.3e9}, "+15.0 %"),  # a machine that sped up (load gone)
        ({"a": 0.8e9, "b": 1.6e9}, "-20.0 %"),  # one that slowed (throttling)
        ({"a": 1.05e9, "b": 2.1e9}, None),  # within the threshold
        ({"a": 1.099e9, "b": 2.198e9}, None),  # just within it
        ({"c": 3e9}, None),  # no worker measured both times: the drift is not known
    ],
)
def test_the_score_is_not_repeatable_where_the_peak_moved_past_the_threshold(
    after: dict[str, float], mark: str | None
) -> None:
    peak = _moved({"a": 1e9, "b": 2e9}, after)
    reason = not_repeatable(peak)
    if mark is None:
        assert reason is None
    else:
        assert reason == (
            f"the machine's peak moved by {mark} between before the run and after it (more "
            f"than {100 * PEAK_DRIFT:.0f} %)"
        )


def test_a_peak_not_measured_or_in_an_older_form_leaves_the_score_unmarked() -> None:
    older = json.loads((FIXTURES / "run" / "results.json").read_text())["peak"]
    assert "procs_per_worker" not in older  # the fixture run predates it
    assert not_repeatable(None) is None and not_repeatable(older) is None


def _marked_results() -> dict:
    """The fixture run's results.json with a peak that moved by -20 % during the run, and its
    score marked as results.json's writer marks it."""
    doc = json.loads((FIXTURES / "run" / "results.json").read_text())
    doc["peak"] = _moved({"a": 1e9, "b": 2e9}, {"a": 0.8e9, "b": 1.6e9})
    doc["score"]["not_repeatable"] = not_repeatable(doc["peak"])
    return doc


def test_the_mark_is_a_field_of_the_score_record_and_of_its_schema(tmp_path: Path) -> None:
    doc = _marked_results()
    path = write_results_document(tmp_path, doc)
    assert read_results(path).score.not_repeatable == doc["score"]["not_repeatable"]
    assert read_results(FIXTURES / "run" / "results.json").score.not_repeatable is UNSET
    schema = schema_of("results-image")
    jsonschema.validate(doc, schema)
    doc["score"]["not_repeatable"] = 20.0  # not a reason
    with pytest.raises(jsonschema.ValidationError, match="not_repeatable|20.0"):
        jsonschema.validate(doc, schema)


def test_the_summary_marks_the_score_and_its_share_of_peak() -> None:
    doc = _marked_results()
    doc["score"]["peak_fraction"], doc["score"]["peak_flops_per_s"] = 0.69, 3e9
    lines = summary_lines(results_head(doc), len(doc["trials"]), Path("run"))
    marked = [line.split()[0] for line in lines if "(not repeatable:" in line]
    assert marked == ["score", "regulated", "share"], lines
    assert any("changed by -20.0 % during the run" in line for line in lines)
    doc["score"]["not_repeatable"] = None
    lines = summary_lines(results_head(doc), len(doc["trials"]), Path("run"))
    assert not any("not repeatable" in line for line in lines)


def _report_run(doc: dict) -> ReportRun:
    results = decode_results(json.dumps(doc).encode(), "a test's results")
    return ReportRun.of(results.head(), results.trials)


def test_the_report_marks_its_headline_cards() -> None:
    doc = _marked_results()
    page = render_html(_report_run(doc), {})
    cards = re.findall(r'<div class="card ([^"]*)"><div class="label">([^<]*)</div>', page)
    marked = sorted(label for css, label in cards if "unrepeatable" in css)
    assert marked == ["Regulated score", "Score", "Share of peak"], cards
    assert page.count('<div class="mark">not repeatable</div>') == 3
    assert page.count("moved by -20.0 % between before the run and after it") == 3
    doc["score"]["not_repeatable"] = None
    assert "not repeatable" not in render_html(_report_run(doc), {})


def test_verify_checks_the_mark_against_the_store_s_peak(run_copy: Path) -> None:
    path = run_copy / "results.json"
    doc = json.loads(path.read_text())
    doc["score"]["not_repeatable"] = "the machine's peak moved by +30.0 % (written by hand)"
    path.write_text(json.dumps(doc, sort_keys=True))
    verification = verify_run(run_copy)
    found = [m.what for m in verification.mismatches if "not_repeatable" in m.what]
    assert found == [
        "results.json's score.not_repeatable is \"the machine's peak moved by +30.0 % (written "
        "by hand)\"; the run store's peak gives None"
    ], found
