"""Writing files so that a crash or a full disk never leaves half a file.

Every file aihpc writes for later reading (results, weights, reports, ONNX
models, scheduler files) goes through :func:`atomic_path`: the content is
written to a temporary file beside the target and renamed over it, so a
reader sees the old file or the new one.  A failure is a
:class:`~aihpc.base.errors.StorageError` naming the file and the reason.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

from aihpc.base.errors import AihpcError, DataError, StorageError


@contextlib.contextmanager
def atomic_path(path: Path) -> Iterator[Path]:
    """Yield a temporary path to write; on success it replaces ``path``.

    An ``OSError`` inside the block or in the rename becomes a StorageError;
    the temporary file is removed either way.
    """
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        yield tmp
        os.replace(tmp, path)
    except OSError as exc:
        raise StorageError(
            f"cannot write {path}: {' '.join((exc.strerror or str(exc)).split())}"
        ) from None
    finally:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)


@contextlib.contextmanager
def atomic_open(path: Path, mode: int = 0o644) -> Iterator[BinaryIO]:
    """A binary file to write that replaces ``path`` when the block ends (:func:`atomic_path`),
    created with ``mode``."""
    with atomic_path(path) as tmp:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
        with os.fdopen(fd, "wb") as f:
            yield f


def atomic_write(path: Path, data: bytes | str, mode: int = 0o644) -> None:
    """Write ``data`` (text as UTF-8) to ``path`` atomically, created with permissions ``mode``."""
    raw = data.encode("utf-8") if isinstance(data, str) else data
    with atomic_open(path, mode) as f:
        f.write(raw)


def open_binary(path: Path) -> BinaryIO:
    """``path`` opened to read bytes, decompressed as it is read when its name ends in ``.gz``."""
    if path.name.endswith(".gz"):
        return gzip.open(path, "rb")  # type: ignore[return-value]
    return path.open("rb")


def read_text(path: Path) -> str:
    """The UTF-8 text of ``path``, decompressed when its name ends in ``.gz``."""
    with open_binary(path) as f:
        return f.read().decode("utf-8")


def read_json(path: Path, what: str, error: type[AihpcError] = DataError) -> Any:
    """The parsed JSON of ``path`` (gzip-compressed if its name ends in ``.gz``); ``what`` names
    the file in errors (e.g. "results file").

    Missing file or invalid JSON: ``error``, :class:`DataError` for an input
    document (a result, a matcher), :class:`~aihpc.base.errors.ConfigError` where
    the caller reads a configuration file the user wrote (a candidates list);
    a file that cannot be read: :class:`StorageError`; one line each, naming
    the path.
    """
    path = Path(path)
    try:
        text = read_text(path)
    except FileNotFoundError:
        raise error(f"{what} not found: {path}") from None
    except (OSError, UnicodeDecodeError, EOFError) as exc:
        raise StorageError(f"cannot read {what} {path}: {' '.join(str(exc).split())}") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise error(
            f"{what} is not valid JSON: {path} (line {exc.lineno}, column {exc.colno}: {exc.msg})"
        ) from None


def wait_for_file(path: Path, timeout: float, poll: float = 0.1) -> bool:
    """Whether ``path`` appears within ``timeout`` seconds, looked for every ``poll`` seconds: a
    file another process writes (with :func:`atomic_write`, so it is whole once it is there),
    perhaps on another node of a shared file system."""
    deadline = time.monotonic() + timeout
    while not path.exists():
        if time.monotonic() > deadline:
            return False
        time.sleep(poll)
    return True
