"""results.json read back: the typed record of a run's result, from this version's files and
version 1's."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from aihpc.base.errors import DataError
from aihpc.results.read import RunResults, read_results, read_results_document
from aihpc.scoring.score import Score
from fixture_run import FIXTURES

V1 = Path(__file__).parents[1] / "report" / "fixtures" / "results_v1.json"


def test_a_run_reads_back_as_its_record() -> None:
    doc = json.loads((FIXTURES / "run" / "results.json").read_text())
    results = read_results(FIXTURES / "run" / "results.json")
    assert results.score == Score.from_dict(doc["score"])
    assert results.score.ops_per_second == doc["score"]["ops"] / doc["score"]["wall_seconds"]
    assert results.tallies.trials_completed == doc["score"]["trials_completed"]
    assert results.tallies.screening_ops == 0  # the fixture run predates proxy screening
    assert [w.name for w in results.workers] == [w["name"] for w in doc["workers"]]
    assert sum(w.epochs or 0 for w in results.workers) == sum(
        len(t["epochs"]) for t in doc["trials"]
    )
    assert results.peak is None  # the fixture run predates procs_per_worker: its peak's older form
    assert results.environment.hostname == doc["environment"]["hostname"]
    assert results.layout == doc["layout"] and results.trial_count == len(doc["trials"])


def test_a_peak_in_the_current_form_is_read_as_the_runs_peak(tmp_path: Path) -> None:
    from aihpc.scoring.peak import PeakResult, RunPeak, WorkerPeak

    doc = json.loads((FIXTURES / "run" / "results.json").read_text())
    part = PeakResult.from_dict(doc["peak"]["per_worker"][0])
    peak = RunPeak.of([WorkerPeak.of("worker-0", [part, part])], procs_per_worker=2)
    path = tmp_path / "results.json"
    path.write_text(json.dumps(doc | {"peak": peak.to_dict()}))
    results = read_results(path)
    assert results.peak == peak and results.peak.total_flops_per_s == 2 * part.flops_per_s


def test_version_1_is_upgraded_and_keeps_what_it_recorded() -> None:
    doc = read_results_document(V1)
    assert doc["schema_version"] == 3 and all("params" not in t for t in doc["trials"])
    results = RunResults.from_dict(doc)
    assert results.peak is None  # version 1 kept one peak per dtype, not the run's workers'
    assert results.score.peak_flops_per_s == 110e9  # ...which the score still names
    assert [(w.name, w.epochs) for w in results.workers] == [("worker-0", None), ("worker-1", None)]
    assert results.tallies.screening_ops == 0 and results.config["workers"] == 2


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"score": {"ops": 1}}, "score lacks wall_seconds"),
        ({"score": None}, "has no score"),
        (
            {"workers": [{"name": "w"}]},
            "a worker of results.json lacks busy_seconds, busy_fraction",
        ),
    ],
)
def test_a_broken_record_is_one_line_naming_the_file(
    tmp_path: Path, change: dict, words: str
) -> None:
    doc = json.loads((FIXTURES / "run" / "results.json").read_text()) | change
    path = tmp_path / "results.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(DataError) as err:
        read_results(path)
    assert str(err.value).startswith(f"{path}: ") and words in str(err.value)
    assert "\n" not in str(err.value)


def test_a_version_this_aihpc_does_not_read_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "results.json"
    path.write_text(json.dumps({"schema_version": 4}))
    with pytest.raises(DataError, match="results.json has no schema_version"):
        RunResults.from_dict({"score": {}})
    with pytest.raises(
        DataError, match=r"unsupported results schema_version 4 .*\(supported: 1, 2, 3\)"
    ):
        read_results(path)


def test_the_head_of_results_json_is_read_without_its_trials(tmp_path: Path) -> None:
    from aihpc.results.read import read_results_head
    from aihpc.results.write import write_results

    doc = json.loads((FIXTURES / "run" / "results.json").read_text())
    doc["schema_version"] = 3
    path, count = write_results(tmp_path, doc)
    assert count == len(doc["trials"])
    assert (
        path == tmp_path / "results.json" and json.loads(path.read_text()) == doc
    )  # one JSON document
    assert read_results_head(path) == {**doc, "trials": []}
    # the trials are skipped unparsed: a broken trial line does not matter to the head
    lines = path.read_text().splitlines()
    first_trial = lines.index('"trials":[') + 1
    lines[first_trial] = "not JSON,"
    path.write_text("\n".join(lines) + "\n")
    assert read_results_head(path)["score"] == doc["score"]
    # an older, indented file is parsed whole; its version as written
    older = tmp_path / "older.json"
    older.write_text((FIXTURES / "run" / "results.json").read_text())
    assert (
        read_results_head(older)["schema_version"]
        == json.loads(older.read_text())["schema_version"]
    )
    with pytest.raises(DataError, match="results file not found"):
        read_results_head(tmp_path / "absent.json")
    lines[1] = '"aihpc_version":{broken,'
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(DataError, match="results file line 2 is not JSON"):
        read_results_head(path)


def test_a_large_run_writes_its_results_compressed_and_every_reader_takes_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import gzip
    import shutil

    from aihpc.cli import main
    from aihpc.results.read import read_results_head, results_file
    from aihpc.results.write import write_results

    run = tmp_path / "run"
    shutil.copytree(FIXTURES / "run", run)
    doc = read_results_document(run / "results.json")
    assert write_results(run, doc, compress_above=10**9) == (
        run / "results.json",
        len(doc["trials"]),
    )
    plain = (run / "results.json").read_bytes()
    written, _ = write_results(run, doc, compress_above=len(plain) - 1)
    assert (
        written == run / "results.json.gz" == results_file(run)
        and not (run / "results.json").exists()
    )
    assert (
        gzip.decompress(written.read_bytes()) == plain and written.stat().st_size < len(plain) / 4
    )
    assert read_results_document(written) == doc and read_results_head(written) == {
        **doc,
        "trials": [],
    }
    # every reader, through the CLI's entry point as `python -m aihpc` calls it
    outputs = {}
    for command in (
        ["verify", str(run)],
        ["report", str(run)],
        ["rank", str(tmp_path)],
        ["compare", str(run), str(run)],
    ):
        code = main(command)
        outputs[command[0]] = capsys.readouterr()
        assert code == 0, (command, outputs[command[0]].err)
    assert "VERIFIED" in outputs["verify"].out
    # a smaller run written again in the same directory is plain once more
    assert write_results(run, doc)[0] == run / "results.json" and not written.exists()
