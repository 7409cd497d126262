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

Bad arguments raise :class:`aihpc.errors.ConfigError` (one line, exit 2).
Only the standard library is imported at module level.
"""

from __future__ import annotations

import argparse
import functools
import json
from pathlib import Path
from typing import Any

from aihpc.errors import ConfigError


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


def _build(args: argparse.Namespace) -> tuple[Any, tuple[int, ...], str]:
    """The model (on the meta device when it can be built there), the input
    shape of one sample, and a label.  A tokens model gets no ``in_channels``."""
    import torch

    if args.spec is not None:
        from aihpc.nas.build import SpecNet
        from aihpc.nas.spec import ArchSpec

        if args.num_classes is not None:
            raise ConfigError("--num-classes applies to --model only (a spec fixes its classes)")
        spec = ArchSpec.load(args.spec)
        shape = parse_shape(args.input) if args.input else tuple(spec.input_shape)
        factory: Any = functools.partial(SpecNet, spec)
        label = str(args.spec)
    else:
        from aihpc import models

        info = models.info(args.model)
        shape = parse_shape(args.input) if args.input else tuple(info.input_shape)

        def factory() -> Any:
            if info.input_kind == "tokens":
                return models.create(args.model, num_classes=args.num_classes)
            return models.create(args.model, num_classes=args.num_classes, in_channels=shape[0])

        label = args.model
    try:
        with torch.device("meta"):
            model = factory()
    except (RuntimeError, NotImplementedError):  # a builder that needs real tensors
        model = factory()
    return model, shape, label


def run(args: argparse.Namespace) -> int:
    """Count and print; return 0."""
    if args.batch < 1:
        raise ConfigError(f"batch must be >= 1, got {args.batch}")
    if args.depth < 0:
        raise ConfigError(f"depth must be >= 0, got {args.depth}")
    if args.input is not None:
        parse_shape(args.input)  # fail on a bad shape before building anything

    import torch

    from aihpc.counting import count_ops, format_count

    model, shape, label = _build(args)
    example: Any = (args.batch, *shape)  # a shape: one float32 input
    if args.model is not None:
        from aihpc import models

        if models.info(args.model).input_kind == "tokens":  # int64 token ids (batch, T)
            example = models.example_input(
                args.model, args.batch, shape, device="meta", num_classes=args.num_classes
            )
    count = count_ops(model, example, train=args.train)
    parameters = sum(p.numel() for p in model.parameters())
    if args.json:
        doc = {
            "model": args.model,
            "spec": str(args.spec) if args.spec else None,
            "input_shape": list(shape),
            "parameters": parameters,
            "torch_version": torch.__version__,
            **count.to_dict(),
        }
        print(json.dumps(doc, indent=2))
        return 0
    mode = "training step" if args.train else "inference"
    title = f"{label}: input {args.batch}x{'x'.join(map(str, shape))}, {mode}"
    print(format_count(count, by=args.by, depth=args.depth, title=title, parameters=parameters))
    return 0
