"""``aihpc bench network``: Level 1, a network's time per layer and per operator type.

    aihpc bench network --model NAME | --spec FILE [--input CxHxW | T] [--batch N]
        [--mode inference|training|both] [--device D] [--dtype DTYPE] [--depth N]
        [--profile-seconds S] [--top K] [--roofline FILE] [--out FILE] [--json]

Times one step of a zoo model or an architecture spec, per layer (forward and
backward) and per operator type, with the counted operations beside the time:
achieved FLOP/s, arithmetic intensity and share of the roofline per layer
(:mod:`aihpc.bench.model` documents the method and the data format).
Writes a ``bench-network`` result to ``--out`` and prints, per mode, the
``--top`` slowest layers and operator types.  Bad input (unknown model,
missing spec, batch < 1, a dtype the device lacks, a batch that does not fit
in memory) is one line on stderr and exit 2, with no file written.
Only the standard library is imported at module level.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import Any

from aihpc.base.errors import ConfigError
from aihpc.cli.options import add_device, add_dtype, add_roofline
from aihpc.cli.output import add_output_arguments


def add_arguments(parser: argparse.ArgumentParser) -> None:
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--model", metavar="NAME", help="a model of the zoo (see `aihpc models`)")
    source.add_argument("--spec", metavar="SPEC.json", type=Path, help="an architecture spec file")
    parser.add_argument(
        "--input",
        metavar="CxHxW",
        default=None,
        help="input shape of one sample, or T for a tokens model (default: the model's)",
    )
    parser.add_argument("--batch", type=int, default=8, help="batch size (default 8)")
    parser.add_argument(
        "--mode",
        choices=("inference", "training", "both"),
        default="both",
        help="forward only in eval mode, forward+backward in train mode, or both (default)",
    )
    add_device(parser)
    add_dtype(parser, "float32 (default), bfloat16 or float16 (autocast)", default="float32")
    parser.add_argument(
        "--depth",
        type=int,
        default=None,
        metavar="N",
        help="report modules at most N levels below the model (default: every module)",
    )
    parser.add_argument(
        "--profile-seconds",
        type=float,
        default=1.0,
        metavar="S",
        help="profiled time per mode; per-layer times are medians over its steps "
        "(1 to 10 steps; default 1)",
    )
    parser.add_argument(
        "--top", type=int, default=10, help="layers shown in the table, slowest first (default 10)"
    )
    add_roofline(parser)
    add_output_arguments(parser, "bench-network.json")


def _build(
    args: argparse.Namespace,
) -> tuple[Any, Callable[[Any], Any], tuple[str | None, str | None]]:
    """The model (on the CPU), a maker of a random input batch on a given device, and the
    result's label: the zoo model's name and the spec file's (one of them None)."""
    from aihpc.cli.count import parse_shape

    shape = parse_shape(args.input) if args.input is not None else None
    if args.spec is not None:
        import torch

        from aihpc.tasks.image.spec import ArchSpec

        spec = ArchSpec.load(args.spec)
        size = (args.batch, *(shape or spec.input_shape))
        from aihpc.tasks.image.build import SpecNet

        return (
            SpecNet(spec),
            lambda device: torch.randn(size, device=device),
            (None, str(args.spec)),
        )
    from aihpc import models

    meta = models.info(args.model)
    shape = shape or tuple(meta.input_shape)
    if meta.input_kind == "tokens":
        model = models.create(args.model)
    else:
        model = models.create(args.model, in_channels=shape[0])
    return (
        model,
        lambda device: models.example_input(args.model, args.batch, shape, device=device),
        (args.model, None),
    )


def run(args: argparse.Namespace) -> int:
    """Benchmark, write the result, print the table; 0."""
    if args.batch < 1:
        raise ConfigError(f"batch must be >= 1, got {args.batch}")
    if args.top < 1:
        raise ConfigError(f"top must be >= 1, got {args.top}")
    if args.depth is not None and args.depth < 0:
        raise ConfigError(f"depth must be >= 0, got {args.depth}")
    if not args.profile_seconds > 0:
        raise ConfigError(f"profile-seconds must be > 0, got {args.profile_seconds}")

    from aihpc.bench.model_session import measure_network
    from aihpc.bench.tables import network_table
    from aihpc.cli.output import emit

    model, make_example, label = _build(args)
    data = measure_network(
        model,
        make_example,
        label,
        mode=args.mode,
        device_name=args.device,
        dtype=args.dtype,
        roofline_file=args.roofline,
        depth=args.depth,
        profile_seconds=args.profile_seconds,
        batch_text=f"{args.batch}x{args.input or 'default'}",
    )
    return emit(args, "bench-network", data, network_table(data, args.top))
