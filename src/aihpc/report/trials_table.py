"""The report's trials table: every trial a row, or a large run's distributions and the trials it
kept whole (:mod:`aihpc.report.digest`)."""

from __future__ import annotations

from typing import Any

from aihpc.fmt import NA, as_number, format_fraction, format_seconds, format_si, format_value
from aihpc.report.digest_views import caption, distribution_table
from aihpc.report.markup import esc, no_data


def trial_list(results: dict[str, Any]) -> list[dict[str, Any]]:
    """The trials of ``results`` that are JSON objects, by id (those without a numeric id last)."""
    trials = [t for t in results.get("trials") or [] if isinstance(t, dict)]
    return sorted(
        trials, key=lambda t: (as_number(t.get("id")) is None, as_number(t.get("id")) or 0)
    )


def trial_count(results: dict[str, Any]) -> int:
    """Every trial of the run, listed or digested."""
    digest = results.get("digest")
    return digest["trials"] if digest else len(trial_list(results))


def trials_section(results: dict[str, Any]) -> str:
    """Every trial, one a row; a large run's distributions, then the trials it kept whole."""
    if "digest" not in results:
        return _trials_table(trial_list(results))
    kept = sorted(
        trial_list(results), key=lambda t: -(as_number(t.get("best_val_accuracy")) or -1.0)
    )
    return caption(results) + distribution_table(results["digest"]) + _trials_table(kept)


def _trials_table(trials: list[dict[str, Any]]) -> str:
    if not trials:
        return no_data("no trials ran")
    head = (
        "id",
        "parent",
        "morph",
        "params",
        "status",
        "best val acc",
        "epochs",
        "ops",
        "seconds",
        "worker",
        "hyperparameters",
    )
    rows = []
    for t in trials:
        status = str(t.get("status", NA))
        reason = t.get("reason")
        status_html = f'<span class="status st-{esc(status)}">{esc(status)}</span>'
        if reason:
            status_html += f"<br><small>{esc(reason)}</small>"
        if t.get("traceback"):
            status_html += (
                f"<details><summary>traceback</summary><pre>{esc(t['traceback'])}</pre></details>"
            )
        start, end = as_number(t.get("t_start")), as_number(t.get("t_end"))
        seconds = end - start if start is not None and end is not None else None
        logged = t.get("epochs")
        epochs = logged if isinstance(logged, list) else []
        cells = [
            f'<td class="num">{esc(format_value(t.get("id")))}</td>',
            f'<td class="num">{esc(_parent(t))}</td>',
            f"<td>{esc(format_value(t.get('morph')))}</td>",
            f'<td class="num">{esc(format_si(t.get("num_params")))}</td>',
            f"<td>{status_html}</td>",
            f'<td class="num">{esc(format_fraction(t.get("best_val_accuracy"), 2))}</td>',
            f'<td class="num">{len(epochs)}</td>',
            f'<td class="num">{esc(format_si((t.get("ops") or {}).get("total")))}</td>',
            f'<td class="num">{esc(format_seconds(seconds))}</td>',
            f"<td>{esc(format_value(t.get('worker')))}</td>",
            f"<td><small>{esc(format_value(t.get('hparams') or {}))}</small></td>",
        ]
        rows.append(f"<tr>{''.join(cells)}</tr>")
    header = "".join(f"<th>{esc(h)}</th>" for h in head)
    return f"<table><tr>{header}</tr>{''.join(rows)}</table>"


def _parent(trial: dict[str, Any]) -> str:
    """A trial's parent id, or a dash for a seed."""
    parent = trial.get("parent")
    return format_value(parent) if parent is not None else "—"
