"""``aihpc bench LEVEL ...``: Deep500's four levels of benchmarks.

Each level is its own module, ``aihpc.cli.bench_<level>``, with
``add_arguments(parser)`` and ``run(args) -> int`` like every subcommand, and
only the standard library imported at module level.
"""

from __future__ import annotations

import argparse
import importlib

# level -> (module, one-line help)
LEVELS: dict[str, tuple[str, str]] = {
    "operators": (
        "aihpc.cli.bench_operators",
        "Level 0: single operators, forward and backward, validated, on the roofline",
    ),
    "network": (
        "aihpc.cli.bench_network",
        "Level 1: a network's time per layer and per operator type",
    ),
    "training": (
        "aihpc.cli.bench_training",
        "Level 2: time to a target accuracy, with the convergence curve",
    ),
    "distributed": (
        "aihpc.cli.bench_distributed",
        "Level 3: data-parallel training against one process, all-reduce measured apart",
    ),
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(
        dest="level", metavar="LEVEL", parser_class=type(parser), required=True
    )
    for name, (module_name, help_text) in LEVELS.items():
        module = importlib.import_module(module_name)
        p = sub.add_parser(name, help=help_text, description=help_text)
        module.add_arguments(p)
        p.set_defaults(_level_module=module)


def run(args: argparse.Namespace) -> int:
    return int(args._level_module.run(args) or 0)
