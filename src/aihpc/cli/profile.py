"""``aihpc profile``: a training step (Deep500 BOF): phases, operator types, memory, sweeps.

Everything is checked before anything is measured (the destinations exist,
the shapes fit the model and the memory); the JSON result and the plots are
written only once every measurement is done, so a failure leaves nothing
behind.  A sweep prints one progress line per value on stderr.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

from aihpc.cli.options import add_device, add_roofline
from aihpc.cli.output import add_output_arguments


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--model", metavar="NAME", required=True, help="a model of the zoo (see `aihpc models`)"
    )
    parser.add_argument("--batch", type=int, default=16, help="batch size (default 16)")
    parser.add_argument(
        "--input",
        metavar="SHAPE",
        default=None,
        help="one sample's shape: CxHxW for images, the sequence length for sequence models",
    )
    parser.add_argument(
        "--steps", type=int, default=3, help="profiled training steps after one warm-up (default 3)"
    )
    parser.add_argument(
        "--optimizer",
        choices=("sgd", "adamw"),
        default="sgd",
        help="SGD with momentum 0.9 (default) or AdamW",
    )
    add_device(parser)
    parser.add_argument(
        "--sweep",
        choices=("none", "resolution", "batch", "seq-len"),
        default="none",
        help="also measure time and memory against one input dimension",
    )
    parser.add_argument(
        "--values",
        metavar="N,N,...",
        default=None,
        help="the sweep's values (default: around the configured one: 1/4, 1/2, 1, 2 times "
        "for batch and seq-len; 1/2, 3/4, 1, 5/4 times for resolution)",
    )
    add_roofline(
        parser,
        "the float32 peak from this `aihpc roofline` result (default: measured after the "
        "profile, as `aihpc roofline` measures it)",
    )
    parser.add_argument(
        "--plots",
        metavar="DIR",
        type=Path,
        default=None,
        help="write the sweep's plots (PNG: time and peak memory against the value) into this "
        "existing directory",
    )
    add_output_arguments(parser, "profile.json")


def _check_destinations(args: argparse.Namespace) -> None:
    """Fail before measuring if a result could not be written (nothing is written half-way)."""
    from aihpc.base.errors import ConfigError, StorageError

    if args.sweep == "none" and (args.values is not None or args.plots is not None):
        raise ConfigError(
            f"--{'values' if args.values is not None else 'plots'} needs --sweep "
            "resolution, batch or seq-len"
        )
    parent = Path(args.out).parent
    if not parent.is_dir():
        raise StorageError(f"cannot write {args.out}: directory {parent} does not exist")
    if args.plots is not None and not Path(args.plots).is_dir():
        raise StorageError(f"--plots directory {args.plots} does not exist")


def _progress(line: str) -> None:
    print(f"aihpc profile: {line}", file=sys.stderr, flush=True)


def run(args: argparse.Namespace) -> int:
    from aihpc.base.fileio import atomic_write
    from aihpc.cli.count import parse_shape
    from aihpc.cli.output import emit
    from aihpc.machine.devices import resolve_device
    from aihpc.profile import (
        StepConfig,
        characterise,
        format_profile,
        parse_values,
        plot_names,
        plot_sweep,
    )
    from aihpc.roofline.machine import peak_result

    _check_destinations(args)
    shape = parse_shape(args.input) if args.input is not None else None
    device = resolve_device(args.device)
    config = StepConfig.for_model(
        args.model, args.batch, shape, steps=args.steps, optimizer=args.optimizer
    )
    sweep = None if args.sweep == "none" else args.sweep
    values = parse_values(args.values) if args.values is not None else None
    profile = characterise(config, device, sweep, values, progress=_progress)
    profile = dataclasses.replace(profile, peak=peak_result(args.roofline, str(device), "float32"))
    plots: dict[Path, bytes] = {}
    if args.plots is not None and profile.sweep is not None:
        pngs, names = (
            plot_sweep(profile.sweep, config.model),
            plot_names(profile.sweep, config.model),
        )
        plots = {Path(args.plots) / names[kind]: png for kind, png in pngs.items()}
    table = format_profile(profile) + "".join(f"\nplot: {path}" for path in plots)
    code = emit(args, "profile", profile.to_record(), table)
    for path, png in plots.items():
        atomic_write(path, png)
    return code
