"""Result files of the explaining commands: ``aihpc bench``, ``profile`` and ``roofline``.

Each command writes one JSON document (keys sorted, written atomically)::

    {"kind": "bench-operators", "schema_version": 1, "created_utc": "...",
     "environment": {...aihpc.machine.environment.collect().to_dict()...},
     "data": {...the command's own results...}}

``kind`` says which command wrote it (one of :data:`KINDS`), so ``aihpc
report`` can render any of them and a reader can refuse the wrong one.
``schema_version`` is per file format: a change a reader must know about bumps
it, and :func:`read_result` refuses versions it does not know.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from aihpc.base.errors import DataError, StorageError
from aihpc.base.fileio import atomic_write, read_json

RESULT_FILE_SCHEMA_VERSION = 1
"""The format version of these result files (results.json's is ``RESULTS_SCHEMA_VERSION``)."""

KINDS = (
    "bench-operators",
    "bench-network",
    "bench-training",
    "bench-distributed",
    "profile",
    "roofline",
    "recommend",
    "recommend-calibration",
    "recommend-validation",
    "train-to-target",
    "infer",
)


def result_document(
    kind: str, data: dict[str, Any], environment: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The versioned document for ``data``; ``environment`` defaults to this machine's."""
    from aihpc.machine.environment import collect

    if kind not in KINDS:
        raise ValueError(f"unknown result kind {kind!r}; known: {', '.join(KINDS)}")
    return {
        "kind": kind,
        "schema_version": RESULT_FILE_SCHEMA_VERSION,
        "created_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "environment": collect().to_dict() if environment is None else environment,
        "data": data,
    }


def write_result(path: Path, document: dict[str, Any]) -> Path:
    """Write a :func:`result_document` to ``path`` atomically; StorageError if it cannot."""
    path = Path(path)
    if path.parent and not path.parent.is_dir():
        raise StorageError(f"cannot write {path}: directory {path.parent} does not exist")
    atomic_write(path, json.dumps(document, sort_keys=True, indent=2, allow_nan=False) + "\n")
    return path


def read_result(path: Path, kind: str | None = None) -> dict[str, Any]:
    """A result document read back and checked; ``kind`` given: it must be that kind.

    A missing or malformed file, an unknown kind or version, a file of another
    kind than ``kind``, is a one-line :class:`DataError` naming the file (one
    that cannot be read: :class:`StorageError`).
    """
    path = Path(path)
    doc = read_json(path, "result file")
    if not isinstance(doc, dict) or not isinstance(doc.get("data"), dict):
        raise DataError(f"not an aihpc result file (no 'data' object): {path}")
    if doc.get("kind") not in KINDS:
        raise DataError(
            f"unknown result kind {doc.get('kind')!r} in {path}; known: {', '.join(KINDS)}"
        )
    if kind is not None and doc["kind"] != kind:
        raise DataError(f"{path} holds {doc['kind']} results, not {kind}")
    if doc.get("schema_version") != RESULT_FILE_SCHEMA_VERSION:
        raise DataError(
            f"unsupported schema_version {doc.get('schema_version')!r} in {path} "
            f"(this aihpc reads {RESULT_FILE_SCHEMA_VERSION})"
        )
    return doc
