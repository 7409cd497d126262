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
    from aihpc.arch.export import export_model

    exported = export_model(
        args.output,
        model=args.model,
        spec=args.spec,
        input_text=args.input,
        num_classes=args.num_classes,
        batch=args.batch,
        opset=args.opset,
        dynamo=args.dynamo,
    )
    print(exported.line())
    return 0
