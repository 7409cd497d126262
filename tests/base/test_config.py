"""The run's settings: sections, the task's own typed settings, and every form they are read from
(flat TOML files and flags as before sections, sectioned files, results.json's configs)."""

import json
from pathlib import Path

import pytest

from aihpc.base.config import LaunchSection, RunSection, SearchSection, load_toml
from aihpc.base.errors import ConfigError
from aihpc.tasks import read_config
from aihpc.tasks.image.options import ImageOptions
from aihpc.tasks.language.options import LanguageOptions

FIXTURES = Path(__file__).parents[1] / "fixtures"


def test_defaults_are_valid_and_round_trip():
    c = read_config({})
    assert (c.run, c.search, c.launch, c.options) == (
        RunSection(),
        SearchSection(),
        LaunchSection(),
        ImageOptions(),
    )
    assert read_config(c.to_dict()) == c


def test_unknown_keys_list_the_valid_ones(tmp_path):
    with pytest.raises(ConfigError) as e:
        read_config({"minutse": 3, "epochs": 2}, source="run.toml")
    msg = str(e.value)
    assert "unknown keys epochs, minutse in run.toml" in msg
    assert "valid keys:" in msg and "minutes" in msg and "batch_sizes" in msg
    assert "min_accuracy" in msg and "epoch_tokens" not in msg  # the image task's own, not lm's


@pytest.mark.parametrize(
    "values, text",
    [
        ({"minutes": 0}, "minutes must be > 0, got 0"),
        ({"minutes": "five"}, "minutes must be of type float, got 'five'"),
        ({"workers": 0}, "workers must be >= 1, got 0"),
        ({"min_accuracy": 1.5}, "min_accuracy must be in [0, 1), got 1.5"),
        (
            {"strategy": "bayes"},
            "strategy must be one of evolution, random, none, seed, got 'bayes'",
        ),
        ({"epochs_min": 4, "epochs_max": 2}, "epochs_max must be >= epochs_min, got 2"),
        ({"batch_sizes": []}, "batch_sizes must be a non-empty list"),
        ({"batch_sizes": [32, "x"]}, "batch_sizes must be of type tuple"),
        ({"compile": 1}, "compile must be of type bool, got 1"),
        (
            {"scheduler": "localhost"},
            "scheduler must be an address like tcp://HOST:PORT, got 'localhost'",
        ),
        ({"batch_system": "sge"}, "batch_system must be one of slurm, pbs, lsf, got 'sge'"),
        (
            {"batch_system": "slurm", "scheduler": "tcp://h:1"},
            "give batch_system (slurm) or scheduler, not both",
        ),
        ({"peak_seconds": 0}, "peak_seconds must be a finite number > 0, got 0"),
        ({"peak_seconds": float("inf")}, "peak_seconds must be a finite number > 0, got inf"),
        ({"hpo_processes": 0}, "hpo_processes must be in [1, 16], got 0"),
        ({"worker_memory": "lots"}, "worker_memory must be a size like '4GiB', got 'lots'"),
        ({"task": "lm", "max_val_loss": -1.0}, "max_val_loss must be a finite number > 0"),
        ({"task": "lm", "context": 0}, "context must be"),
        ({"task": "lm", "epoch_tokens": "many"}, "epoch_tokens must be of type int"),
        ({"task": "sound"}, "task must be one of image, "),
        ({"task": 3}, "task must be of type str, got 3"),
        (
            {"run": {"workers": 2}},
            "unknown key workers in [run] of config (it belongs in [launch])",
        ),
        ({"run": {"minutes": 2}, "minutes": 3}, "minutes is given twice in config"),
        ({"search": 3}, "[search] in config must be a table, got 3"),
        ({"lm": {"context": 64}}, "unknown key lm in config"),  # the run's task is image
        ({"task": "lm", "context": 64, "data_options": {"context": 64}}, "give context once"),
    ],
)
def test_bad_values_name_the_rule_and_value(values, text):
    with pytest.raises(ConfigError) as e:
        read_config(values)
    assert text in str(e.value)


def test_toml_loading(tmp_path):
    p = tmp_path / "run.toml"
    p.write_text(
        'minutes = 1.5\ndataset = "digits"\nbatch_sizes = [16, 32]\n'
        "[data_options]\ndifficulty = 0.3\n"
    )
    c = read_config(load_toml(p))
    assert c.run.minutes == 1.5 and c.run.dataset == "digits" and c.search.batch_sizes == (16, 32)
    assert c.options == ImageOptions(data_options={"difficulty": 0.3})


def test_a_sectioned_file_is_the_flat_file_it_replaces(tmp_path):
    flat, sectioned = tmp_path / "flat.toml", tmp_path / "sections.toml"
    flat.write_text(
        'minutes = 2\ntask = "lm"\nstrategy = "random"\nworkers = 3\nmax_val_loss = 3.5\n'
        "[data_options]\ncontext = 64\nepoch_tokens = 4096\ntrain_tokens = 100000\n"
    )
    sectioned.write_text(
        '[run]\nminutes = 2\ntask = "lm"\n[search]\nstrategy = "random"\n[launch]\nworkers = 3\n'
        "[lm]\nmax_val_loss = 3.5\ncontext = 64\nepoch_tokens = 4096\n"
        "data_options = { train_tokens = 100000 }\n"
    )
    a, b = read_config(load_toml(flat)), read_config(load_toml(sectioned))
    assert a == b
    assert b.options == LanguageOptions(3.5, 64, 4096, {"train_tokens": 100000})
    assert (b.run.task, b.search.strategy, b.launch.workers) == ("lm", "random", 3)
    # the workers load the data set with the context and an epoch's tokens, as they always did
    assert b.options.ref_options() == {"train_tokens": 100000, "context": 64, "epoch_tokens": 4096}


def test_a_flat_file_s_other_task_settings_are_ignored_as_they_always_were():
    """A flat file (or config) from before typed task settings holds min_accuracy and max_val_loss
    whatever its task: the other task's is ignored, as that task alone ever read it."""
    lm = read_config({"task": "lm", "min_accuracy": 0.5, "max_val_loss": None})
    assert lm.options == LanguageOptions()
    image = read_config({"min_accuracy": 0.7, "max_val_loss": None})
    assert image.options == ImageOptions(min_accuracy=0.7)
    assert "min_accuracy" not in lm.to_dict() and "max_val_loss" not in image.to_dict()


@pytest.mark.parametrize(
    "path",
    [
        "report/fixtures/results_lm.json",
        "fixtures/h200-lm/results.json",
        "fixtures/run/results.json",
    ],
)
def test_results_json_configs_of_earlier_versions_read_and_write_back(path):
    doc = json.loads((Path(__file__).parents[1] / path).read_text())
    config = read_config(doc["config"], source=path)
    assert config.run.task == doc["config"].get("task", "image")
    again = read_config(config.to_dict())
    assert again == config
    if config.run.task == "lm":  # the options written inside data_options come back typed
        options = doc["config"]["data_options"]
        assert config.options.epoch_tokens == options["epoch_tokens"]
        assert config.options.ref_options() == options


def test_toml_errors_name_the_file(tmp_path):
    with pytest.raises(ConfigError, match="config file not found: .*nope.toml"):
        load_toml(tmp_path / "nope.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("minutes = = 3\n")
    with pytest.raises(ConfigError, match="invalid TOML in .*bad.toml"):
        load_toml(bad)


def test_replace_keeps_unset_values_and_puts_each_setting_in_its_section():
    c = read_config(dict(minutes=2.0)).replace(seed=5, workers=None, optimizer="adamw")
    assert c.run.minutes == 2.0 and c.run.seed == 5 and c.launch.workers is None
    assert c.search.optimizer == "adamw"
    lm = read_config({"task": "lm"}).replace(context=32, data_options={"train_tokens": 5000})
    assert lm.options == LanguageOptions(context=32, data_options={"train_tokens": 5000})
