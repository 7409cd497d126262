"""The store keeps a child's architecture as the diff of its parent's and gives it back in full."""

from __future__ import annotations

import json
import random
from pathlib import Path

from aihpc.records.rows import NewTrial
from aihpc.records.store import RunStore
from aihpc.records.trial import Hyperparameters
from aihpc.tasks.image.morphism import random_plan
from aihpc.tasks.image.seeds import seed_spec


def _add(
    store: RunStore, trial_id: int, parent: int | None, arch: dict, parent_arch: dict | None
) -> None:
    store.add_trial(
        NewTrial(
            id=trial_id,
            parent=parent,
            arch_hash=f"h{trial_id}",
            arch=arch,
            parent_arch=parent_arch,
            morph="m",
            recipe=None,
            hparams=Hyperparameters(lr=0.1, batch_size=32, weight_decay=1e-4),
            hpo_number=trial_id,
            budget=2,
            num_params=1,
            t_created=0.0,
            lineage_start=0.0,
            lineage_epochs=0,
            hparams_origin="tpe",
        )
    )


def test_children_are_stored_as_diffs_and_read_back_in_full(tmp_path: Path) -> None:
    rng = random.Random(1)
    specs = [seed_spec((1, 8, 8), 10)]
    store = RunStore(tmp_path)
    _add(store, 0, None, specs[0].to_dict(), None)
    parents = [None]
    for trial_id in range(1, 25):
        parent = rng.randrange(trial_id)
        specs.append(random_plan(specs[parent], rng, 2_000_000)[0])
        parents.append(parent)
        _add(store, trial_id, parent, specs[-1].to_dict(), specs[parent].to_dict())
    rows = store.trials()
    assert [r.arch for r in rows] == [s.to_dict() for s in specs]
    assert rows[0].arch_diff is None and all(r.arch_diff is not None for r in rows[1:])
    raw = [json.loads(r["arch"]) for r in store.raw_rows("trials")]
    assert "layers" in raw[0] and all(set(a) == {"arch_diff"} for a in raw[1:])
    full, stored = (
        sum(len(json.dumps(s.to_dict())) for s in specs),
        sum(len(json.dumps(a)) for a in raw),
    )
    assert stored < full / 4
    from aihpc.results.write import trial_record
    from aihpc.scoring.accuracy import Accuracy

    assert trial_record(rows[3], [], 0.0, Accuracy(100, 0.5)).arch_diff == rows[3].arch_diff
