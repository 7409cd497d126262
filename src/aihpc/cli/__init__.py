"""The ``aihpc`` command line.

Each subcommand lives in its own module with two functions:
``add_arguments(parser)`` and ``run(args) -> int``.  Those modules import only
the standard library at top level, so ``aihpc --help`` stays fast; heavy
libraries (torch, numpy, ...) are imported inside ``run``.

Any :class:`aihpc.base.errors.AihpcError` raised by a command becomes one line on
stderr and the exit code of its kind (2: the user's mistake, 3: the machine
failed, 4: the measurement fails its check), without a traceback; a bug
keeps its traceback (exit 1).  The table of exit codes is docs/reference/exit-codes.md.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from typing import NoReturn

# name -> (module, one-line help).  Order is the order shown in --help.
COMMANDS: dict[str, tuple[str, str]] = {
    "run": (
        "aihpc.cli.run",
        "run the AutoML benchmark and score the machine in operations per second",
    ),
    "scaling": ("aihpc.cli.scaling", "weak scaling: the benchmark at several worker counts"),
    "models": ("aihpc.cli.models", "list the model zoo with input sizes and parameter counts"),
    "export": ("aihpc.cli.export", "export a zoo model or an architecture spec to ONNX"),
    "report": ("aihpc.cli.report", "write a run's self-contained HTML report"),
    "count": ("aihpc.cli.count", "count the operations of a model's forward / training step"),
    "bench": (
        "aihpc.cli.bench",
        "Deep500's four levels: operators, network, training, distributed",
    ),
    "profile": (
        "aihpc.cli.profile",
        "characterise a training step: phases, operator types, memory, sweeps",
    ),
    "roofline": (
        "aihpc.cli.roofline",
        "measure the machine's roofs (matmul peaks, memory bandwidth)",
    ),
    "compare": (
        "aihpc.cli.compare",
        "results side by side: like with like, significance where runs repeat",
    ),
    "rank": (
        "aihpc.cli.rank",
        "a ranked list of machines from result files (Markdown, HTML), with Valid FLOPS",
    ),
    "verify": (
        "aihpc.cli.verify",
        "recompute a run's operations and score; check its files agree and are unaltered",
    ),
    "recommend": (
        "aihpc.cli.recommend",
        "recommend a CNN for a data set without training it (calibrate, validate)",
    ),
    "infer": (
        "aihpc.cli.infer",
        "serve a run's best model (or a zoo model) under MLPerf LoadGen, at a latency bound",
    ),
    "train-to-target": (
        "aihpc.cli.train_to_target",
        "MLPerf HPC time to train on a science workload (CosmoFlow, DeepCAM)",
    ),
}


class _Parser(argparse.ArgumentParser):
    """argparse with the project's error convention: one line, exit 2."""

    def error(self, message: str) -> NoReturn:  # pragma: no cover - exercised via CLI tests
        self.exit(2, f"{self.prog}: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    from aihpc import __version__

    parser = _Parser(prog="aihpc", description="aihpc: an AI-HPC benchmark suite.")
    parser.add_argument("--version", action="version", version=f"aihpc {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for name, (module_name, help_text) in COMMANDS.items():
        module = importlib.import_module(module_name)
        p = sub.add_parser(name, help=help_text, description=help_text)
        module.add_arguments(p)
        p.set_defaults(_module=module)
    return parser


def main(argv: list[str] | None = None) -> int:
    from aihpc.base.errors import EXIT_INTERRUPTED, EXIT_PIPE, EXIT_USER, AihpcError

    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return EXIT_USER
    try:
        code = int(args._module.run(args) or 0)
        sys.stdout.flush()  # a reader that left shows here, not in the interpreter's exit
        return code
    except AihpcError as exc:
        print(f"aihpc {args.command}: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print(f"aihpc {args.command}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    # the reader left (`aihpc models | head -1`): stop quietly, as `cat` does
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # so the exit's flush cannot fail again
        return EXIT_PIPE
