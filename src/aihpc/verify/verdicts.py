"""Verdicts of ``aihpc verify``, kept outside the run directory under the content they checked.

Verification reads a run directory and writes nothing into it.  Its verdict
(yes, no or unchecked) is recorded in the user's cache instead, in
``verdicts/`` under ``$AIHPC_CACHE_DIR``, else ``$XDG_CACHE_HOME/aihpc``,
else ``~/.cache/aihpc``, named by the run's *fingerprint*: the SHA-256 of
the files verification reads (the store and its write-ahead log,
results.json and the MLPerf log, their names, sizes and bytes) and of the
aihpc and torch versions that checked them.  ``aihpc rank`` shows a recorded
verdict when the fingerprint is the same, and verifies the run otherwise:
hashing reads about 1 GB a second, seconds for a run whose verification
takes minutes.  A change to any byte of those files, or another aihpc or
torch, is another fingerprint; a record that cannot be read counts as none;
a cache that cannot be written costs only the reuse.
"""

from __future__ import annotations

import hashlib
import json
import os
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path

from aihpc.base.fileio import atomic_write
from aihpc.results.read import results_file
from aihpc.verify.checks import Verification

CHECKED_FILES = ("aihpc.sqlite", "aihpc.sqlite-wal", "mlperf.log")
"""The files of a run directory that verification reads, besides results.json."""
STATUSES = ("yes", "no", "unchecked")
CHUNK = 1 << 20


def cache_dir() -> Path:
    """Where verdicts are kept (see the module docstring)."""
    explicit = os.environ.get("AIHPC_CACHE_DIR")
    if explicit:
        return Path(explicit) / "verdicts"
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg) if xdg else Path.home() / ".cache"
    return base / "aihpc" / "verdicts"


def _versions() -> str:
    import aihpc

    try:
        torch = metadata.version("torch")
    except metadata.PackageNotFoundError:
        torch = "none"
    return f"aihpc {aihpc.__version__}, torch {torch}"


def fingerprint(run_dir: Path) -> str:
    """The SHA-256 of what verifying ``run_dir`` reads, and of the versions that would read it."""
    run_dir = Path(run_dir)
    digest = hashlib.sha256(f"aihpc verdict\0{_versions()}\0".encode())
    base, paths = checked_paths(run_dir)
    for path in paths:
        name = path.relative_to(base) if path.is_relative_to(base) else path
        digest.update(f"{name}\0".encode())
        try:
            with open(path, "rb") as f:
                digest.update(f"{os.fstat(f.fileno()).st_size}\0".encode())
                while chunk := f.read(CHUNK):
                    digest.update(chunk)
        except OSError:  # absent, or not a run directory: verification says which
            digest.update(b"absent\0")
    return digest.hexdigest()


def checked_paths(path: Path) -> tuple[Path, list[Path]]:
    """The folder verification reads and the files in it it checks: a run's store, MLPerf log
    and results.json; an inference result's infer.json and LoadGen's logs, and where it served
    a run's trial, that run's results.json and store (its quality is measured again)."""
    from aihpc.verify.infer import checked_files, infer_folder

    folder = infer_folder(path)
    if folder is None:
        return path, [*(path / name for name in CHECKED_FILES), results_file(path)]
    files = checked_files(folder)
    from aihpc.verify.infer_model import source_run

    run = source_run(folder)
    if run is not None:
        files += [results_file(run), run / "aihpc.sqlite", run / "aihpc.sqlite-wal"]
    return folder, files


def verify_and_record(run_dir: Path, key: str | None = None) -> Verification:
    """``aihpc verify`` on ``run_dir``, its verdict recorded under ``key``: the fingerprint of the
    bytes it checks, taken first (here, unless the caller took it already)."""
    from aihpc.verify.recount import verify_run

    key = key or fingerprint(run_dir)
    result = verify_run(run_dir)
    record(key, result)
    return result


def recorded(key: str) -> str | None:
    """The verdict recorded under fingerprint ``key``; None where there is none to trust."""
    try:
        status = json.loads((cache_dir() / f"{key}.json").read_text(encoding="utf-8"))["status"]
    except (OSError, ValueError, TypeError, KeyError):
        return None
    return status if status in STATUSES else None


def record(key: str, verification: Verification) -> None:
    """Keep ``verification``'s verdict under fingerprint ``key`` (nothing, if the cache cannot
    be written: the verdict was printed, only its reuse is lost)."""
    entry = {
        "status": verification.status,
        "run_dir": str(Path(verification.run_dir).resolve()),
        "versions": _versions(),
        "verified_at": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    try:
        cache_dir().mkdir(parents=True, exist_ok=True)
        atomic_write(cache_dir() / f"{key}.json", json.dumps(entry, sort_keys=True) + "\n")
    except OSError:
        pass
