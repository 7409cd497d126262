"""``aihpc bench training``: Level 2, time to a target validation accuracy.

Trains ``--model`` on ``--dataset`` until the validation accuracy reaches
``--target`` or the budget (``--max-epochs``, ``--minutes``) runs out, and
writes the convergence curve, the outcome and the throughput (see
:mod:`aihpc.bench.training` for the clocks and the result data).  The exit
code is 0 whether or not the target was reached: the outcome is data, and
the table's last lines say which.  One progress line per epoch goes to
stderr.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from aihpc.cli.options import add_device
from aihpc.cli.output import add_output_arguments


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--model", metavar="NAME", required=True, help="a model of the zoo (see `aihpc models`)"
    )
    parser.add_argument(
        "--dataset", default="digits", help="a data set aihpc knows (default digits)"
    )
    parser.add_argument(
        "--data-path", type=Path, default=None, help="where the data set lives, if it needs one"
    )
    parser.add_argument(
        "--target",
        type=float,
        required=True,
        metavar="ACC",
        help="target validation accuracy in (0, 1]",
    )
    parser.add_argument("--max-epochs", type=int, default=50, help="budget in epochs (default 50)")
    parser.add_argument(
        "--minutes", type=float, default=10.0, help="budget in wall-clock minutes (default 10)"
    )
    parser.add_argument("--batch", type=int, default=64, help="batch size (default 64)")
    parser.add_argument(
        "--lr", type=float, default=0.05, help="learning rate of SGD with momentum (default 0.05)"
    )
    add_device(parser)
    parser.add_argument(
        "--seed", type=int, default=0, help="seed of the weights and the data order (default 0)"
    )
    parser.add_argument(
        "--threads", type=int, default=None, help="CPU threads of PyTorch (default: its own choice)"
    )
    add_output_arguments(parser, "bench-training.json")


def run(args: argparse.Namespace) -> int:
    """Validate, train to the target or the budget, write the result and print the table."""
    import sys

    from aihpc.base.errors import ConfigError
    from aihpc.bench.training import TrainingConfig, format_table, time_to_target
    from aihpc.cli.output import emit

    config = TrainingConfig(
        model=args.model,
        target=args.target,
        dataset=args.dataset,
        data_path=str(args.data_path) if args.data_path is not None else None,
        max_epochs=args.max_epochs,
        minutes=args.minutes,
        batch=args.batch,
        lr=args.lr,
        device=args.device,
        seed=args.seed,
        threads=args.threads,
    )
    if not args.out.parent.is_dir():  # fail before training, not after
        raise ConfigError(f"cannot write {args.out}: directory {args.out.parent} does not exist")
    outcome = time_to_target(
        config, progress=lambda line: print(f"bench training: {line}", file=sys.stderr)
    )
    return emit(args, "bench-training", outcome.to_record(), format_table(outcome))
