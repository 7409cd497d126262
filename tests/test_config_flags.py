"""`aihpc run`'s flags are RunConfig's fields: none is ignored, none is missing unnoticed."""

from __future__ import annotations

import argparse
from dataclasses import fields

import pytest

from aihpc.base.config import RunConfig, load_toml
from aihpc.base.errors import ConfigError
from aihpc.cli import run as run_cli


def parser_dests() -> set[str]:
    parser = argparse.ArgumentParser()
    run_cli.add_arguments(parser)
    return {action.dest for action in parser._actions}


def test_every_flag_sets_a_field_and_every_field_has_a_flag_or_is_toml_only():
    dests, names = parser_dests(), {f.name for f in fields(RunConfig)}
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


MECHANISMS = ("lineage_schedule", "inherit_hparams", "grow_on_plateau", "early_stop")


def test_the_search_mechanisms_are_on_by_default_and_each_flag_pair_and_key_sets_one(tmp_path):
    """``--NAME`` / ``--no-NAME`` on the command line, ``NAME = true/false`` in a TOML file; the
    flag wins over the file, and an absent flag leaves the file's value."""
    assert [getattr(RunConfig(), name) for name in MECHANISMS] == [True] * 4
    assert [name for name, _ in run_cli.MECHANISMS] == list(MECHANISMS)
    parser = argparse.ArgumentParser()
    run_cli.add_arguments(parser)
    for name in MECHANISMS:
        flag = name.replace("_", "-")
        off = run_cli.config_flags(parser.parse_args([f"--no-{flag}"]))
        assert off == {name: False} and not getattr(RunConfig.from_dict(off), name)
        assert run_cli.config_flags(parser.parse_args([f"--{flag}"])) == {name: True}
        toml = tmp_path / f"{name}.toml"
        toml.write_text(f"{name} = false\n")
        values = load_toml(toml)
        assert not getattr(RunConfig.from_dict(values), name)
        flags = run_cli.config_flags(parser.parse_args([f"--{flag}"]))
        assert getattr(RunConfig.from_dict({**values, **flags}), name)
        assert not getattr(
            RunConfig.from_dict({**values, **run_cli.config_flags(parser.parse_args([]))}), name
        )


def test_a_mechanism_takes_a_boolean_only():
    with pytest.raises(ConfigError, match="early_stop must be of type bool, got 'no'"):
        RunConfig.from_dict({"early_stop": "no"})


def test_strategy_seed_is_a_strategy_of_the_command_line():
    parser = argparse.ArgumentParser()
    run_cli.add_arguments(parser)
    flags = run_cli.config_flags(parser.parse_args(["--strategy", "seed"]))
    assert RunConfig.from_dict(flags).strategy == "seed"
