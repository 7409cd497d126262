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

    from aihpc.models.listing import zoo, zoo_table

    entries = zoo()
    if args.json:
        print(json.dumps([e.to_dict() for e in entries], indent=2))
    else:
        print(zoo_table(entries))
    return 0
