"""``aihpc export``: write a zoo model or an architecture spec as ONNX.

aihpc export --model resnet18 [--input 3x224x224] [--batch 1] [--num-classes K] OUT.onnx
aihpc export --model lstm_lm [--input 35] ... OUT.onnx     (tokens model: --input is T)
aihpc export --spec SPEC.json OUT.onnx
"""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--model", metavar="NAME", help="a zoo model (see `aihpc models`)")
    source.add_argument("--spec", metavar="SPEC.json", help="an architecture spec file (aihpc.nas)")
    parser.add_argument(
        "--input",
        metavar="CxHxW",
        help="input shape of one image, e.g. 3x224x224 (default: the model's); "
        "a different C changes the model's first layer; for a tokens model "
        "the sequence length T, e.g. 35",
    )
    parser.add_argument(
        "--batch",
        type=int,
        default=1,
        metavar="N",
        help="batch size used for tracing; the file's batch dimension stays dynamic (default: 1)",
    )
    parser.add_argument(
        "--num-classes",
        type=int,
        metavar="K",
        help="number of output classes for --model (default: the model's)",
    )
    parser.add_argument(
        "--opset",
        type=int,
        metavar="N",
        help="ONNX opset version (default: the exporter's, 20 for TorchScript)",
    )
    parser.add_argument(
        "--dynamo",
        action="store_true",
        help="use the torch.export-based exporter (slower; opset >= 18)",
    )
    parser.add_argument("output", metavar="OUT.onnx", help="file to write")


def run(args: argparse.Namespace) -> int:
    from aihpc.errors import ConfigError
    from aihpc.export import export_onnx, onnx_opset, parse_input_shape, parse_sequence_length

    vocab = None
    if args.spec is not None:
        shape = parse_input_shape(args.input) if args.input is not None else None
        if args.num_classes is not None:
            raise ConfigError("--num-classes applies to --model only; a spec fixes its own classes")
        from aihpc.nas.build import SpecNet
        from aihpc.nas.spec import ArchSpec

        spec = ArchSpec.load(args.spec)
        if shape is not None and shape != tuple(spec.input_shape):
            raise ConfigError(
                f"--input {args.input} does not match the spec's input shape "
                f"{'x'.join(map(str, spec.input_shape))}"
            )
        model = SpecNet(spec)
        shape = tuple(spec.input_shape)
        source = args.spec
    else:
        from aihpc import models

        meta = models.info(args.model)
        if meta.input_kind == "tokens":
            shape = (
                parse_sequence_length(args.input) if args.input is not None else meta.input_shape
            )
            model = models.create(args.model, num_classes=args.num_classes)
            vocab = meta.num_classes if args.num_classes is None else args.num_classes
        else:
            shape = parse_input_shape(args.input) if args.input is not None else meta.input_shape
            model = models.create(args.model, num_classes=args.num_classes, in_channels=shape[0])
        source = args.model

    path = export_onnx(
        model,
        args.output,
        shape,
        batch=args.batch,
        opset=args.opset,
        dynamo=args.dynamo,
        vocab=vocab,
    )
    size_mb = path.stat().st_size / 1e6
    print(
        f"{path}  {size_mb:.2f} MB  opset {onnx_opset(path)}  "
        f"input Nx{'x'.join(map(str, shape))}  ({source})"
    )
    return 0
