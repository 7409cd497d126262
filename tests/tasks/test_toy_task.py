"""A third task added in one package (``tests/toy_task/``) and registered through the public
registry, nothing else touched: its settings read from a sectioned TOML file, its growth keeping
the function, and a real short search with it through ``aihpc run`` as a user types it, then
``aihpc verify`` (every operation recounted through the task) and ``aihpc report``."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
import torch

from aihpc.base.errors import ConfigError
from aihpc.tasks import names, read_config, task_of
from fixture_run import aihpc_main
from toy_task import NAME, register_blobs
from toy_task.quality import BlobsOptions
from toy_task.spec import MLPSpec

register_blobs()

CONFIG = """
[run]
task = "blobs"
peak_seconds = 0.2
report_seconds = 5.0
[search]
epochs_min = 1
epochs_max = 2
population = 4
tournament = 2
[launch]
workers = 2
threads_per_worker = 1
[blobs]
min_accuracy = 0.3
data_options = { num_samples = 800, dim = 6, classes = 3 }
"""


def test_the_toy_task_is_registered_and_reads_its_own_settings(tmp_path: Path) -> None:
    assert NAME in names()
    config = read_config({"task": NAME, "min_accuracy": 0.4, "data_options": {"dim": 4}})
    assert config.options == BlobsOptions(min_accuracy=0.4, data_options={"dim": 4})
    assert read_config(config.to_dict()) == config
    with pytest.raises(ConfigError, match="min_accuracy must be in"):
        read_config({"task": NAME, "min_accuracy": 2.0})
    with pytest.raises(ConfigError, match="unknown key context"):  # the language task's, not its
        read_config({"task": NAME, "context": 64})


def test_its_growth_keeps_the_function() -> None:
    task = task_of(NAME)
    parent = MLPSpec(5, 3, (7,))
    torch.manual_seed(0)
    net = task.model(parent).double()
    child, growth, _ = task.plan(parent, random.Random(0), None)
    grown = task.model(child).double()
    grown.load_state_dict(growth.weights(net.state_dict()))
    x = torch.randn(32, 5, dtype=torch.float64)
    assert child.num_params() > parent.num_params()
    assert torch.allclose(grown(x), net(x), atol=1e-12)
    assert task.arch(child.to_dict()) == child


@pytest.mark.slow
def test_a_short_search_of_the_toy_task(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config, run_dir = tmp_path / "blobs.toml", tmp_path / "run"
    config.write_text(CONFIG)
    code, out, err = aihpc_main(
        capsys, "run", "--minutes", "0.25", "--config", str(config), "--out", str(run_dir)
    )
    assert code == 0, err
    results = json.loads((run_dir / "results.json").read_text())
    assert results["config"]["task"] == NAME
    assert results["data"]["in_dim"] == 6 and results["data"]["num_classes"] == 3
    trials = results["trials"]
    assert len(trials) >= 2
    assert {t["arch"]["kind"] for t in trials if t.get("arch")} == {NAME}
    grown = [t for t in trials if t.get("parent") is not None]
    assert grown, "the search grew no child"
    assert results["score"]["ops"] > 0 and results["score"]["best_accuracy"] > 1 / 3
    code, out, err = aihpc_main(capsys, "verify", str(run_dir))
    assert code == 0 and "VERIFIED" in out, out + err
    code, out, err = aihpc_main(capsys, "report", str(run_dir))
    assert code == 0, err
    page = (run_dir / "report.html").read_text()
    assert "hidden widths" in page  # the task's own rows of the best architecture
