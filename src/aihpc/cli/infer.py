"""``aihpc infer``: serve the best model of a run (or a zoo model) under MLPerf's LoadGen.

``aihpc infer RUN_DIR`` serves the best trial of a finished ``aihpc run``
(image or language task) on the run's own validation split;
``aihpc infer --model NAME [--input CxHxW]`` serves a zoo model, untrained,
on synthetic inputs.  Batches are of fixed sizes (powers of two up to
``--max-batch``), each warmed up (on a GPU also captured as a CUDA graph, the
faster kept) before LoadGen starts; the time the tests will take is printed
then.  Each scenario asked for (``--scenario``, repeatable;
default offline, single-stream and server) runs under LoadGen; the record
(``infer.json``, kind ``infer``) and LoadGen's logs go to ``--out`` (default
RUN_DIR/infer, or ./infer-NAME).  Exit 0 when the result is valid, 4 when it
is not (the quality kept under 99 % of float32's, or a scenario invalid),
2 for bad input (nothing written), 3 when the machine fails.
Only the standard library is imported at module level.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import TYPE_CHECKING

from aihpc.base.errors import ConfigError
from aihpc.cli.options import add_device, add_dtype

if TYPE_CHECKING:
    from aihpc.infer.command import InferOptions

SCENARIOS = ("offline", "server", "single-stream")  # aihpc.infer.loadgen.SCENARIOS


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "run_dir",
        metavar="RUN_DIR",
        type=Path,
        nargs="?",
        help="a finished run: its best trial is served",
    )
    parser.add_argument("--model", metavar="NAME", help="a zoo model instead (see `aihpc models`)")
    parser.add_argument("--input", metavar="CxHxW", help="a zoo model's input shape")
    parser.add_argument(
        "--scenario",
        action="append",
        choices=SCENARIOS,
        help="a LoadGen scenario (repeat for several; default all three)",
    )
    add_device(parser)
    add_dtype(
        parser,
        "the served precision (default bfloat16 on a GPU, float32 on the CPU)",
        choices=("float32", "bfloat16", "float16"),
    )
    parser.add_argument(
        "--seconds",
        type=float,
        default=10.0,
        help="LoadGen's minimum duration of each test (default 10; MLPerf's is 600, and a "
        "shorter one is recorded as a short test); a server rate too low to reach LoadGen's "
        "640 queries in it is not tried",
    )
    parser.add_argument(
        "--peak-seconds",
        type=float,
        default=2.0,
        help="the device's peak search, seconds a stage (default 2)",
    )
    parser.add_argument(
        "--samples",
        type=int,
        default=1024,
        help="validation samples served and checked (default 1024)",
    )
    _serving_arguments(parser)
    parser.add_argument(
        "--out", type=Path, help="output folder (default RUN_DIR/infer or ./infer-NAME)"
    )
    parser.add_argument("--json", action="store_true", help="print the record as JSON")


def _serving_arguments(parser: argparse.ArgumentParser) -> None:
    """Batches, the server's search and bounds, threads, a language model's generation."""
    parser.add_argument(
        "--max-batch",
        type=int,
        default=256,
        help="largest batch: batches are the powers of two up to it, each warmed up before "
        "LoadGen starts (default 256)",
    )
    parser.add_argument(
        "--server-steps",
        type=int,
        default=6,
        help="LoadGen tests of the server's rate search (default 6)",
    )
    parser.add_argument(
        "--latency-ms",
        type=float,
        help="the server's p99 bound (default 15 ms, MLPerf's for ResNet-50)",
    )
    parser.add_argument(
        "--ttft-ms",
        type=float,
        help="a language model's p99 time to first token (default 2000, MLPerf's for Llama-3.1-8B)",
    )
    parser.add_argument(
        "--tpot-ms", type=float, help="a language model's p99 time per output token (default 100)"
    )
    parser.add_argument(
        "--threads", type=int, help="operator threads (default on the CPU: its cores less one)"
    )
    parser.add_argument("--prompt-tokens", type=int, help="a language model's prompt length")
    parser.add_argument("--new-tokens", type=int, help="tokens generated per query")


def _checked(args: argparse.Namespace) -> None:
    if (args.run_dir is None) == (args.model is None):
        raise ConfigError("give a run directory or --model NAME (one of them)")
    if args.input is not None and args.model is None:
        raise ConfigError("--input applies to a zoo model (--model) only")
    for name in ("seconds", "peak_seconds", "latency_ms", "ttft_ms", "tpot_ms"):
        value = getattr(args, name)
        if value is not None and not value > 0:
            raise ConfigError(f"--{name.replace('_', '-')} must be a positive number, got {value}")
    for name in ("samples", "max_batch", "server_steps", "threads", "prompt_tokens", "new_tokens"):
        value = getattr(args, name)
        if value is not None and value < 1:
            raise ConfigError(
                f"--{name.replace('_', '-')} must be an integer of at least 1, got {value}"
            )


def _options(args: argparse.Namespace) -> InferOptions:
    from aihpc.infer.command import InferOptions

    ms = {
        k: None if getattr(args, k) is None else getattr(args, k) / 1e3
        for k in ("latency_ms", "ttft_ms", "tpot_ms")
    }
    return InferOptions(
        scenarios=tuple(dict.fromkeys(args.scenario or ("offline", "single-stream", "server"))),
        device=args.device,
        dtype=args.dtype,
        seconds=args.seconds,
        max_batch=args.max_batch,
        server_steps=args.server_steps,
        latency=ms["latency_ms"],
        ttft=ms["ttft_ms"],
        tpot=ms["tpot_ms"],
        threads=args.threads,
        prompt_tokens=args.prompt_tokens,
        new_tokens=args.new_tokens,
        peak_seconds=args.peak_seconds,
    )


def run(args: argparse.Namespace) -> int:
    from aihpc.base.errors import VerificationFailed
    from aihpc.infer.command import infer
    from aihpc.infer.loadgen import loadgen
    from aihpc.infer.summary import summary_text

    _checked(args)
    options = _options(args)
    loadgen()
    if args.run_dir is not None:
        from aihpc.infer.source import from_run

        source = from_run(args.run_dir, args.samples)
        out = args.out or args.run_dir / "infer"
    else:
        from aihpc.cli.count import parse_shape
        from aihpc.infer.source import from_zoo

        shape = parse_shape(args.input) if args.input else None
        source = from_zoo(args.model, shape, args.samples)
        out = args.out or Path(f"infer-{args.model}")
    if out.parent != Path("") and not out.parent.is_dir():
        raise ConfigError(f"--out {out}: its folder {out.parent} does not exist")
    record = infer(
        source, options, out, say=lambda line: None if args.json else print(line, flush=True)
    )
    if args.json:
        print(json.dumps(record.data.to_dict(), sort_keys=True, indent=2))
    else:
        print(summary_text(record.data, out))
    if not record.valid:
        raise VerificationFailed(f"INVALID: {'; '.join(record.data.invalid_reasons)}")
    return 0
