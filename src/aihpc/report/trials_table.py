"""The report's trials table: every trial a row, or a large run's distributions and the trials it
kept whole (:mod:`aihpc.report.digest`)."""

from __future__ import annotations

from collections.abc import Sequence

from aihpc.base.fmt import format_fraction, format_seconds, format_si, format_value
from aihpc.report.digest import ReportRun
from aihpc.report.digest_views import caption, distribution_table
from aihpc.report.markup import esc, no_data
from aihpc.results.trial import TrialRecord
from aihpc.tasks.quality import ReportQuality


def trials_section(run: ReportRun) -> str:
    """Every trial, one a row; a large run's distributions, then the trials it kept whole, best
    first."""
    quality = run.quality
    if run.digest is None:
        return _trials_table(run.trials, quality)
    kept = sorted(run.trials, key=lambda t: _rank(t, quality))
    return (
        caption(run.digest, len(kept))
        + distribution_table(run.digest)
        + _trials_table(kept, quality)
    )


def _rank(trial: TrialRecord, quality: ReportQuality) -> float:
    """Sorts trials best first, those without a value last."""
    value = trial.best(quality.trial_key)
    return float("inf") if value is None else -quality.goodness(value)


def _trials_table(trials: Sequence[TrialRecord], quality: ReportQuality) -> str:
    """The trials, a row each; a language-model run's rows add the next-token accuracy."""
    if not trials:
        return no_data("no trials ran")
    next_token = quality.epoch_accuracy
    head = ["id", "parent", "morph", "params", "status", quality.column]
    head += ["next-token acc"] if next_token else []
    head += ["epochs", "ops", "seconds", "worker", "hyperparameters"]
    rows = []
    for t in trials:
        cells = [
            f'<td class="num">{t.id}</td>',
            f'<td class="num">{"—" if t.parent is None else t.parent}</td>',
            f"<td>{esc(t.morph)}</td>",
            f'<td class="num">{esc(format_si(t.num_params))}</td>',
            f"<td>{_status_html(t)}</td>",
            f'<td class="num">{esc(quality.cell(t.best(quality.trial_key)))}</td>',
        ]
        if next_token:
            accuracy = next_token_accuracy(t, quality)
            cells.append(f'<td class="num">{esc(format_fraction(accuracy, 1))}</td>')
        cells += [
            f'<td class="num">{len(t.epochs)}</td>',
            f'<td class="num">{esc(format_si(t.ops.total))}</td>',
            f'<td class="num">{esc(format_seconds(trial_seconds(t)))}</td>',
            f"<td>{esc(format_value(t.worker))}</td>",
            f"<td><small>{esc(hparams_text(t))}</small></td>",
        ]
        rows.append(f"<tr>{''.join(cells)}</tr>")
    header = "".join(f"<th>{esc(h)}</th>" for h in head)
    return f"<table><tr>{header}</tr>{''.join(rows)}</table>"


def trial_seconds(trial: TrialRecord) -> float | None:
    """A trial's wall time, first start to last end; None where either is not recorded."""
    if trial.t_start is None or trial.t_end is None:
        return None
    return trial.t_end - trial.t_start


def hparams_text(trial: TrialRecord) -> str:
    """A trial's hyperparameters as ``name=value``, by name (those a file lacks left out)."""
    return format_value(trial.hparams.to_dict())


def _status_html(trial: TrialRecord) -> str:
    """A trial's status, the reason it ended, and its traceback folded."""
    status = str(trial.status)
    status_html = f'<span class="status st-{esc(status)}">{esc(status)}</span>'
    if trial.reason:
        status_html += f"<br><small>{esc(trial.reason)}</small>"
    if trial.traceback:
        status_html += (
            f"<details><summary>traceback</summary><pre>{esc(trial.traceback)}</pre></details>"
        )
    return status_html


def next_token_accuracy(trial: TrialRecord, quality: ReportQuality) -> float | None:
    """A language model's next-token accuracy (the epochs' ``val_accuracy``, not the quality) in
    the epoch of its best ``quality`` value; None where no epoch holds both."""
    epochs = [e for e in trial.epochs if e.value("val_accuracy") is not None]
    best = quality.best(epochs, lambda e: e.value(quality.epoch_key))
    return best.value("val_accuracy") if best is not None else None
