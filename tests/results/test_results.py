"""results.json read back: the typed record of a run's result, from this version's files and
the older versions'."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from aihpc.base.errors import DataError
from aihpc.records.codec import UNSET
from aihpc.records.run_data import ImageDataRecord, LanguageDataRecord
from aihpc.results.read import read_results, read_run_head
from aihpc.tasks import recorded_task
from fixture_run import FIXTURES

V1 = Path(__file__).parents[1] / "report" / "fixtures" / "results_v1.json"
LM = Path(__file__).parents[1] / "report" / "fixtures" / "results_lm.json"
RUN = FIXTURES / "run" / "results.json"


def test_a_run_reads_back_as_its_record() -> None:
    doc = json.loads(RUN.read_text())
    results = read_results(RUN)
    score = results.score.score()
    assert score.ops == doc["score"]["ops"] and score.valid == doc["score"]["valid"]
    assert score.ops_per_second == doc["score"]["ops"] / doc["score"]["wall_seconds"]
    assert results.score.trials_completed == doc["score"]["trials_completed"]
    assert results.score.screening_ops is None  # the fixture run predates proxy screening
    assert [w.name for w in results.workers] == [w["name"] for w in doc["workers"]]
    assert sum(w.epochs or 0 for w in results.workers) == sum(
        len(t["epochs"]) for t in doc["trials"]
    )
    # the fixture run predates procs_per_worker: its peak's older form, which no RunPeak reads
    assert results.peak is not None and results.peak.run_peak() is None
    assert results.environment.hostname == doc["environment"]["hostname"]
    assert isinstance(results.data, ImageDataRecord) and results.task == "image"
    quality = recorded_task(results.config).report_quality
    assert quality.trial_key == "best_val_accuracy"  # the run's task's: its trials' field
    assert len(results.trials) == len(doc["trials"])
    assert [t.best(quality.trial_key) for t in results.trials] == [
        t["best_val_accuracy"] for t in doc["trials"]
    ]


@pytest.mark.parametrize("path", [RUN, LM, FIXTURES / "h200-lm" / "results.json"])
def test_a_file_of_a_version_with_nothing_to_upgrade_reads_back_whole(path: Path) -> None:
    """The record keeps every field of the file, value for value: what it writes back is the
    document read."""
    assert read_results(path).to_dict() == json.loads(path.read_text())


def test_a_language_model_run_reads_as_its_tasks_record() -> None:
    results = read_results(LM)
    assert isinstance(results.data, LanguageDataRecord) and results.task == "lm"
    quality = recorded_task(results.config).report_quality
    assert (quality.trial_key, quality.best_key) == ("best_val_loss", "best_val_loss")
    best = min(v for t in results.trials if (v := t.best(quality.trial_key)) is not None)
    assert results.score.best(quality.best_key) == best


def test_a_peak_in_the_current_form_is_read_as_the_runs_peak(tmp_path: Path) -> None:
    from aihpc.scoring.peak import PeakResult, RunPeak, WorkerPeak

    doc = json.loads(RUN.read_text())
    part = PeakResult.from_dict(doc["peak"]["per_worker"][0])
    peak = RunPeak.of([WorkerPeak.of("worker-0", [part, part])], procs_per_worker=2)
    path = tmp_path / "results.json"
    path.write_text(json.dumps(doc | {"peak": peak.to_dict()}))
    record = read_results(path).peak
    assert record is not None and record.run_peak() == peak
    assert record.total_flops_per_s == 2 * part.flops_per_s


def test_version_1_is_upgraded_and_keeps_what_it_recorded() -> None:
    doc = json.loads(V1.read_text())
    results = read_results(V1)
    assert results.schema_version == 1  # as written; its content in the current form
    assert [t.num_params for t in results.trials] == [t["params"] for t in doc["trials"]]
    # version 1 kept one peak per dtype, not the run's workers'...
    assert results.peak is None and results.peak_by_dtype is not None
    assert results.score.peak_flops_per_s == 110e9  # ...which the score still names
    assert [(w.name, w.epochs) for w in results.workers] == [("worker-0", None), ("worker-1", None)]
    assert results.score.screening_ops is None and results.config["workers"] == 2
    assert results.environment.environment().cpu_logical_cores == doc["environment"]["cpu_count"]
    assert results.data is UNSET


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"score": {"ops": 1}}, "score: object missing required field wall_seconds"),
        ({"score": None}, "score: expected object, got null"),
        ({"workers": [{"name": "w"}]}, "workers[0]: object missing required field busy_seconds"),
        ({"run_id": 3}, "run_id: expected str | null, got int"),
    ],
)
def test_a_document_that_does_not_match_is_one_line_naming_the_file_and_field(
    tmp_path: Path, change: dict, words: str
) -> None:
    doc = json.loads(RUN.read_text()) | change
    path = tmp_path / "results.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(DataError) as err:
        read_results(path)
    assert str(err.value) == f"results file {path}: {words}"


def test_a_run_of_a_task_this_aihpc_does_not_have_is_refused_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "results.json"
    path.write_text(json.dumps(json.loads(RUN.read_text()) | {"config": {"task": "chess"}}))
    with pytest.raises(DataError) as err:
        read_results(path)
    # the registered tasks named (a test may have registered one more than aihpc's own)
    found = re.fullmatch(
        rf"results file {re.escape(str(path))}: config\.task: task must be one of (.*), "
        r"got 'chess'",
        str(err.value),
    )
    assert found and {"image", "lm"} <= set(found[1].split(", ")), err.value


def test_a_trial_that_does_not_match_is_named_by_its_place(tmp_path: Path) -> None:
    from aihpc.results.write import write_results

    results = read_results(LM)
    path = write_results(tmp_path, results.head(), results.trials).path
    lines = path.read_text().splitlines()
    first = lines.index('"trials":[') + 1
    lines[first + 1] = lines[first + 1].replace('"attempts":', '"attempts":"x","was":', 1)
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(DataError) as err:
        read_results(path)
    assert str(err.value) == f"results file {path}: trials[1].attempts: expected int, got str"


def test_a_version_this_aihpc_does_not_read_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "results.json"
    path.write_text(json.dumps({"schema_version": 4, "trials": []}))
    with pytest.raises(
        DataError, match=r"unsupported results schema_version 4 .*\(supported: 1, 2, 3\)"
    ):
        read_results(path)


def test_the_head_of_results_json_is_read_without_its_trials(tmp_path: Path) -> None:
    from aihpc.results.write import write_results

    results = read_results(LM)
    doc = json.loads(LM.read_text())
    written = write_results(tmp_path, results.head(), results.trials)
    assert written.trials == len(doc["trials"]) and written.path == tmp_path / "results.json"
    assert json.loads(written.path.read_text()) == doc  # one JSON document, the one read
    assert read_run_head(written.path) == results.head()
    # the trials are skipped unparsed: a broken trial line does not matter to the head
    lines = written.path.read_text().splitlines()
    first_trial = lines.index('"trials":[') + 1
    lines[first_trial] = "not JSON,"
    written.path.write_text("\n".join(lines) + "\n")
    assert read_run_head(written.path).score == results.score
    # an older, indented file is parsed whole; its version as written
    assert read_run_head(RUN).schema_version == json.loads(RUN.read_text())["schema_version"]
    with pytest.raises(DataError, match="results file not found"):
        read_run_head(tmp_path / "absent.json")
    lines[1] = '"aihpc_version":{broken,'
    written.path.write_text("\n".join(lines) + "\n")
    with pytest.raises(DataError, match="results file line 2 is not JSON"):
        read_run_head(written.path)


def test_a_large_run_writes_its_results_compressed_and_every_reader_takes_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import gzip
    import shutil

    from aihpc.cli import main
    from aihpc.results.read import results_file
    from aihpc.results.write import write_results

    run = tmp_path / "run"
    shutil.copytree(FIXTURES / "run", run)
    results = read_results(run / "results.json")
    head, trials = results.head(), results.trials
    written = write_results(run, head, trials, compress_above=10**9)
    assert (written.path, written.trials) == (run / "results.json", len(trials))
    plain = (run / "results.json").read_bytes()
    packed = write_results(run, head, trials, compress_above=len(plain) - 1).path
    assert packed == run / "results.json.gz" == results_file(run)
    assert not (run / "results.json").exists()
    assert gzip.decompress(packed.read_bytes()) == plain and packed.stat().st_size < len(plain) / 4
    assert read_results(packed) == results and read_run_head(packed) == head
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
    assert write_results(run, head, trials).path == run / "results.json"
    assert not packed.exists()


@pytest.mark.parametrize("command", ["report", "compare", "verify"])
def test_every_reader_refuses_a_document_that_does_not_match_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str
) -> None:
    import shutil

    from fixture_run import aihpc_main

    run = tmp_path / "run"
    shutil.copytree(FIXTURES / "run", run)
    doc = json.loads(RUN.read_text())
    doc["score"]["trials_failed"] = "none"
    (run / "results.json").write_text(json.dumps(doc))
    runs = [str(run)] * (2 if command == "compare" else 1)
    code, out, err = aihpc_main(capsys, command, *runs)
    assert code == 2 and out == "" and "Traceback" not in err
    assert err.count("\n") == 1 and err.endswith(
        f"results file {run / 'results.json'}: score.trials_failed: expected int, got str\n"
    )
