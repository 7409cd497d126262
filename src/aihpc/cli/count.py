"""``aihpc count``: count the operations of a zoo model or an architecture spec.

``aihpc count --model resnet50 [--input 3x224x224] [--batch 1] [--train]
[--num-classes K] [--by operator|module] [--depth N] [--json]`` or
``aihpc count --spec SPEC.json ...`` prints a table of forward / backward /
total operations per operator type (or per module), the totals, the
conv+linear MACs, the parameter count and any uncounted ops; ``--json``
prints ``OpCount.to_dict()`` plus metadata instead.  Without ``--train`` the
model is counted for inference (eval mode, forward only).  A tokens model
of the zoo (``lstm_lm``, ``transformer_small``) takes ``--input T``, its
sequence length, and is counted on int64 token ids ``(batch, T)``.

The count itself is :func:`aihpc.arch.count.count_model`.  Bad arguments raise
:class:`aihpc.base.errors.ConfigError` (one line, exit 2).
Only the standard library is imported at module level.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from aihpc.base.errors import ConfigError


def parse_shape(text: str) -> tuple[int, ...]:
    """``"3x224x224"`` -> ``(3, 224, 224)``: positive integers joined by ``x``."""
    parts = text.strip().lower().split("x")
    if not text.strip() or not all(p.isdigit() and int(p) >= 1 for p in parts):
        raise ConfigError(
            f"--input must be positive integers joined by 'x' (e.g. 3x224x224), got {text!r}"
        )
    return tuple(int(p) for p in parts)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register the options of ``aihpc count``."""
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--model", metavar="NAME", help="a model of the zoo (see `aihpc models`)")
    source.add_argument(
        "--spec",
        metavar="SPEC.json",
        type=Path,
        help="an architecture spec file (as written by the NAS)",
    )
    parser.add_argument(
        "--input",
        metavar="CxHxW",
        default=None,
        help="input shape of one sample, or T for a tokens model (default: the model's / spec's)",
    )
    parser.add_argument("--batch", type=int, default=1, help="batch size (default 1)")
    parser.add_argument(
        "--train",
        action="store_true",
        help="count a training step: forward + cross-entropy + backward",
    )
    parser.add_argument(
        "--num-classes",
        type=int,
        default=None,
        metavar="K",
        help="number of classes of a zoo model (default: the model's)",
    )
    parser.add_argument(
        "--by",
        choices=("operator", "module"),
        default="operator",
        help="table rows: operator types (default) or modules",
    )
    parser.add_argument(
        "--depth",
        type=int,
        default=1,
        metavar="N",
        help="with --by module: show modules up to N levels deep (default 1)",
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")


def run(args: argparse.Namespace) -> int:
    """Count and print; return 0."""
    if args.depth < 0:
        raise ConfigError(f"depth must be >= 0, got {args.depth}")
    shape = parse_shape(args.input) if args.input is not None else None
    from aihpc.arch.count import count_model

    counted = count_model(
        model=args.model,
        spec=args.spec,
        shape=shape,
        num_classes=args.num_classes,
        batch=args.batch,
        train=args.train,
    )
    if args.json:
        print(json.dumps(counted.to_dict(), indent=2))
    else:
        print(counted.render(by=args.by, depth=args.depth))
    return 0
