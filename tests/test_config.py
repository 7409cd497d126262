import pytest

from aihpc.base.config import RunConfig, load_toml
from aihpc.base.errors import ConfigError


def test_defaults_are_valid_and_round_trip():
    c = RunConfig()
    assert RunConfig.from_dict(c.to_dict()) == c


def test_unknown_keys_list_the_valid_ones(tmp_path):
    with pytest.raises(ConfigError) as e:
        RunConfig.from_dict({"minutse": 3, "epochs": 2}, source="run.toml")
    msg = str(e.value)
    assert "unknown keys epochs, minutse in run.toml" in msg
    assert "valid keys:" in msg and "minutes" in msg and "batch_sizes" in msg


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
    ],
)
def test_bad_values_name_the_rule_and_value(values, text):
    with pytest.raises(ConfigError, match=None) as e:
        RunConfig.from_dict(values)
    assert text in str(e.value)


def test_toml_loading(tmp_path):
    p = tmp_path / "run.toml"
    p.write_text(
        'minutes = 1.5\ndataset = "digits"\nbatch_sizes = [16, 32]\n'
        "[data_options]\ndifficulty = 0.3\n"
    )
    c = RunConfig.from_dict(load_toml(p))
    assert c.minutes == 1.5 and c.dataset == "digits" and c.batch_sizes == (16, 32)
    assert c.data_options == {"difficulty": 0.3}


def test_toml_errors_name_the_file(tmp_path):
    with pytest.raises(ConfigError, match="config file not found: .*nope.toml"):
        load_toml(tmp_path / "nope.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("minutes = = 3\n")
    with pytest.raises(ConfigError, match="invalid TOML in .*bad.toml"):
        load_toml(bad)


def test_replace_keeps_unset_values():
    c = RunConfig(minutes=2.0).replace(seed=5, workers=None)
    assert c.minutes == 2.0 and c.seed == 5 and c.workers is None
