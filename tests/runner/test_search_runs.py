"""One short real run per task with every mechanism of the search on, as a user types it: it
ends, its results show the mechanisms' records, its summary the search's gain and the score's
parts, and it verifies."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from aihpc.records.rows import TRAINED_OUT, TrialEnd
from fixture_run import aihpc

# two whole runs of a few seconds of clock each (about a minute with their workers' start), on one
# worker: the mechanisms do not need two, and a second would only take the other core
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("runs2")]

COMMON = """
workers = 1
threads_per_worker = 1
report_seconds = 5.0
peak_seconds = 0.2
"""
CONFIGS = {
    "image": 'dataset = "digits"\nepochs_max = 4\nbatch_sizes = [64]\nmin_accuracy = 0.3\n',
    "lm": (
        'task = "lm"\nepochs_max = 4\nbatch_sizes = [8]\n'
        "[data_options]\ncontext = 32\ntrain_tokens = 65536\nval_tokens = 8192\n"
        "epoch_tokens = 8192\n"
    ),
}


@pytest.mark.parametrize("task", ["image", "lm"])
def test_a_run_with_every_mechanism_on_ends_and_verifies(tmp_path: Path, task: str) -> None:
    config, run_dir = tmp_path / "run.toml", tmp_path / "run"
    config.write_text(COMMON + CONFIGS[task])
    proc = aihpc("run", "--minutes", "0.3", "--config", str(config), "--out", str(run_dir))
    assert proc.returncode == 0, proc.stderr
    results = json.loads((run_dir / "results.json").read_text())
    assert all(results["config"][k] for k in ("lineage_schedule", "inherit_hparams"))
    assert all(results["config"][k] for k in ("grow_on_plateau", "early_stop", "fork_leader"))
    trials = {t["id"]: t for t in results["trials"]}
    assert len(trials) >= 2, [t["status"] for t in trials.values()]
    for t in trials.values():
        parent = trials.get(t["parent"])
        if parent is None:
            assert t["lineage_epochs"] == 0
            first = t["id"] == 0  # the run's first trial takes the task's defaults
            assert t["hparams_origin"] in (("default",) if first else ("default, perturbed", "tpe"))
            continue
        assert t["lineage_start"] == parent["lineage_start"] or parent["id"] == 0
        # a child of a parent that had not trained when it started is a root beside it
        inherited = f"inherited from trial {parent['id']}"
        assert t["hparams_origin"] in ("tpe", "default, perturbed", inherited)
        for e in t["epochs"]:
            assert 0.0 <= e["schedule_from"] <= e["schedule_to"] <= 1.0
    score = results["score"]
    # a gain over the seed where the seed trained out, else how it ended
    assert score["seed_only_trial"] is not None and score["seed_only_end"] in tuple(TrialEnd)
    assert (score["search_gain"] is not None) == (score["seed_only_end"] in TRAINED_OUT)
    assert "  search gain      " in proc.stdout
    # the score's parts multiply to it, and the summary gives them
    parts = score["work_seconds"] / score["wall_seconds"] * score["seed_rate"]
    assert math.isclose(parts * score["path_factor"], score["ops_per_second"], rel_tol=1e-9)
    assert 0.0 < score["work_seconds"] <= score["wall_seconds"]  # one worker
    assert "  score's parts    " in proc.stdout
    verify = aihpc("verify", str(run_dir))
    assert verify.returncode == 0, verify.stdout + verify.stderr
    assert "VERIFIED" in verify.stdout
