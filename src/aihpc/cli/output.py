"""Options and output shared by the commands that write a result file (bench, profile, roofline).

Each writes a versioned JSON document (:mod:`aihpc.records.files`) to
``--out`` and prints a readable table, or, with ``--json``, the document.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from aihpc.records.codec import Record


def add_output_arguments(parser: argparse.ArgumentParser, default_out: str) -> None:
    parser.add_argument(
        "--out",
        metavar="FILE",
        type=Path,
        default=Path(default_out),
        help=f"the versioned JSON result file (default: {default_out})",
    )
    parser.add_argument(
        "--json", action="store_true", help="print the JSON document instead of the table"
    )


def emit(args: argparse.Namespace, kind: str, data: Record, table: str) -> int:
    """Write ``data``, the kind's record, as a ``kind`` result to ``args.out``; print ``table``
    (or the document)."""
    from aihpc.records.files import result_document, write_result

    doc = result_document(kind, data)
    write_result(args.out, doc)
    if args.json:
        print(json.dumps(doc.to_dict(), sort_keys=True, indent=2))
    else:
        print(table)
        print(f"results: {args.out}")
    return 0
