"""`aihpc run`'s flags are RunConfig's fields: none is ignored, none is missing unnoticed."""

from __future__ import annotations

import argparse
from dataclasses import fields

from aihpc.base.config import RunConfig
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
