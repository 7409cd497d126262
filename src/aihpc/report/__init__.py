"""Self-contained HTML report of an ``aihpc run`` directory.

:func:`write_report` reads ``RUN_DIR/results.json`` (any version that
:mod:`aihpc.results.read` reads), renders the plots to PNG with matplotlib's
Agg renderer, embeds them as base64 ``data:`` URIs and writes one HTML file
with inline CSS and no external references, so it opens offline.

Optional fields may be missing (no peak, empty timeline, no trials, a trial
without epochs): the report then shows "no data" notes instead of failing.
A run of more than 200 trials is reported from a digest of its trials
(:mod:`aihpc.report.digest`).
"""

from __future__ import annotations

import json
from pathlib import Path

from aihpc.base.errors import DataError
from aihpc.base.fileio import atomic_write
from aihpc.records.files import read_result_file
from aihpc.report.digest import read_for_report
from aihpc.results.read import RESULTS_FILE, results_file

REPORT_FILE = "report.html"

__all__ = ["RESULTS_FILE", "REPORT_FILE", "write_report"]


def write_report(path: Path, out: Path | None = None) -> Path:
    """Write the HTML report of a run directory or of result files; return the path written.

    ``path`` is a run directory (its ``results.json``, followed by a section
    for each ``aihpc bench`` / ``profile`` / ``roofline`` result file in it,
    and for ``aihpc infer``'s ``infer/infer.json``)
    or one such result file (a page of its own).  Writes ``out`` if given,
    else ``RUN_DIR/report.html`` or ``FILE.html`` beside the file.  Raises
    :class:`DataError` if ``path`` does not exist, a directory holds neither
    results.json nor a result file, or a file is invalid (see
    :func:`aihpc.results.read.read_results`).
    """
    from aihpc.report.documents import render_page, render_sections
    from aihpc.report.html import render_html
    from aihpc.report.plots import render_all

    path = Path(path)
    if path.is_file():
        page = render_page([read_result_file(path)], f"aihpc {path.name}")
        target = Path(out) if out is not None else path.with_suffix(".html")
    elif path.is_dir():
        files = [*sorted(path.glob("*.json")), *path.glob("infer/infer.json")]  # aihpc infer's
        documents = [read_result_file(f) for f in files if _is_result_document(f)]
        if documents and not results_file(path).exists():
            page = render_page(documents, f"aihpc {path.name}")
        else:
            results = read_for_report(results_file(path))
            page = render_html(results, render_all(results), extra=render_sections(documents))
        target = Path(out) if out is not None else path / REPORT_FILE
    else:
        raise DataError(f"run directory or result file not found: {path}")
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
