"""`aihpc run`'s flags are the run's settings (its sections' and every task's own): none is ignored,
none is missing unnoticed; a flag overrides a TOML file's setting, flat or in its section."""

from __future__ import annotations

import argparse

import pytest

from aihpc.base.config import SECTIONS, load_toml, section_keys
from aihpc.base.errors import ConfigError
from aihpc.cli import run as run_cli
from aihpc.tasks import read_config, task_of


def parser_dests() -> set[str]:
    parser = argparse.ArgumentParser()
    run_cli.add_arguments(parser)
    return {action.dest for action in parser._actions}


#: aihpc's own tasks (a test may register another: tests/toy_task/)
BUILT_IN = ("image", "lm")


def settings() -> set[str]:
    """Every setting of a run: its sections' and each built-in task's own."""
    own = {key for name in BUILT_IN for key in task_of(name).options_type.keys()}
    return {key for kind in SECTIONS.values() for key in section_keys(kind)} | own


def test_every_flag_sets_a_field_and_every_field_has_a_flag_or_is_toml_only():
    dests, names = parser_dests(), settings()
    assert sorted(dests - names - set(run_cli.COMMAND_FLAGS)) == []  # a flag that sets nothing
    assert sorted(names - dests - set(run_cli.TOML_ONLY)) == []  # a field no flag reaches
    assert sorted(set(run_cli.TOML_ONLY) & dests) == []  # listed TOML-only, yet it has a flag
    assert set(run_cli.TOML_ONLY) <= names and set(run_cli.COMMAND_FLAGS) <= dests | {"help"}


def test_flags_given_reach_the_configuration_and_absent_ones_do_not():
    parser = argparse.ArgumentParser()
    run_cli.add_arguments(parser)
    args = parser.parse_args(["--minutes", "2", "--workers", "3", "--time", "00:10:00", "--slurm"])
    assert run_cli.config_flags(args) == {
        "minutes": 2.0,
        "workers": 3,
        "walltime": "00:10:00",
        "batch_system": "slurm",
    }


MECHANISMS = (
    "lineage_schedule",
    "inherit_hparams",
    "grow_on_plateau",
    "early_stop",
    "fork_leader",
    "keep_leader",
)


def test_the_search_mechanisms_are_on_by_default_and_each_flag_pair_and_key_sets_one(tmp_path):
    """``--NAME`` / ``--no-NAME`` on the command line, ``NAME = true/false`` in a TOML file; the
    flag wins over the file, and an absent flag leaves the file's value."""
    assert all(getattr(read_config({}).search, name) for name in MECHANISMS)
    assert [name for name, _ in run_cli.MECHANISMS] == list(MECHANISMS)
    parser = argparse.ArgumentParser()
    run_cli.add_arguments(parser)
    for name in MECHANISMS:
        flag = name.replace("_", "-")
        off = run_cli.config_flags(parser.parse_args([f"--no-{flag}"]))
        assert off == {name: False} and not getattr(read_config(off).search, name)
        assert run_cli.config_flags(parser.parse_args([f"--{flag}"])) == {name: True}
        toml = tmp_path / f"{name}.toml"
        toml.write_text(f"{name} = false\n")
        values = load_toml(toml)
        assert not getattr(read_config(values).search, name)
        flags = run_cli.config_flags(parser.parse_args([f"--{flag}"]))
        assert getattr(read_config({**values, **flags}).search, name)
        assert not getattr(
            read_config({**values, **run_cli.config_flags(parser.parse_args([]))}).search, name
        )


def test_a_mechanism_takes_a_boolean_only():
    with pytest.raises(ConfigError, match="early_stop must be of type bool, got 'no'"):
        read_config({"early_stop": "no"})


def test_strategy_seed_is_a_strategy_of_the_command_line():
    parser = argparse.ArgumentParser()
    run_cli.add_arguments(parser)
    flags = run_cli.config_flags(parser.parse_args(["--strategy", "seed"]))
    assert read_config(flags).search.strategy == "seed"


def test_a_flag_overrides_a_file_s_setting_at_its_top_or_in_its_section(tmp_path):
    parser = argparse.ArgumentParser()
    run_cli.add_arguments(parser)
    flags = run_cli.config_flags(parser.parse_args(["--minutes", "2", "--max-val-loss", "3.5"]))
    for text in (
        'minutes = 9\ntask = "lm"\nmax_val_loss = 4.0\n',
        '[run]\nminutes = 9\ntask = "lm"\n[lm]\nmax_val_loss = 4.0\ncontext = 32\n',
    ):
        toml = tmp_path / "run.toml"
        toml.write_text(text)
        config = read_config(run_cli._merged(load_toml(toml), flags))
        assert config.run.minutes == 2.0 and config.options.max_val_loss == 3.5
        assert config.run.task == "lm"


def test_a_task_not_registered_is_refused_in_one_line_naming_them():
    parser = argparse.ArgumentParser()
    run_cli.add_arguments(parser)
    with pytest.raises(
        ConfigError, match="task must be one of image, (.*, )?lm(, .*)?, got 'sound'"
    ):
        read_config(run_cli.config_flags(parser.parse_args(["--task", "sound"])))
