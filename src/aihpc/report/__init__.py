"""Self-contained HTML report of an ``aihpc run`` directory.

:func:`write_report` reads ``RUN_DIR/results.json`` (``schema_version`` 1
or 2, as written by ``aihpc run``; version 1 is upgraded when read), renders the plots to PNG with
matplotlib's
Agg renderer, embeds them as base64 ``data:`` URIs and writes one HTML file
with inline CSS and no external references, so it opens offline.

Optional fields may be missing (no peak, empty timeline, no trials, a trial
without epochs): the report then shows "no data" notes instead of failing.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from aihpc.errors import ConfigError
from aihpc.fileio import atomic_write, read_json
from aihpc.records.files import read_result

#: The ``schema_version`` values of results.json this module reads.
SUPPORTED_SCHEMA_VERSIONS = (1, 2)

RESULTS_FILE = "results.json"
REPORT_FILE = "report.html"

__all__ = [
    "RESULTS_FILE",
    "REPORT_FILE",
    "SUPPORTED_SCHEMA_VERSIONS",
    "load_results",
    "write_report",
]

# top-level key -> the JSON type it must have when present
_SHAPES: dict[str, type] = {
    "config": dict,
    "environment": dict,
    "peak": dict,
    "score": dict,
    "timeline": list,
    "workers": list,
    "trials": list,
    "segments": list,
}


def load_results(path: Path) -> dict[str, Any]:
    """Parse and check a results.json file.

    Raises :class:`ConfigError` (one line, naming the path or the version) when
    the file is missing or unreadable, is not valid JSON, is not a JSON object,
    has an unsupported ``schema_version``, or a top-level section has the wrong
    type (e.g. ``trials`` not a list, a trial not an object).
    """
    path = Path(path)
    results = read_json(path, "results file")
    if not isinstance(results, dict):
        raise ConfigError(
            f"results file must hold a JSON object, got {type(results).__name__}: {path}"
        )
    version = results.get("schema_version")
    if isinstance(version, bool) or version not in SUPPORTED_SCHEMA_VERSIONS:
        supported = ", ".join(str(v) for v in SUPPORTED_SCHEMA_VERSIONS)
        raise ConfigError(
            f"unsupported results schema_version {version!r} in {path} (supported: {supported})"
        )
    for key, kind in _SHAPES.items():
        value = results.get(key)
        if value is not None and not isinstance(value, kind):
            raise ConfigError(
                f"results field {key!r} must be a JSON {'object' if kind is dict else 'array'}, "
                f"got {type(value).__name__}: {path}"
            )
    for index, trial in enumerate(results.get("trials") or []):
        if not isinstance(trial, dict):
            raise ConfigError(
                f"results trials[{index}] must be a JSON object, got {type(trial).__name__}: {path}"
            )
    return _upgrade(results)


def _upgrade(results: dict[str, Any]) -> dict[str, Any]:
    """The results in the current schema: version 1 called a trial's parameter count ``params``."""
    if results["schema_version"] == 1:
        for trial in results.get("trials") or []:
            if "params" in trial:
                trial["num_params"] = trial.pop("params")
        results["schema_version"] = 2
    return results


def write_report(path: Path, out: Path | None = None) -> Path:
    """Write the HTML report of a run directory or of result files; return the path written.

    ``path`` is a run directory (its ``results.json``, followed by a section
    for each ``aihpc bench`` / ``profile`` / ``roofline`` result file in it)
    or one such result file (a page of its own).  Writes ``out`` if given,
    else ``RUN_DIR/report.html`` or ``FILE.html`` beside the file.  Raises
    :class:`ConfigError` if ``path`` does not exist, a directory holds neither
    results.json nor a result file, or a file is invalid (see :func:`load_results`).
    """
    from aihpc.report.documents import render_page, render_sections
    from aihpc.report.html import render_html
    from aihpc.report.plots import render_all

    path = Path(path)
    if path.is_file():
        page = render_page([read_result(path)], f"aihpc {path.name}")
        target = Path(out) if out is not None else path.with_suffix(".html")
    elif path.is_dir():
        documents = [read_result(f) for f in sorted(path.glob("*.json")) if _is_result_document(f)]
        if documents and not (path / RESULTS_FILE).exists():
            page = render_page(documents, f"aihpc {path.name}")
        else:
            results = load_results(path / RESULTS_FILE)
            page = render_html(results, render_all(results), extra=render_sections(documents))
        target = Path(out) if out is not None else path / REPORT_FILE
    else:
        raise ConfigError(f"run directory or result file not found: {path}")
    atomic_write(target, page)
    return target


def _is_result_document(path: Path) -> bool:
    """A JSON file in a run directory that a bench, profile or roofline command wrote (by its
    ``kind``)."""
    from aihpc.records.files import KINDS

    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return False
    return isinstance(doc, dict) and doc.get("kind") in KINDS
