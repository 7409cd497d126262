"""Result files of the explaining commands: ``aihpc bench``, ``profile``, ``roofline``,
``recommend``, ``workloads`` (train-to-target) and ``infer``.

Each command writes one JSON document (keys sorted, written atomically)::

    {"kind": "bench-operators", "schema_version": 1, "created_utc": "...",
     "environment": {...aihpc.machine.environment.collect().to_dict()...},
     "data": {...the command's own results...}}

``kind`` says which command wrote it (one of :data:`KINDS`), so ``aihpc
report`` can render any of them and a reader can refuse the wrong one.
``schema_version`` is per file format: a change a reader must know about bumps
it, and a reader refuses versions it does not know.

Each kind is a record (:class:`ResultFile`'s subclasses: ``kind`` chooses
which), its ``data`` the kind's own record (:mod:`aihpc.records.kinds`,
:class:`aihpc.records.inference.InferData`; :data:`DATA` by kind).  A command
builds its kind's data record from what it measured; :func:`result_document`
wraps it in a document (checking that every number is finite and that the
record's checks hold); :func:`write_result` writes it; :func:`read_result_file`
reads one back, checked field by field.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import msgspec

from aihpc.base.errors import DataError, StorageError
from aihpc.base.fileio import atomic_write, read_text
from aihpc.records.codec import Record, decode, encode, exact
from aihpc.records.environment import EnvironmentRecord
from aihpc.records.inference import InferData
from aihpc.records.kinds import (
    BenchDistributedData,
    BenchNetworkData,
    BenchOperatorsData,
    BenchTrainingData,
    CalibrationData,
    ProfileData,
    RecommendData,
    RooflineData,
    TrainToTargetData,
    ValidationData,
)

RESULT_FILE_SCHEMA_VERSION = 1
"""The format version of these result files (results.json's is ``RESULTS_SCHEMA_VERSION``)."""


class ResultFile(Record, tag_field="kind", frozen=True):
    """A result file: its kind (the tag), format version, when and where it was made, and its
    ``data`` (each kind's subclass types it)."""

    schema_version: int
    created_utc: str
    environment: EnvironmentRecord
    data: Any

    def kind(self) -> str:
        """The kind of result it is (one of :data:`KINDS`), as its file names it."""
        return str(self.__struct_config__.tag)


class BenchOperatorsFile(ResultFile, tag="bench-operators", frozen=True):
    data: BenchOperatorsData


class BenchNetworkFile(ResultFile, tag="bench-network", frozen=True):
    data: BenchNetworkData


class BenchTrainingFile(ResultFile, tag="bench-training", frozen=True):
    data: BenchTrainingData


class BenchDistributedFile(ResultFile, tag="bench-distributed", frozen=True):
    data: BenchDistributedData


class ProfileFile(ResultFile, tag="profile", frozen=True):
    data: ProfileData


class RooflineFile(ResultFile, tag="roofline", frozen=True):
    data: RooflineData


class RecommendFile(ResultFile, tag="recommend", frozen=True):
    data: RecommendData


class CalibrationFile(ResultFile, tag="recommend-calibration", frozen=True):
    data: CalibrationData


class ValidationFile(ResultFile, tag="recommend-validation", frozen=True):
    data: ValidationData


class TrainToTargetFile(ResultFile, tag="train-to-target", frozen=True):
    data: TrainToTargetData


class InferFile(ResultFile, tag="infer", frozen=True):
    data: InferData


#: Each kind's record, by kind.
FILES: dict[str, type[ResultFile]] = {
    str(cls.__struct_config__.tag): cls
    for cls in (
        BenchOperatorsFile,
        BenchNetworkFile,
        BenchTrainingFile,
        BenchDistributedFile,
        ProfileFile,
        RooflineFile,
        RecommendFile,
        CalibrationFile,
        ValidationFile,
        TrainToTargetFile,
        InferFile,
    )
}
KINDS = tuple(FILES)
#: What a kind's ``data`` is: a record, or train-to-target's summary (frozen dataclasses that
#: msgspec reads and writes as it does records).
KindData = Record | TrainToTargetData
#: Each kind's ``data`` type, by kind.
DATA: dict[str, type[KindData]] = {
    kind: next(f.type for f in msgspec.structs.fields(cls) if f.name == "data")
    for kind, cls in FILES.items()
}


class _Header(msgspec.Struct):
    """What a reader checks before the rest: the kind and the version."""

    kind: Any = None
    schema_version: Any = None
    data: msgspec.Raw = msgspec.Raw(b"null")


def result_document(
    kind: str, data: KindData, environment: dict[str, Any] | None = None
) -> ResultFile:
    """The versioned document of ``kind`` for ``data``, the kind's record as its command built it
    (DataError naming the field where it is not one: a number that is not finite, a value its
    record's checks refuse); ``environment`` defaults to this machine's."""
    from aihpc.machine.environment import collect

    if kind not in FILES:
        raise ValueError(f"unknown result kind {kind!r}; known: {', '.join(KINDS)}")
    expected = DATA[kind]
    if not isinstance(data, expected):
        raise TypeError(f"a {kind} result's data is a {expected.__name__}, not {type(data)!r}")
    values = {
        "kind": kind,
        "schema_version": RESULT_FILE_SCHEMA_VERSION,
        "created_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "environment": collect().to_dict() if environment is None else environment,
        "data": msgspec.to_builtins(data),
    }
    document: ResultFile = exact(values, FILES[kind], f"a {kind} result")
    return document


def write_result(path: Path, document: ResultFile) -> Path:
    """Write a :func:`result_document` to ``path`` atomically (indented, keys sorted);
    StorageError if it cannot."""
    path = Path(path)
    if path.parent and not path.parent.is_dir():
        raise StorageError(f"cannot write {path}: directory {path.parent} does not exist")
    atomic_write(path, msgspec.json.format(encode(document), indent=2) + b"\n")
    return path


def read_result_file(path: Path, kind: str | None = None) -> ResultFile:
    """The result file at ``path``, checked; ``kind`` given: it must be that kind.

    A missing or malformed file, an unknown kind or version, a file of another
    kind than ``kind``, a field that is not its record's, is a one-line
    :class:`DataError` naming the file (one that cannot be read:
    :class:`StorageError`).
    """
    path = Path(path)
    what = f"result file {path}"
    try:
        text = read_text(path)
    except FileNotFoundError:
        raise DataError(f"result file not found: {path}") from None
    except (OSError, UnicodeDecodeError, EOFError) as exc:
        raise StorageError(
            f"cannot read result file {path}: {' '.join(str(exc).split())}"
        ) from None
    header = decode(text, _Header, what)
    if not bytes(header.data).startswith(b"{"):
        raise DataError(f"not an aihpc result file (no 'data' object): {path}")
    if header.kind not in FILES:
        raise DataError(f"unknown result kind {header.kind!r} in {path}; known: {', '.join(KINDS)}")
    if kind is not None and header.kind != kind:
        raise DataError(f"{path} holds {header.kind} results, not {kind}")
    if header.schema_version != RESULT_FILE_SCHEMA_VERSION:
        raise DataError(
            f"unsupported schema_version {header.schema_version!r} in {path} "
            f"(this aihpc reads {RESULT_FILE_SCHEMA_VERSION})"
        )
    document: ResultFile = decode(text, FILES[header.kind], what)
    return document
