"""An inference result like a training run's: ``aihpc verify`` re-checks it, ``aihpc rank`` lists
it apart from training runs, ``aihpc report`` draws its latencies.

One small result (a zoo model on 64 samples, half-second LoadGen tests) is made once for the
module by ``python -m aihpc infer``; each test reads it or tampers with a copy, and runs the
readers (verify, rank, compare) through the CLI's entry point in this process, as
``python -m aihpc`` calls it.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from aihpc.ranking.compare import load_entry
from aihpc.ranking.rank import build_ranking
from aihpc.report import write_report
from fixture_run import FIXTURES, aihpc, aihpc_main

# one process runs the module under pytest-xdist: its fixture (the inference result) is made once
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("infer-records")]


@pytest.fixture(scope="module")
def result(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``aihpc infer`` of the zoo's digits_cnn: offline, single-stream and two server tests."""
    out = tmp_path_factory.mktemp("infer") / "digits"
    proc = aihpc(
        "infer",
        "--model",
        "digits_cnn",
        "--samples",
        "64",
        "--seconds",
        "0.5",
        "--server-steps",
        "2",
        "--latency-ms",
        "1000",  # the records, not the latency: a loaded machine stalls a process 200 ms at times
        "--peak-seconds",
        "0.2",
        "--out",
        str(out),
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return out


@pytest.fixture
def copy(result: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(result, tmp_path / "digits"))


def _edit_record(folder: Path, change) -> None:
    path = folder / "infer.json"
    doc = json.loads(path.read_text())
    change(doc["data"])
    path.write_text(json.dumps(doc, indent=2, sort_keys=True))


def _edit_log(folder: Path) -> None:
    """The offline test's samples per second doubled in LoadGen's detail log."""
    log = next((folder / "loadgen").glob("*-offline")) / "mlperf_log_detail.txt"
    lines = []
    for line in log.read_text().splitlines(keepends=True):
        if '"key": "result_samples_per_second"' in line:
            entry = json.loads(line[len(":::MLLOG ") :])
            entry["value"] *= 2
            line = ":::MLLOG " + json.dumps(entry) + "\n"
        lines.append(line)
    log.write_text("".join(lines))


def test_an_untouched_result_verifies(result: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, stdout, stderr = aihpc_main(capsys, "verify", str(result))
    assert code == 0, stdout + stderr
    assert stdout.startswith(f"aihpc verify {result}: VERIFIED\n")
    for check in ("loadgen", "figures", "operations", "quality"):
        assert f"  {check} " in stdout and "unchecked" not in stdout
    assert "the same samples" in stdout  # 64 samples: the record's own, re-measured


def _double(key: str):
    def change(data: dict) -> None:
        scenario, _, field = key.partition(".")
        target = data["scenarios"][scenario] if field else data
        target[field or key] *= 2

    return change


def _unwarmed_batch(data: dict) -> None:
    """One of the offline test's batches said to be of 3 samples, a size never warmed up."""
    test = data["scenarios"]["offline"]["tests"][0]
    test["batch_sizes"]["3"] = 1
    test["padded_samples"] -= 3


def _looser_rule(data: dict) -> None:
    data["kept_up_shortfall"] = 0.5


@pytest.mark.parametrize(
    "tamper, named",
    [
        (
            lambda d: _edit_record(d, _double("offline.samples_per_second")),
            "figures: scenarios.offline.samples_per_second is",
        ),
        (_edit_log, "loadgen: offline test 1: recorded results.samples_per_second is"),
        (lambda d: _edit_record(d, _double("ops_per_query")), "operations: ops_per_query is"),
        (
            lambda d: _edit_record(d, _unwarmed_batch),
            "figures: offline test 1: batches of ['3'], not sizes warmed up",
        ),
        (
            lambda d: _edit_record(d, _looser_rule),
            "figures: kept_up_shortfall is 0.5; aihpc's rule is 0.02",
        ),
    ],
    ids=["figure", "loadgen-log", "ops-per-query", "unwarmed-batch", "looser-rule"],
)
def test_a_tampered_result_does_not_verify(
    copy: Path, tamper, named: str, capsys: pytest.CaptureFixture[str]
) -> None:
    tamper(copy)
    code, stdout, stderr = aihpc_main(capsys, "verify", str(copy))
    assert code == 4, stdout + stderr
    assert "NOT VERIFIED" in stdout and f"  {named}" in stdout
    assert "does not verify" in stderr


def test_rank_lists_inference_results_apart_from_training_runs(
    copy: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    listing = copy.parent
    entry = load_entry(copy)
    assert entry.kind == "infer"
    assert entry.workload == "aihpc_infer digits_cnn 1x8x8, server p99 <= 1 s"
    data = json.loads((copy / "infer.json").read_text())["data"]
    assert entry.score == data["scenarios"]["server"]["max_qps"]
    shutil.copytree(FIXTURES / "run", listing / "run")  # a training run beside it
    rows, _ = build_ranking(listing, verify=False, kind="infer")
    assert [r.entry.source for r in rows] == [str(copy / "infer.json")]
    assert rows[0].valid_flops is None  # Valid FLOPS discounts operations, not queries
    code, stdout, stderr = aihpc_main(capsys, "rank", str(listing), "--kind", "infer")
    assert code == 0, stderr
    row = next(line for line in stdout.splitlines() if line.startswith("| 1 |"))
    assert row.startswith("| 1 | digits |") and " samples/s | n/a |" in row and "| yes |" in row
    # the training runs' list leaves it out
    code, stdout, stderr = aihpc_main(capsys, "rank", str(listing), "--no-verify")
    assert code == 0, stderr
    assert [line.split(" | ")[1] for line in stdout.splitlines() if line.startswith("| 1 |")] == [
        "run"
    ]
    code, _, stderr = aihpc_main(capsys, "compare", str(copy), str(listing / "run"))
    assert code == 2
    assert "cannot compare results of different kinds of result: infer (#1); run (#2)" in stderr


def test_rank_lists_full_tests_apart_from_short_ones(
    result: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The same result twice, one of them recorded as a 600-s test with a tenth of the rate:
    the full test is listed first, in a list of its own, each ranked from 1."""
    listing = tmp_path / "results"
    short = Path(shutil.copytree(result, listing / "short"))
    full = Path(shutil.copytree(result, listing / "full"))

    def as_full_test(data: dict) -> None:
        data["seconds_per_test"], data["short_test"] = 600.0, False
        data["scenarios"]["server"]["max_qps"] /= 10

    _edit_record(full, as_full_test)
    assert load_entry(short).short_test is True and load_entry(full).short_test is False
    rows, _ = build_ranking(listing, verify=False, kind="infer")
    assert [(r.rank, Path(r.entry.source).parent.name) for r in rows] == [(1, "full"), (1, "short")]
    code, stdout, stderr = aihpc_main(
        capsys, "rank", str(listing), "--kind", "infer", "--no-verify"
    )
    assert code == 0, stderr
    lines = stdout.splitlines()
    full_at = lines.index("## Full tests (MLPerf's 600 s a test or more)")
    short_at = lines.index(
        "## Short tests (under MLPerf's 600 s a test: not a submission's verdict)"
    )
    ranked = [i for i, line in enumerate(lines) if line.startswith("| 1 |")]
    assert full_at < ranked[0] < short_at < ranked[1]
    assert "| 1 | full |" in lines[ranked[0]] and "| 1 | short |" in lines[ranked[1]]
    assert "0.5 s per test (short test)" in lines[ranked[1]]


def test_report_draws_the_latency_distribution_and_the_throughput_latency_curve(
    result: Path, tmp_path: Path
) -> None:
    page = write_report(result, tmp_path / "report.html").read_text()
    assert "<h2>Inference under MLPerf LoadGen</h2>" in page
    assert "<h3>The server's tests</h3>" in page
    assert page.count("<img ") == 2 and "http" not in page
    assert 'alt="Latency distribution' in page and 'alt="Throughput against latency' in page
