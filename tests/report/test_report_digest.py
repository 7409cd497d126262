"""A run of many trials is reported from a digest of every trial, read one trial at a time."""

from __future__ import annotations

import copy
import json
import random
import re
from pathlib import Path
from typing import Any

from aihpc.report import write_report
from aihpc.report.digest import LISTED, SHOWN, read_for_report
from aihpc.results.read import read_results_document
from fixture_run import write_results_document

FIXTURE = Path(__file__).parent / "fixtures" / "results_v1.json"
MORPHS = (
    "widen conv1 16 -> 24",
    "deepen after relu1",
    "skip input -> relu1 (zero conv1x1 stride 1)",
)


def _large(n: int, seed: int = 0) -> dict[str, Any]:
    """The fixture's run with ``n`` trials made from its first one: random parents, accuracies."""
    doc = read_results_document(FIXTURE)
    template = doc["trials"][1]
    rng = random.Random(seed)
    trials = []
    for i in range(n):
        t = copy.deepcopy(template)
        accuracy = None if i % 17 == 5 else round(rng.uniform(0.3, 0.95), 6)
        t.update(
            id=i,
            parent=None if i == 0 else rng.randrange(i),
            morph="seed" if i == 0 else rng.choice(MORPHS),
            best_val_accuracy=accuracy,
            status="failed" if accuracy is None else "completed",
            ops={"train": 9 * i, "eval": i, "total": 10 * i + 10},
        )
        trials.append(t)
    return {**doc, "trials": trials, "schema_version": 3}


def _ancestry(doc: dict[str, Any]) -> list[int]:
    trials = {t["id"]: t for t in doc["trials"]}
    best = max(
        (t for t in doc["trials"] if t["best_val_accuracy"] is not None),
        key=lambda t: (t["best_val_accuracy"], -t["id"]),
    )
    path, current = [], best["id"]
    while current is not None:
        path.append(current)
        current = trials[current]["parent"]
    return path


def test_a_large_run_is_read_as_a_digest_and_its_best_trials(tmp_path: Path) -> None:
    n = 3 * LISTED
    doc = _large(n)
    run = tmp_path / "run"
    run.mkdir()
    write_results_document(run, doc)
    read = read_for_report(run / "results.json")
    digest = read.digest
    assert digest is not None and read.trial_count == n
    assert digest.count == n and sum(digest.status.values()) == n
    assert digest.status["failed"] == sum(1 for t in doc["trials"] if t["status"] == "failed")
    assert digest.ops == [10 * i + 10 for i in range(n)]
    assert digest.phase_seconds == {
        k: sum(t["phase_seconds"][k] for t in doc["trials"])
        for k in doc["trials"][0]["phase_seconds"]
    }
    scored = sorted(
        (t for t in doc["trials"] if t["best_val_accuracy"] is not None),
        key=lambda t: (-t["best_val_accuracy"], t["id"]),
    )
    kept = {t.id for t in read.trials}
    assert kept == {t["id"] for t in scored[:SHOWN]} | set(_ancestry(doc))
    assert all(t.to_dict() == doc["trials"][t.id] for t in read.trials)  # whole, as written
    # an older, indented file is digested the same way
    (run / "results.json").write_text(json.dumps({**doc, "schema_version": 2}, indent=2))
    older = read_for_report(run / "results.json")
    assert older.digest is not None and {t.id for t in older.trials} == kept
    assert vars(older.digest) == vars(digest)


def test_the_report_of_a_large_run_stays_small_and_names_the_best(tmp_path: Path) -> None:
    n = 3 * LISTED
    doc = _large(n, seed=1)
    run = tmp_path / "run"
    run.mkdir()
    write_results_document(run, doc, compress_above=0)  # compressed, as a large run writes it
    html = write_report(run).read_text()
    assert f"{n:,} trials: too many to list" in html
    rows = re.search(r"<h2>Trials</h2>(.*)$", html, re.S).group(1).count('<span class="status st-')
    assert (
        rows == len(read_for_report(run / "results.json.gz").trials) <= SHOWN + len(_ancestry(doc))
    )
    for trial_id in _ancestry(doc):
        assert f"<td>#{trial_id}</td>" in html  # the best trial's ancestry table
    assert len(html) < 2_000_000 and html.count("data:image/png") >= 4
