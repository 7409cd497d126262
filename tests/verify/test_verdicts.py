"""Verdicts of ``aihpc verify`` recorded under the checked files' SHA-256, and ``aihpc rank``
reusing them."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from aihpc.ranking.rank import build_ranking
from aihpc.verify import verdicts
from aihpc.verify.checks import Check, Mismatch, Verification
from fixture_run import FIXTURES, aihpc_main

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("verify")]


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("AIHPC_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache" / "verdicts"


def _runs(tmp_path: Path) -> Path:
    """A folder holding one copy of the fixture run, as rank takes it."""
    shutil.copytree(FIXTURES / "run", tmp_path / "runs" / "run")
    return tmp_path / "runs"


def _verified(rows) -> list[str]:
    return [row.verified for row in rows]


def test_verify_records_its_verdict_and_rank_shows_it_for_the_same_bytes(
    tmp_path, cache, capsys
) -> None:
    runs = _runs(tmp_path)
    run = runs / "run"
    code, _, err = aihpc_main(capsys, "verify", str(run))
    assert code == 0, err
    key = verdicts.fingerprint(run)
    entry = json.loads((cache / f"{key}.json").read_text())
    assert entry["status"] == "yes" and entry["run_dir"] == str(run.resolve())
    assert verdicts.recorded(key) == "yes"
    # what rank shows is the record: one that says "no" for these bytes is shown as it is
    failed = Verification(
        str(run),
        (Check("operations", "failed", "planted"),),
        (Mismatch("operations", "planted", trial=1),),
    )
    verdicts.record(key, failed)
    assert _verified(build_ranking(runs)[0]) == ["no"]
    # results.json laid out again: other bytes, so the run is verified again (and passes)
    doc = json.loads((run / "results.json").read_text())
    (run / "results.json").write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    assert verdicts.fingerprint(run) != key and verdicts.recorded(verdicts.fingerprint(run)) is None
    assert _verified(build_ranking(runs)[0]) == ["yes"]
    assert verdicts.recorded(verdicts.fingerprint(run)) == "yes"  # rank recorded what it found


def test_the_fingerprint_covers_every_checked_file_and_only_those(tmp_path, cache) -> None:
    run = _runs(tmp_path) / "run"
    key = verdicts.fingerprint(run)
    assert verdicts.fingerprint(run) == key
    for name in ("aihpc.sqlite", "results.json", "mlperf.log"):
        path = run / name
        original = path.read_bytes()
        path.write_bytes(original[:-1] + bytes([original[-1] ^ 1]))
        assert verdicts.fingerprint(run) != key, name
        path.write_bytes(original)
    (run / "aihpc.sqlite-wal").write_bytes(b"")  # a write-ahead log appearing, even empty
    assert verdicts.fingerprint(run) != key
    (run / "aihpc.sqlite-wal").unlink()
    for extra in (run / "weights" / "extra.pt", run / "report.html"):
        extra.parent.mkdir(exist_ok=True)
        extra.write_bytes(b"not read by verify")
    assert verdicts.fingerprint(run) == key


def test_a_damaged_record_is_none_and_an_unwritable_cache_costs_only_the_reuse(
    tmp_path, monkeypatch, capsys
) -> None:
    run = _runs(tmp_path) / "run"
    (tmp_path / "cache" / "verdicts").mkdir(parents=True)
    monkeypatch.setenv("AIHPC_CACHE_DIR", str(tmp_path / "cache"))
    key = verdicts.fingerprint(run)
    for text in ("not json", '{"status": "maybe"}', "[1]", '{"other": 1}'):
        (tmp_path / "cache" / "verdicts" / f"{key}.json").write_text(text)
        assert verdicts.recorded(key) is None, text
    blocked = tmp_path / "a-file"
    blocked.write_text("")
    monkeypatch.setenv("AIHPC_CACHE_DIR", str(blocked))  # verdicts/ cannot be made under a file
    code, out, err = aihpc_main(capsys, "verify", str(run))
    assert code == 0 and "VERIFIED" in out and err == "", err
    assert verdicts.recorded(key) is None


def test_the_cache_folder_follows_the_environment(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("AIHPC_CACHE_DIR", str(tmp_path / "a"))
    assert verdicts.cache_dir() == tmp_path / "a" / "verdicts"
    monkeypatch.delenv("AIHPC_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "x"))
    assert verdicts.cache_dir() == tmp_path / "x" / "aihpc" / "verdicts"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert verdicts.cache_dir() == tmp_path / "home" / ".cache" / "aihpc" / "verdicts"
