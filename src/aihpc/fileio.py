"""Writing files so that a crash or a full disk never leaves half a file.

Every file aihpc writes for later reading (results, weights, reports, ONNX
models, scheduler files) goes through :func:`atomic_path`: the content is
written to a temporary file beside the target and renamed over it, so a
reader sees the old file or the new one.  A failure is a
:class:`~aihpc.errors.StorageError` naming the file and the reason.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

from aihpc.errors import StorageError


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
        raise StorageError(f"cannot write {path}: {' '.join((exc.strerror or str(exc)).split())}") from None
    finally:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)


def atomic_write(path: Path, data: bytes | str, mode: int = 0o644) -> None:
    """Write ``data`` (text as UTF-8) to ``path`` atomically, created with permissions ``mode``."""
    raw = data.encode("utf-8") if isinstance(data, str) else data
    with atomic_path(path) as tmp:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
        with os.fdopen(fd, "wb") as f:
            f.write(raw)
