"""The report's trials table: every trial a row, or a large run's distributions and the trials it
kept whole (:mod:`aihpc.report.digest`)."""

from __future__ import annotations

from typing import Any

from aihpc.base.fmt import NA, as_number, format_fraction, format_seconds, format_si, format_value
from aihpc.report.digest_views import caption, distribution_table
from aihpc.report.markup import esc, no_data
from aihpc.report.quality import quality_for
from aihpc.scoring.quality import ReportQuality


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
    """Every trial, one a row; a large run's distributions, then the trials it kept whole, best
    first."""
    quality = quality_for(results)
    if "digest" not in results:
        return _trials_table(trial_list(results), quality)
    kept = sorted(trial_list(results), key=lambda t: _rank(t, quality))
    return (
        caption(results, quality)
        + distribution_table(results["digest"], quality)
        + _trials_table(kept, quality)
    )


def _rank(trial: dict[str, Any], quality: ReportQuality) -> float:
    """Sorts trials best first, those without a value last."""
    value = quality.value(trial)
    return float("inf") if value is None else -quality.goodness(value)


def _trials_table(trials: list[dict[str, Any]], quality: ReportQuality) -> str:
    """The trials, a row each; a language-model run's rows add the next-token accuracy."""
    if not trials:
        return no_data("no trials ran")
    next_token = quality.epoch_accuracy
    head = ["id", "parent", "morph", "params", "status", quality.column]
    head += ["next-token acc"] if next_token else []
    head += ["epochs", "ops", "seconds", "worker", "hyperparameters"]
    rows = []
    for t in trials:
        start, end = as_number(t.get("t_start")), as_number(t.get("t_end"))
        seconds = end - start if start is not None and end is not None else None
        cells = [
            f'<td class="num">{esc(format_value(t.get("id")))}</td>',
            f'<td class="num">{esc(_parent(t))}</td>',
            f"<td>{esc(format_value(t.get('morph')))}</td>",
            f'<td class="num">{esc(format_si(t.get("num_params")))}</td>',
            f"<td>{_status_html(t)}</td>",
            f'<td class="num">{esc(quality.cell(t.get(quality.trial_key)))}</td>',
        ]
        if next_token:
            accuracy = next_token_accuracy(t, quality)
            cells.append(f'<td class="num">{esc(format_fraction(accuracy, 1))}</td>')
        cells += [
            f'<td class="num">{len(_epochs(t))}</td>',
            f'<td class="num">{esc(format_si((t.get("ops") or {}).get("total")))}</td>',
            f'<td class="num">{esc(format_seconds(seconds))}</td>',
            f"<td>{esc(format_value(t.get('worker')))}</td>",
            f"<td><small>{esc(format_value(t.get('hparams') or {}))}</small></td>",
        ]
        rows.append(f"<tr>{''.join(cells)}</tr>")
    header = "".join(f"<th>{esc(h)}</th>" for h in head)
    return f"<table><tr>{header}</tr>{''.join(rows)}</table>"


def _status_html(trial: dict[str, Any]) -> str:
    """A trial's status, the reason it ended, and its traceback folded."""
    status = str(trial.get("status", NA))
    reason = trial.get("reason")
    status_html = f'<span class="status st-{esc(status)}">{esc(status)}</span>'
    if reason:
        status_html += f"<br><small>{esc(reason)}</small>"
    if trial.get("traceback"):
        status_html += (
            f"<details><summary>traceback</summary><pre>{esc(trial['traceback'])}</pre></details>"
        )
    return status_html


def _epochs(trial: dict[str, Any]) -> list[Any]:
    logged = trial.get("epochs")
    return logged if isinstance(logged, list) else []


def next_token_accuracy(trial: dict[str, Any], quality: ReportQuality) -> float | None:
    """A language model's next-token accuracy (the epochs' ``val_accuracy``, not the quality) in
    the epoch of its best ``quality`` value; None where no epoch holds both."""
    epochs = [e for e in _epochs(trial) if isinstance(e, dict)]
    epochs = [e for e in epochs if as_number(e.get("val_accuracy")) is not None]
    best = quality.best(epochs, lambda e: as_number(e.get(quality.epoch_key)))
    return as_number(best.get("val_accuracy")) if best is not None else None


def _parent(trial: dict[str, Any]) -> str:
    """A trial's parent id, or a dash for a seed."""
    parent = trial.get("parent")
    return format_value(parent) if parent is not None else "—"
