"""Store format 5: a trial keeps its lineage and its hyperparameters' origin, under the digest
chain; a store of format 4, without them, still checks against its chain."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from aihpc.records.chain import RECORD_COLUMNS, record_digest
from aihpc.records.rows import NewTrial, TrialRow
from aihpc.records.store import STORE_FORMAT, RunStore
from aihpc.records.trial import Hyperparameters
from aihpc.results.write import trial_record
from aihpc.scoring.accuracy import Accuracy
from aihpc.tasks.image.seeds import seed_spec

NEW = ("lineage_start", "lineage_epochs", "hparams_origin")


def _trial(trial_id: int, parent: int | None, origin: str) -> NewTrial:
    arch = seed_spec((1, 8, 8), 10).to_dict()
    return NewTrial(
        id=trial_id,
        parent=parent,
        arch_hash="h",
        arch=arch,
        parent_arch=arch if parent is not None else None,
        morph="m",
        recipe=None,
        hparams=Hyperparameters(lr=0.1, batch_size=32),
        hpo_number=trial_id,
        budget=0,
        num_params=1,
        t_created=100.0,
        lineage_start=12.5,
        lineage_epochs=3 * trial_id,
        hparams_origin=origin,
    )


def test_a_trials_lineage_and_origin_are_kept_chained_and_written_to_results(tmp_path: Path):
    assert STORE_FORMAT == 5
    store = RunStore(tmp_path)
    store.add_trial(_trial(0, None, "tpe"))
    store.add_trial(_trial(1, 0, "inherited from trial 0"))
    rows = store.trials()
    assert [(r.lineage_start, r.lineage_epochs, r.hparams_origin) for r in rows] == [
        (12.5, 0, "tpe"),
        (12.5, 3, "inherited from trial 0"),
    ]
    assert store.lineage_epochs() == {0: 0, 1: 3}
    links = {(link["kind"], link["key"]): link for link in store.chain()}
    for raw in store.raw_rows("trials"):
        assert record_digest("trial", raw) == links[("trial", str(raw["id"]))]["record_sha256"]
    record = trial_record(rows[1], [], 0.0, Accuracy(val_samples=10, min_accuracy=0.5))
    assert {k: getattr(record, k) for k in NEW} == {
        "lineage_start": 12.5,
        "lineage_epochs": 3,
        "hparams_origin": "inherited from trial 0",
    }


def test_a_row_without_the_new_columns_digests_as_format_4_linked_it(tmp_path: Path):
    store = RunStore(tmp_path)
    store.add_trial(_trial(0, None, "tpe"))
    (raw,) = store.raw_rows("trials")
    old = {k: v for k, v in raw.items() if k not in NEW}  # a format-4 store's row
    # format 4's rule, written out: its eleven columns, as stored
    columns = [c for c in RECORD_COLUMNS["trial"] if c not in NEW]
    assert len(columns) == 11
    text = json.dumps(
        ["trial", {c: old[c] for c in columns}], sort_keys=True, separators=(",", ":")
    )
    assert record_digest("trial", old) == hashlib.sha256(text.encode()).hexdigest()
    # a format-5 row whose new columns were dropped afterwards no longer matches its link
    (link,) = [x for x in store.chain() if x["kind"] == "trial"]
    assert record_digest("trial", raw) == link["record_sha256"] != record_digest("trial", old)


def test_a_trial_of_an_older_store_has_no_lineage_in_results():
    row = TrialRow(
        id=0,
        parent=None,
        arch_hash="h",
        arch={},
        morph="seed",
        hparams=Hyperparameters(lr=0.1, batch_size=32),
        hpo_number=0,
        budget=2,
        status="completed",
        reason=None,
        num_params=1,
        recipe=None,
        t_created=0.0,
        t_end=1.0,
        attempts=0,
        traceback=None,
    )
    record = trial_record(row, [], 0.0, Accuracy(val_samples=10, min_accuracy=0.5))
    assert not set(NEW) & set(record.to_dict())  # as the results.json of that run has it
