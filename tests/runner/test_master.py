"""The master with a deterministic in-process executor: real trials, no Dask."""

from __future__ import annotations

from pathlib import Path

import pytest

from aihpc.config import RunConfig
from aihpc.runner.master import Master
from aihpc.runner.store import RunStore

from runner_helpers import InProcessExecutor, NullObserver, StepClock

DIGITS = {"input_shape": [1, 8, 8], "num_classes": 10, "num_val": 360, "max_params": 2_000_000}


def _run(tmp_path: Path, **config) -> tuple[RunStore, dict]:
    """Run the master with 2 slots; every task takes 10 s of its clock, so 6 tasks fit in a minute."""
    cfg = RunConfig(dataset="digits", epochs_min=1, epochs_max=1, batch_sizes=(128,), report_seconds=60,
                    **{"minutes": 1.0, **config})
    store = RunStore(tmp_path / "run")
    store.set_meta("config", cfg.to_dict())
    clock = StepClock(10.0)
    master = Master(cfg, store, InProcessExecutor(clock, slots=2), DIGITS, layout=None, observer=NullObserver(),
                    clock=clock)
    return store, master.run()


def test_strategy_none_retrains_the_seed_from_fresh_weights(tmp_path: Path) -> None:
    store, score = _run(tmp_path, strategy="none")
    trials = store.trials()
    assert len(trials) == 6
    assert {t["arch_hash"] for t in trials} == {trials[0]["arch_hash"]}  # every trial is the seed network
    assert all(t["parent"] is None and t["morph"] == "seed" for t in trials)
    # each trial starts from its own initialisation: their first-epoch results differ
    firsts = [store.epochs(t["id"])[0]["metrics"]["train_loss"] for t in trials if store.epochs(t["id"])]
    assert len(set(firsts)) == len(firsts)
    assert score["ops"] == store.total_ops() > 0


def test_evolution_morphs_children_from_finished_parents(tmp_path: Path) -> None:
    store, _ = _run(tmp_path, strategy="evolution")
    trials = store.trials()
    assert len(trials) == 6
    assert trials[0]["parent"] is None and trials[0]["morph"] == "seed"
    hashes = [t["arch_hash"] for t in trials]
    assert len(set(hashes)) == len(hashes)  # no architecture is trained twice
    for t in trials[1:]:
        assert t["parent"] is not None and t["parent"] < t["id"] and t["morph"] != "seed"


@pytest.mark.parametrize("name", ["none", "evolution", "random"])
def test_every_strategy_is_a_valid_configuration(name: str) -> None:
    assert RunConfig(strategy=name).strategy == name
