"""``aihpc models``: list the model zoo with defaults and parameter counts.

The input column reads ``CxHxW`` for an image model and ``T tokens`` for a
tokens model (whose classes are its vocabulary); ``--json`` rows carry
``input_kind`` ("image" or "tokens").
"""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--json", action="store_true", help="print a JSON list of objects instead of a table"
    )


def run(args: argparse.Namespace) -> int:
    import json

    from aihpc import models

    rows = []
    for name in models.names():
        meta = models.info(name)
        rows.append(
            {
                "name": meta.name,
                "family": meta.family,
                "input_kind": meta.input_kind,
                "input_shape": list(meta.input_shape),
                "num_classes": meta.num_classes,
                "parameters": models.parameter_count(name),
                "description": meta.description,
            }
        )

    if args.json:
        print(json.dumps(rows, indent=2))
        return 0

    from rich import box
    from rich.console import Console
    from rich.table import Table

    table = Table(
        title="aihpc model zoo", box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True
    )
    table.add_column("name", style="bold", no_wrap=True)
    table.add_column("family", no_wrap=True)
    table.add_column("input", no_wrap=True)
    table.add_column("classes", justify="right", no_wrap=True)
    table.add_column("params M", justify="right", no_wrap=True)
    table.add_column("description")
    for row in rows:
        shape = "x".join(map(str, row["input_shape"]))
        if row["input_kind"] == "tokens":
            shape = f"{shape} tokens"
        table.add_row(
            row["name"],
            row["family"],
            shape,
            str(row["num_classes"]),
            f"{row['parameters'] / 1e6:.2f}",
            row["description"],
        )
    Console(soft_wrap=False).print(table)
    return 0
