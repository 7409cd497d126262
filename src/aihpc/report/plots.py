"""The report's plots, rendered off-screen to PNG bytes.

Uses matplotlib's object-oriented :class:`~matplotlib.figure.Figure` API (no
pyplot, so no global backend state and no display needed); ``savefig`` to PNG
goes through the Agg renderer.  matplotlib is imported inside the functions so
importing this module stays cheap.

Each ``plot_*`` function takes the run (:class:`~aihpc.report.digest.ReportRun`) or the
part of it it draws and returns the PNG bytes, or ``None`` when the results hold no data
for that plot (the HTML then shows a "no data" note instead of an image).
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from aihpc.report.digest import ReportRun
from aihpc.report.digest_views import busy_histogram, lineage_density, ops_histogram
from aihpc.report.figure import DPI, figure, png, si_axis
from aihpc.report.figure import tick_label as tick_label  # re-exported: tests and callers
from aihpc.report.lineage_plot import plot_lineage
from aihpc.report.timeline_plot import plot_timeline as plot_timeline  # re-exported
from aihpc.results.sections import SegmentRecord
from aihpc.results.trial import TrialRecord

if TYPE_CHECKING:  # pragma: no cover
    from matplotlib.axes import Axes

#: Phases of ``phase_seconds`` in the order they are stacked.
PHASES = ("data", "forward", "backward", "optimizer", "eval", "compile", "other")

STATUS_COLORS = {
    "completed": "#2e7d32",
    "early_stopped": "#1e88e5",
    "deadline": "#8d6e63",
    "diverged": "#f57c00",
    "failed": "#c62828",
}
_OTHER_STATUS_COLOR = "#9e9e9e"

_PHASE_COLORS = {
    "data": "#8e24aa",
    "forward": "#1e88e5",
    "backward": "#43a047",
    "optimizer": "#fdd835",
    "eval": "#fb8c00",
    "other": "#9e9e9e",
}
_EXTRA_PHASE_COLORS = ("#6d4c41", "#00897b", "#d81b60", "#546e7a")


def status_color(status: str) -> str:
    """Hex colour used for a trial status (grey for unknown statuses)."""
    return STATUS_COLORS.get(status, _OTHER_STATUS_COLOR)


def render_all(run: ReportRun) -> dict[str, bytes | None]:
    """All plots, keyed ``timeline``, ``ops``, ``workers``, ``phases``, ``lineage``; a large run's
    from its digest (:mod:`aihpc.report.digest_views`)."""
    digest = run.digest
    if digest is not None:
        return {
            "timeline": plot_timeline(run),
            "ops": ops_histogram(digest),
            "workers": busy_histogram(run.head.workers),
            "phases": plot_phases(run.trials, totals=digest.phase_seconds),
            "lineage": lineage_density(digest, run.lineage.ancestry),
        }
    return {
        "timeline": plot_timeline(run),
        "ops": plot_trial_ops(run.trials),
        "workers": plot_worker_timeline(run),
        "phases": plot_phases(run.trials),
        "lineage": plot_lineage(run.lineage),
    }


# --------------------------------------------------------------------------- helpers


def _edge_width(bars: int) -> float:
    """White bar outlines help with few bars but hide thin ones: none beyond 60 bars."""
    return 0.5 if bars <= 60 else 0.0


def _trial_label(trial: TrialRecord) -> str:
    return str(trial.id)


def _status_legend(
    ax: Axes, statuses: list[str], extra: list[Any] | None = None, **kwargs: Any
) -> None:
    from matplotlib.patches import Patch

    present = set(statuses)
    seen = [s for s in STATUS_COLORS if s in present] + sorted(present - set(STATUS_COLORS))
    handles = [Patch(color=status_color(s), label=s) for s in seen] + list(extra or [])
    if handles:
        ax.legend(handles=handles, title="status", fontsize="small", **kwargs)


def _thin_ticks(ax: Axes, positions: list[int], labels: list[str], max_labels: int = 20) -> None:
    """Label at most ``max_labels`` bars, every 1st, 2nd, 5th, 10th, 20th, ... one."""
    step = 1
    while len(positions) > step * max_labels:
        step = step * 5 // 2 if str(step)[0] == "2" else step * 2
    ax.set_xticks(positions[::step])
    ax.set_xticklabels(labels[::step], fontsize="small")


# --------------------------------------------------------------------------- plots


def plot_trial_ops(trials: Sequence[TrialRecord]) -> bytes | None:
    """Total operations per trial (by id) as bars, coloured by status (log y if spread > 100x)."""
    if not trials:
        return None
    heights = [float(t.ops.total) for t in trials]
    statuses = [str(t.status) for t in trials]
    positions = list(range(len(trials)))
    fig = figure(9, 3.8)
    ax = fig.subplots()
    ax.bar(
        positions,
        heights,
        color=[status_color(s) for s in statuses],
        edgecolor="white",
        linewidth=_edge_width(len(trials)),
    )
    positive = [h for h in heights if h > 0]
    if positive and max(positive) / min(positive) > 100:
        ax.set_yscale("log")
    si_axis(ax.yaxis, "")
    _thin_ticks(ax, positions, [_trial_label(t) for t in trials])
    ax.set_xlabel("trial id")
    ax.set_ylabel("operations")
    ax.set_title("Operations per trial")
    ax.grid(axis="y", alpha=0.3)
    _status_legend(ax, statuses, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return png(fig)


def trial_spans(trial: TrialRecord) -> list[tuple[str, float, float]]:
    """(worker, start, end) spans of a trial, seconds since the run's start.

    When the trial's epochs carry ``worker``, ``t_start`` and ``t_end`` (a trial
    may be retried or resumed on another worker), consecutive epochs on the same
    worker form one span; otherwise the trial's own ``worker``, ``t_start`` and
    ``t_end`` make one span.  Spans with missing or reversed times are dropped.
    """
    spans: list[tuple[str, float, float]] = []
    for epoch in trial.epochs:
        worker, start, end = epoch.worker, epoch.t_start, epoch.t_end
        if worker is None or start is None or end is None or end < start:
            spans = []
            break
        if spans and spans[-1][0] == worker:
            spans[-1] = (worker, min(spans[-1][1], start), max(spans[-1][2], end))
        else:
            spans.append((worker, start, end))
    if spans:
        return spans
    start, end = trial.t_start, trial.t_end
    if start is None or end is None or end < start:
        return []
    return [(str(trial.worker), start, end)]


def plot_worker_timeline(run: ReportRun) -> bytes | None:
    """One row per worker; a bar per trial from ``t_start`` to ``t_end``, coloured by status.

    See :func:`trial_spans` for trials whose epochs ran on several workers.
    The row label carries the worker's busy fraction (from ``workers`` when
    given, otherwise busy seconds / wall seconds computed from the spans).
    Intervals between the run's ``segments`` (master down) are shaded.
    """
    from matplotlib.patches import Patch

    spans = _worker_spans(run.trials)
    listed = run.head.workers
    names = list(dict.fromkeys([w.name for w in listed] + list(spans)))
    if not spans:
        return None
    wall = run.head.score.wall_seconds
    t_max = max(end for rows in spans.values() for _, end, _ in rows)
    x_max = max(wall, t_max) or 1.0
    busy_given = {w.name: w.busy_fraction for w in listed}

    fig = figure(9, 1.4 + 0.55 * len(names))
    ax = fig.subplots()
    labels = []
    statuses = []
    for row, name in enumerate(names):
        rows = spans.get(name, [])
        statuses += _worker_row(ax, row, rows, x_max)
        busy = busy_given.get(name)
        if busy is None:
            busy = sum(end - start for start, end, _ in rows) / x_max
        labels.append(f"{name}\n{100 * busy:.0f}% busy")
    ax.set_yticks(range(len(names)))
    ax.set_yticklabels(labels, fontsize="small")
    ax.set_ylim(len(names) - 0.5, -0.5)
    ax.set_xlim(0, x_max)
    ax.axvline(wall, color="black", linewidth=0.8, linestyle=":")
    down = master_down(run.head.segments or ())
    for start, end in down:
        ax.axvspan(
            start, end, facecolor="#e0e0e0", edgecolor="#9e9e9e", hatch="//", linewidth=0, zorder=0
        )
    ax.set_xlabel("time since run start (s)")
    ax.set_title("Worker timeline (gaps are idle time)")
    ax.grid(axis="x", alpha=0.3)
    extra = (
        [Patch(facecolor="#e0e0e0", edgecolor="#9e9e9e", hatch="//", label="master down")]
        if down
        else []
    )
    _status_legend(ax, statuses, extra, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return png(fig)


def _worker_spans(
    trials: Sequence[TrialRecord],
) -> dict[str, list[tuple[float, float, TrialRecord]]]:
    """Each worker's (start, end, trial) bars, from :func:`trial_spans`."""
    spans: dict[str, list[tuple[float, float, TrialRecord]]] = {}
    for trial in trials:
        for worker, start, end in trial_spans(trial):
            spans.setdefault(worker, []).append((start, end, trial))
    return spans


def _worker_row(
    ax: Axes, row: int, rows: list[tuple[float, float, TrialRecord]], x_max: float
) -> list[str]:
    """One worker's bars, labelled where wide enough; returns their statuses."""
    statuses = []
    for start, end, trial in rows:
        status = str(trial.status)
        statuses.append(status)
        ax.barh(
            row,
            end - start,
            left=start,
            height=0.6,
            color=status_color(status),
            edgecolor="white",
            linewidth=0.8,
        )
        # Label only bars wide enough for the text (axes ~ 75% of the 900 px figure).
        if (end - start) / x_max * 0.75 * 9 * DPI > 7 * len(f"#{_trial_label(trial)}") + 6:
            ax.text(
                (start + end) / 2,
                row,
                f"#{_trial_label(trial)}",
                ha="center",
                va="center",
                color="white",
                fontsize="small",
                fontweight="bold",
            )
    return statuses


def master_down(segments: Sequence[SegmentRecord]) -> list[tuple[float, float]]:
    """The gaps between the run's ``segments`` (the master was down), oldest first."""
    bounds = sorted((g.t_start, g.t_end) for g in segments)
    return [
        (prev_end, next_start)
        for (_, prev_end), (next_start, _) in itertools.pairwise(bounds)
        if next_start > prev_end
    ]


def phase_totals(trials: Sequence[TrialRecord]) -> dict[str, float]:
    """Seconds per phase summed over ``trials``, known phases first, zero phases kept."""
    totals: dict[str, float] = {p: 0.0 for p in PHASES}
    for trial in trials:
        for phase, seconds in trial.phase_seconds.items():
            totals[phase] = totals.get(phase, 0.0) + seconds
    return totals


def plot_phases(
    trials: Sequence[TrialRecord], totals: Mapping[str, float] | None = None
) -> bytes | None:
    """Stacked bars of ``phase_seconds``: the total over all ``trials``, then each trial; given
    the ``totals`` of a large run, the total alone."""
    per_trial = totals is None
    totals = phase_totals(trials) if totals is None else {**dict.fromkeys(PHASES, 0.0), **totals}
    if sum(totals.values()) <= 0:
        return None
    phases = list(totals)
    extra = iter(_EXTRA_PHASE_COLORS * (len(phases) // len(_EXTRA_PHASE_COLORS) + 1))
    colors = {p: _PHASE_COLORS.get(p) or next(extra) for p in phases}

    fig = figure(9 if per_trial else 4, 4.2)
    if not per_trial:
        ax_all = fig.subplots()
        _phases_overall(ax_all, totals, colors)
        ax_all.legend(title="phase", fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1.0))
        fig.suptitle("Where the time went (phase seconds)")
        return png(fig)
    ax_all, ax_trials = fig.subplots(1, 2, width_ratios=[1, 5])
    _phases_overall(ax_all, totals, colors)
    _phases_per_trial(ax_trials, trials, colors)
    handles, names = ax_all.get_legend_handles_labels()
    ax_trials.legend(
        handles[::-1],
        names[::-1],
        title="phase",
        fontsize="small",
        loc="upper left",
        bbox_to_anchor=(1.01, 1.0),
    )
    fig.suptitle("Where the time went (phase seconds)")
    return png(fig)


def _phases_overall(ax: Axes, totals: dict[str, float], colors: dict[str, str]) -> None:
    """One bar of every trial's phase seconds stacked, each share above 6 % labelled."""
    grand = sum(totals.values())
    bottom = 0.0
    for phase, value in totals.items():
        ax.bar(0, value, bottom=bottom, color=colors[phase], width=0.6, label=phase)
        if value / grand > 0.06:
            ax.text(
                0,
                bottom + value / 2,
                f"{100 * value / grand:.0f}%",
                ha="center",
                va="center",
                fontsize="small",
            )
        bottom += value
    ax.set_xticks([0])
    ax.set_xticklabels(["all trials"])
    ax.set_xlim(-0.6, 0.6)
    ax.set_ylabel("seconds")
    ax.set_title("Overall")


def _phases_per_trial(ax: Axes, trials: Sequence[TrialRecord], colors: dict[str, str]) -> None:
    """A bar per trial of its phase seconds stacked, in the phases' order of ``colors``."""
    positions = list(range(len(trials)))
    bottoms = [0.0] * len(trials)
    for phase, color in colors.items():
        values = [t.phase_seconds.get(phase, 0.0) for t in trials]
        ax.bar(
            positions,
            values,
            bottom=bottoms,
            color=color,
            label=phase,
            edgecolor="white",
            linewidth=_edge_width(len(trials)) * 0.6,
        )
        bottoms = [b + v for b, v in zip(bottoms, values, strict=True)]
    _thin_ticks(ax, positions, [_trial_label(t) for t in trials], max_labels=15)
    ax.set_xlabel("trial id")
    ax.set_title("Per trial")
    ax.grid(axis="y", alpha=0.3)
