"""The one way aihpc's result documents become bytes and come back: typed records, msgspec.

Every document aihpc writes for later reading (``results.json``, ``infer.json``,
the result files of bench, profile, roofline, recommend and train-to-target) is
a tree of :class:`Record`\\ s: frozen, keyword-built ``msgspec.Struct``\\ s whose
fields are the document's keys.  :func:`encode` writes one (keys sorted);
:func:`decode` reads bytes into one and :func:`convert` an already-parsed
object, checking every field's type on the way; :func:`record_schema` is the
JSON Schema of one (docs/reference/schema/).  benchmarks/records_decode.py
measured msgspec against the standard library and pydantic.

A field's type says which of three ways a document holds it, and a record
reads back exactly what was written (``convert(doc, T).to_dict() == doc``):

* required (no default): always written, ``null`` where its type allows None;
* ``X | None = None``: absent or a value, never ``null`` (absent in files from
  before the field, or where it does not apply); ``None`` is written as absent;
* ``X | None | UnsetType = UNSET``: absent, ``null`` or a value, each meaning
  something (a field added later that may be ``null``); UNSET is falsy, so
  ``if record.field:`` tests for a value.

A document that does not match its record is a :class:`DataError` of one line
naming the file, the field's path and the problem
(``results file r/results.json: trials[3].epochs[0].attempt: expected int, got
str``).  Checks a record makes of its values (``__post_init__``) raise
``ValueError`` so that the path comes with them.
"""

from __future__ import annotations

import contextlib
import gc
import inspect
import math
import re
from collections.abc import Iterator
from typing import Any, TypeVar, overload

import msgspec
from msgspec import UNSET, UnsetType

from aihpc.base.errors import DataError

__all__ = [
    "UNSET",
    "Record",
    "UnsetType",
    "convert",
    "decode",
    "encode",
    "exact",
    "record_schema",
    "value_or_none",
]

T = TypeVar("T")


_ENCODER = msgspec.json.Encoder(order="sorted")


class Record(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True, gc=False):
    """A record of a result document (the module docstring): frozen, built by keyword, a field
    equal to its default (None, UNSET) left out when written; not tracked by the cycle collector
    (a record holds values and other records, never itself)."""

    def to_dict(self) -> dict[str, Any]:
        """The record as the JSON object it is written as (keys sorted)."""
        return _to_builtins(self)  # type: ignore[no-any-return]


def _to_builtins(value: Any) -> Any:
    """``value`` as the JSON-like builtins it is written as (tuples as lists)."""
    return msgspec.json.decode(_ENCODER.encode(value))


def encode(value: Any) -> bytes:
    """``value`` (a record, or JSON-like builtins holding records) as compact JSON, keys
    sorted."""
    return _ENCODER.encode(value)


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """Python's cycle collector paused while a document is decoded (records and the JSON values
    in them hold no cycles; refcounting frees them): decoding millions of objects otherwise
    triggers a collection every few hundred of them, which took most of the time
    (benchmarks/records_decode.py)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


@overload
def decode(data: bytes | str, kind: type[T], what: str, at: str = "") -> T: ...
@overload
def decode(data: bytes | str, kind: Any, what: str, at: str = "") -> Any: ...
def decode(data: bytes | str, kind: Any, what: str, at: str = "") -> Any:
    """``data``, a JSON document, as a ``kind``; DataError (one line: ``what``, the field's path
    from ``at``, the document's place in the file, and the problem) where it is not JSON or not a
    ``kind``."""
    try:
        with gc_paused():
            return msgspec.json.decode(data, type=kind)
    except msgspec.ValidationError as exc:
        raise DataError(f"{what}: {problem(exc, at)}") from None
    except msgspec.DecodeError as exc:
        where = f"{at}: " if at else ""
        raise DataError(f"{what}: {where}not valid JSON ({_where(exc, data)})") from None


@overload
def convert(value: Any, kind: type[T], what: str, at: str = "") -> T: ...
@overload
def convert(value: Any, kind: Any, what: str, at: str = "") -> Any: ...
def convert(value: Any, kind: Any, what: str, at: str = "") -> Any:
    """``value`` (parsed JSON: dicts, lists, numbers, strings) as a ``kind``; DataError as
    :func:`decode`."""
    try:
        with gc_paused():
            return msgspec.convert(value, kind)
    except msgspec.ValidationError as exc:
        raise DataError(f"{what}: {problem(exc, at)}") from None


@overload
def exact(value: Any, kind: type[T], what: str) -> T: ...
@overload
def exact(value: Any, kind: Any, what: str) -> Any: ...
def exact(value: Any, kind: Any, what: str) -> Any:
    """``value`` (what a producer measured, as JSON-like builtins) as a ``kind`` that keeps every
    bit of it: DataError naming the first field the record would drop or change (a field its
    producer gained that the record lacks), and as :func:`convert` for one of the wrong type.
    What a writer checks the sections it copies with.  A number that is not finite (JSON has
    none) is refused too, naming its field."""
    bad = _non_finite(value, "")
    if bad is not None:
        raise DataError(
            f"{what}: {bad[0].lstrip('.') or 'the value'}: not a finite number ({bad[1]})"
        )
    record = convert(value, kind, what)
    written = _to_builtins(record)
    plain = msgspec.json.decode(msgspec.json.encode(value))
    if written != plain:
        path, detail = _first_difference(plain, written, "")
        raise DataError(f"{what}: {path.lstrip('.') or 'the value'}: {detail}")
    return record


def _non_finite(value: Any, path: str) -> tuple[str, float] | None:
    """The first number in ``value`` (JSON-like builtins) that is not finite, with its path."""
    if isinstance(value, float) and not math.isfinite(value):
        return path, value
    if isinstance(value, dict):
        items: Any = ((f"{path}.{k}", v) for k, v in value.items())
    elif isinstance(value, list | tuple):
        items = ((f"{path}[{i}]", v) for i, v in enumerate(value))
    else:
        return None
    for at, item in items:
        found = _non_finite(item, at)
        if found is not None:
            return found
    return None


def _first_difference(given: Any, kept: Any, path: str) -> tuple[str, str]:
    """Where ``kept`` (a record's builtins) first differs from ``given``, and how."""
    if isinstance(given, dict) and isinstance(kept, dict):
        for key in sorted(given.keys() | kept.keys(), key=str):
            if key not in kept:
                return f"{path}.{key}", "the record has no such field"
            if key not in given:
                return f"{path}.{key}", "the record adds it"
            if given[key] != kept[key]:
                return _first_difference(given[key], kept[key], f"{path}.{key}")
    if isinstance(given, list) and isinstance(kept, list) and len(given) == len(kept):
        for i, (a, b) in enumerate(zip(given, kept, strict=True)):
            if a != b:
                return _first_difference(a, b, f"{path}[{i}]")
    return path, f"the record keeps {kept!r} of {given!r}"


_AT = re.compile(r"^(?P<message>.*) - at `\$(?P<path>[^`]*)`$", re.DOTALL)


def problem(exc: msgspec.ValidationError, at: str = "") -> str:
    """msgspec's ``Expected `int`, got `str` - at `$.trials[0].id``` as
    ``trials[0].id: expected int, got str``, on one line; ``at`` is put before the path."""
    text = " ".join(str(exc).split())
    match = _AT.match(text)
    message, path = (match["message"], match["path"]) if match else (text, "")
    path = (at + path).lstrip(".")
    message = message.replace("`", "")
    message = message[:1].lower() + message[1:]
    return f"{path}: {message}" if path else message


def _where(exc: msgspec.DecodeError, data: bytes | str) -> str:
    """msgspec's decode error with the line and column of its byte offset, where it gives one."""
    text = " ".join(str(exc).split())
    raw = data.encode() if isinstance(data, str) else data
    match = re.search(r"\(byte (\d+)\)", text)
    if match is None:
        if "truncated" in text:  # msgspec names no place: the end
            return f"cut short after {len(raw)} bytes"
        return text
    offset = int(match[1])
    line = raw.count(b"\n", 0, offset) + 1
    column = offset - (raw.rfind(b"\n", 0, offset) + 1) + 1
    return f"line {line}, column {column}: {text[: match.start()].strip()}"


def value_or_none(value: T | UnsetType) -> T | None:
    """A field that may be unset, as its value or None."""
    return None if isinstance(value, UnsetType) else value


def record_schema(kind: Any) -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of documents of record type ``kind``; each description (a
    record's docstring) is cleaned as :func:`inspect.cleandoc` cleans it, whether or not the
    msgspec release has done so already, so that every release writes the same schema."""
    schema: dict[str, Any] = _clean_descriptions(msgspec.json.schema(kind))
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", **schema}


def _clean_descriptions(node: Any) -> Any:
    if isinstance(node, dict):
        return {
            key: inspect.cleandoc(value)
            if key == "description" and isinstance(value, str)
            else _clean_descriptions(value)
            for key, value in node.items()
        }
    if isinstance(node, list):
        return [_clean_descriptions(value) for value in node]
    return node
