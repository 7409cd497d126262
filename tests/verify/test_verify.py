"""``aihpc verify`` on a real run, untouched and tampered with for real (copies of it, edited on
disk)."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import sqlite3
from pathlib import Path

import pytest

from aihpc.records.chain import GENESIS, chain_digest, record_digest
from aihpc.records.store import RunStore
from aihpc.results.rates import rate_split
from aihpc.results.read import read_run_head
from aihpc.verify.recount import verify_run
from fixture_run import aihpc_main, write_results_document

# Verification recounts the operations of the fixture's 7 architectures (about 1 s of CPU each,
# cached within the process): over 5 s for any one of these tests alone.  One xdist group keeps them
# in one process under pytest-xdist (make test).
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("verify")]


def _results(run_dir: Path) -> dict:
    return json.loads((run_dir / "results.json").read_text())


def _write_results(run_dir: Path, results: dict) -> None:
    (run_dir / "results.json").write_text(json.dumps(results, sort_keys=True, indent=2) + "\n")


def _sql(run_dir: Path, sql: str, *args) -> None:
    with contextlib.closing(sqlite3.connect(run_dir / "aihpc.sqlite")) as con:
        con.execute(sql, args)
        con.commit()


def _ok_epoch(run_dir: Path, index: int = -1) -> tuple[int, int]:
    """(trial, epoch) of a finished epoch: the last one by default."""
    results = _results(run_dir)
    ok = [
        (t["id"], e["epoch"]) for t in results["trials"] for e in t["epochs"] if e["status"] == "ok"
    ]
    return ok[index]


def _lines(verification) -> list[str]:
    return [m.line() for m in verification.mismatches]


def _digests(run_dir: Path) -> dict[str, str]:
    return {
        str(p.relative_to(run_dir)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(run_dir.rglob("*"))
        if p.is_file()
    }


def test_an_untouched_run_verifies_and_stays_untouched(finished_run: Path) -> None:
    before = _digests(finished_run)
    result = verify_run(finished_run)
    assert result.status == "yes", _lines(result)
    assert [c.name for c in result.checks] == [
        "operations",
        "score",
        "results",
        "mlperf",
        "integrity",
    ]
    assert all(c.status == "ok" for c in result.checks)
    assert (
        _digests(finished_run) == before
    )  # verification wrote nothing, not even SQLite's -wal/-shm


def test_the_chain_is_sha256_over_the_records_as_stored(finished_run: Path) -> None:
    """The chain recomputed here, independently of aihpc.verify.recount, from the raw tables."""
    with contextlib.closing(
        sqlite3.connect(f"file:{finished_run / 'aihpc.sqlite'}?mode=ro&immutable=1", uri=True)
    ) as con:
        con.row_factory = sqlite3.Row
        links = [dict(r) for r in con.execute("SELECT * FROM chain ORDER BY seq")]
        epochs = {
            f"{r['trial_id']}/{r['epoch']}": dict(r) for r in con.execute("SELECT * FROM epochs")
        }
    previous = GENESIS
    for link in links:
        assert (
            link["chain_sha256"]
            == hashlib.sha256((previous + link["record_sha256"]).encode()).hexdigest()
        )
        previous = link["chain_sha256"]
    assert chain_digest(GENESIS, "ab") == hashlib.sha256((GENESIS + "ab").encode()).hexdigest()
    last = {(link["kind"], link["key"]): link["record_sha256"] for link in links}
    for key, row in epochs.items():
        assert last[("epoch", key)] == record_digest("epoch", row)
    results = _results(finished_run)
    assert (
        results["integrity"]["chain_sha256"]
        == links[results["integrity"]["links"] - 1]["chain_sha256"]
    )


def test_a_changed_accuracy_in_results_json_is_caught(run_copy: Path) -> None:
    trial, epoch = _ok_epoch(run_copy)
    results = _results(run_copy)
    t = next(t for t in results["trials"] if t["id"] == trial)
    e = next(e for e in t["epochs"] if e["epoch"] == epoch)
    e["val_accuracy"] = 0.999
    _write_results(run_copy, results)
    lines = _lines(verify_run(run_copy))
    assert any(
        line.startswith(f"results: trial {trial}: results.json epochs[")
        and "val_accuracy is 0.999" in line
        for line in lines
    ), lines
    assert f"mlperf: trial {trial} epoch {epoch}: accuracy 0.999 in results.json, " in "\n".join(
        lines
    )


def test_a_changed_part_of_the_score_is_caught(run_copy: Path) -> None:
    """The score's parts (aihpc.results.rates) are recomputed from the store's epochs: the
    fixture's file predates them, so they are written in, right but for the seed network's rate."""
    results = _results(run_copy)
    score = read_run_head(run_copy / "results.json").score.score()
    parts = rate_split(RunStore.read_only(run_copy), score)
    results["score"].update(parts, seed_rate=parts["seed_rate"] * 1.1)
    _write_results(run_copy, results)
    lines = _lines(verify_run(run_copy))
    parts_lines = [line for line in lines if "score." in line]
    assert parts_lines == [
        f"results: results.json's score.seed_rate is {parts['seed_rate'] * 1.1!r}; the run "
        f"store's epochs give {parts['seed_rate']!r}"
    ], lines


def test_a_changed_accuracy_in_the_store_is_caught(run_copy: Path) -> None:
    trial, epoch = _ok_epoch(run_copy)
    _sql(
        run_copy,
        "UPDATE epochs SET metrics = json_set(metrics, '$.val_accuracy', 0.999) "
        "WHERE trial_id = ? AND epoch = ?",
        trial,
        epoch,
    )
    lines = _lines(verify_run(run_copy))
    assert (
        f"integrity: trial {trial} epoch {epoch}: "
        "its epoch record differs from the record committed "
        "during the run"
    ) in lines
    assert any(line.startswith("score: best_accuracy in results.json is ") for line in lines), lines


def test_a_store_row_that_breaks_its_record_s_rule_is_one_line_exit_2(
    run_copy: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An accuracy of 1.5 cannot be read as an epoch record: the store is damaged, not a
    traceback."""
    trial, epoch = _ok_epoch(run_copy)
    _sql(
        run_copy,
        "UPDATE epochs SET metrics = json_set(metrics, '$.val_accuracy', 1.5) "
        "WHERE trial_id = ? AND epoch = ?",
        trial,
        epoch,
    )
    code, out, err = aihpc_main(capsys, "verify", str(run_copy))
    assert code == 2 and out == "", err
    assert err.count("\n") == 1 and "is damaged: " in err and "1.5" in err


def test_an_inflated_operation_count_in_the_store_is_caught(run_copy: Path) -> None:
    trial, epoch = _ok_epoch(run_copy, 0)
    _sql(
        run_copy,
        "UPDATE epochs SET ops_train = ops_train * 2 WHERE trial_id = ? AND epoch = ?",
        trial,
        epoch,
    )
    lines = _lines(verify_run(run_copy))
    assert any(
        line.startswith(f"operations: trial {trial} epoch {epoch}: ops_train logged ")
        for line in lines
    ), lines
    assert any(
        line.startswith(f"integrity: trial {trial} epoch {epoch}: its epoch record differs")
        for line in lines
    )
    assert any(line.startswith("score: ops in results.json is ") for line in lines), lines


def test_an_inflated_operation_count_in_results_json_is_caught(run_copy: Path) -> None:
    trial, _ = _ok_epoch(run_copy, 0)
    results = _results(run_copy)
    t = next(t for t in results["trials"] if t["id"] == trial)
    t["ops"]["train"] *= 2
    t["ops"]["total"] = t["ops"]["train"] + t["ops"]["eval"]
    results["score"]["ops"] += t["ops"]["train"] // 2
    results["score"]["ops_per_second"] = results["score"]["ops"] / results["score"]["wall_seconds"]
    _write_results(run_copy, results)
    lines = _lines(verify_run(run_copy))
    assert any(
        line.startswith(f"results: trial {trial}: results.json ops.train is ") for line in lines
    ), lines
    assert any(line.startswith("score: ops in results.json is ") for line in lines), lines
    assert any(line.startswith("score: ops_per_second in results.json is ") for line in lines), (
        lines
    )


def test_a_trial_deleted_from_the_store_is_caught(run_copy: Path) -> None:
    trial, _ = _ok_epoch(run_copy, 0)
    _sql(run_copy, "DELETE FROM epochs WHERE trial_id = ?", trial)
    _sql(run_copy, "DELETE FROM trials WHERE id = ?", trial)
    lines = _lines(verify_run(run_copy))
    assert (
        f"integrity: trial {trial}: its trial record was committed during the run"
        " and has been deleted" in lines
    )
    assert f"results: trial {trial}: in results.json but not in the run store" in lines


def test_a_trial_deleted_from_results_json_is_caught(run_copy: Path) -> None:
    trial, epoch = _ok_epoch(run_copy, 0)
    results = _results(run_copy)
    results["trials"] = [t for t in results["trials"] if t["id"] != trial]
    _write_results(run_copy, results)
    lines = _lines(verify_run(run_copy))
    assert f"results: trial {trial}: in the run store but missing from results.json" in lines
    assert (
        f"mlperf: trial {trial} epoch {epoch}: in the MLPerf log"
        " but not a finished epoch of results.json" in lines
    )


def test_an_edited_run_time_is_caught(run_copy: Path) -> None:
    """The run made to look shorter, so that its score looks higher: in results.json, then in the
    store."""
    results = _results(run_copy)
    results["score"]["wall_seconds"] /= 2
    results["score"]["ops_per_second"] *= 2
    _write_results(run_copy, results)
    lines = _lines(verify_run(run_copy))
    assert any(line.startswith("score: wall_seconds in results.json is ") for line in lines), lines
    assert any(line.startswith("score: ops_per_second in results.json is ") for line in lines), (
        lines
    )

    _sql(run_copy, "UPDATE segments SET stop = start + (stop - start) / 2")
    lines = _lines(verify_run(run_copy))
    assert "integrity: segment 1 differs from the record committed during the run" in lines


def test_an_edited_epoch_time_is_caught(run_copy: Path) -> None:
    trial, epoch = _ok_epoch(run_copy)
    _sql(
        run_copy,
        "UPDATE epochs SET t_end = t_end - 0.5 WHERE trial_id = ? AND epoch = ?",
        trial,
        epoch,
    )
    lines = _lines(verify_run(run_copy))
    assert (
        f"integrity: trial {trial} epoch {epoch}: "
        "its epoch record differs from the record committed during "
        "the run" in lines
    )
    assert any(
        line.startswith(f"mlperf: trial {trial} epoch {epoch}: epoch_stop at ") for line in lines
    ), lines
    assert any(
        line.startswith(f"results: trial {trial}: results.json ") and "t_end" in line
        for line in lines
    )


def test_a_rewritten_chain_link_breaks_the_chain(run_copy: Path) -> None:
    _sql(run_copy, "UPDATE chain SET record_sha256 = ? WHERE seq = 3", "0" * 64)
    lines = _lines(verify_run(run_copy))
    assert any(line.startswith("integrity: the chain breaks at link 3 ") for line in lines), lines


def test_a_run_without_a_digest_chain_is_unchecked_not_failed(
    run_copy: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A run written before the chain existed (store format 2): verified, integrity 'unchecked'."""
    _sql(run_copy, "DROP TABLE chain")
    _sql(run_copy, "UPDATE meta SET value = '2' WHERE key = 'store_format'")
    results = _results(run_copy)
    del results["integrity"]
    _write_results(run_copy, results)
    result = verify_run(run_copy)
    assert result.status == "unchecked" and not result.mismatches
    (integrity,) = [c for c in result.checks if c.name == "integrity"]
    assert integrity.status == "unchecked" and "no digest chain" in integrity.detail
    code, out, err = aihpc_main(capsys, "verify", str(run_copy))
    assert code == 0, err
    assert "VERIFIED, integrity unchecked" in out


def test_cli_exit_codes(
    run_copy: Path, finished_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """4 for a mismatch (0 for a run that verifies: the tests above and below), 2 for what is not a
    run."""
    trial, epoch = _ok_epoch(run_copy)
    _sql(
        run_copy,
        "UPDATE epochs SET ops_eval = ops_eval + 1 WHERE trial_id = ? AND epoch = ?",
        trial,
        epoch,
    )
    code, out, err = aihpc_main(capsys, "verify", "--json", str(run_copy))
    assert code == 4
    assert err.count("\n") == 1 and "does not verify: " in err and "mismatch(es)" in err
    report = json.loads(out)
    assert report["status"] == "no"
    assert any(
        m["trial"] == trial and m["epoch"] == epoch and m["check"] == "operations"
        for m in report["mismatches"]
    )
    (tmp_path / "empty").mkdir()
    for target in (tmp_path / "empty", tmp_path / "missing", finished_run / "results.json"):
        code, out, err = aihpc_main(capsys, "verify", str(target))
        assert code == 2 and out == ""
        assert err.count("\n") == 1 and err.startswith("aihpc verify: error: not a run directory: ")


def _trial_lines(run_dir: Path) -> tuple[list[str], int, int]:
    """results.json's lines (schema 3's layout: a line per field and per trial), and the range of
    its trial lines."""
    lines = (run_dir / "results.json").read_text().splitlines(keepends=True)
    first = lines.index('"trials":[\n') + 1
    last = next(i for i in range(first, len(lines)) if lines[i].startswith("]"))
    return lines, first, last


def test_a_results_file_laid_out_by_line_is_compared_a_trial_at_a_time(run_copy: Path) -> None:
    """The fixture's results.json rewritten in schema 3's layout (by the writer a run uses), read a
    trial at a time: it verifies; an edited trial, one removed and two swapped are each named."""
    write_results_document(run_copy, _results(run_copy))
    assert verify_run(run_copy).status == "yes"
    lines, first, last = _trial_lines(run_copy)
    assert last - first >= 3
    edited = json.loads(lines[first].rstrip().rstrip(","))
    edited["ops"]["train"] += 1
    lines[first] = json.dumps(edited, sort_keys=True, separators=(",", ":")) + ",\n"
    removed = json.loads(lines[first + 1].rstrip().rstrip(","))["id"]
    del lines[first + 1]
    (run_copy / "results.json").write_text("".join(lines))
    found = _lines(verify_run(run_copy))
    assert any(
        line.startswith(f"results: trial {edited['id']}: results.json ops.train is ")
        for line in found
    )
    assert f"results: trial {removed}: in the run store but missing from results.json" in found
    assert any(
        line.startswith(f"mlperf: trial {removed} epoch ")
        and "not a finished epoch of results.json" in line
        for line in found
    ), found

    lines, first, last = _trial_lines(run_copy)
    lines[first + 1], lines[first + 2] = lines[first + 2], lines[first + 1]
    (run_copy / "results.json").write_text("".join(lines))
    swapped = [json.loads(lines[first + i].rstrip().rstrip(","))["id"] for i in (1, 2)]
    found = _lines(verify_run(run_copy))
    assert (
        f"results: results.json's trials are not in id order: {swapped[1]} after {swapped[0]}"
        in found
    )


def test_the_recount_in_a_second_process_finds_what_one_process_does(
    run_copy: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """From PARALLEL_FROM_TRIALS trials the operations are recounted in a spawned process beside the
    other checks: the same checks, and the same mismatches, as in one process."""
    from aihpc.verify import recount

    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("the second process is used only with two cores or more")
    trial, epoch = _ok_epoch(run_copy, 0)
    _sql(
        run_copy,
        "UPDATE epochs SET ops_train = ops_train * 2 WHERE trial_id = ? AND epoch = ?",
        trial,
        epoch,
    )
    alone = verify_run(run_copy)
    monkeypatch.setattr(recount, "PARALLEL_FROM_TRIALS", 1)
    beside = verify_run(run_copy)
    assert beside.checks == alone.checks and beside.mismatches == alone.mismatches
    assert any(
        m.check == "operations" and (m.trial, m.epoch) == (trial, epoch) for m in beside.mismatches
    )


def test_a_trial_line_of_results_json_that_is_not_json_is_one_line_naming_results_json(
    run_copy: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_results_document(run_copy, _results(run_copy))
    lines, first, _ = _trial_lines(run_copy)
    lines[first] = lines[first][: len(lines[first]) // 2] + "\n"
    (run_copy / "results.json").write_text("".join(lines))
    code, out, err = aihpc_main(capsys, "verify", str(run_copy))
    assert code == 2 and out == "", err
    assert err.count("\n") == 1 and "results.json: trials[0]: not valid JSON (cut short" in err
    assert "run store" not in err
