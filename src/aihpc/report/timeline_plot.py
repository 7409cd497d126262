"""The report's timeline plot: the score and the best quality so far against the run's time.

The quality panel reads the run's :class:`~aihpc.tasks.quality.ReportQuality`:
the best accuracy in % above the minimum of a valid run, or the best validation
loss in nats per token under the maximum of a valid run and above the loss
floor, where the data's floor is known.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aihpc.report.digest import ReportRun
from aihpc.report.figure import figure, png, si_axis
from aihpc.tasks.quality import ReportQuality

if TYPE_CHECKING:  # pragma: no cover
    from matplotlib.axes import Axes


def plot_timeline(run: ReportRun) -> bytes | None:
    """Score (ops/s) and the best quality so far (accuracy or validation loss, the timeline's
    ``best_accuracy`` or ``best_val_loss``) against run time, two panels sharing x."""
    quality = run.quality
    points = run.head.timeline
    score_pts = sorted((p.t, p.ops_per_second) for p in points)
    best_pts = sorted(
        (p.t, value) for p in points if (value := p.best(quality.best_key)) is not None
    )
    if not score_pts and not best_pts:
        return None
    fig = figure(9, 5.4)
    ax_score, ax_best = fig.subplots(2, 1, sharex=True)
    if score_pts:
        ts, vs = zip(*score_pts, strict=True)
        ax_score.plot(ts, vs, marker="o", markersize=3, color="#1e88e5")
        ax_score.set_ylim(bottom=0)
    else:
        ax_score.text(
            0.5, 0.5, "no score data", ha="center", va="center", transform=ax_score.transAxes
        )
    si_axis(ax_score.yaxis, "OPS")
    ax_score.set_ylabel("score (operations / s)")
    ax_score.set_title(f"Score and best {quality.label} over the run")
    ax_score.grid(alpha=0.3)
    _best_panel(ax_best, best_pts, quality, quality.thresholds(run.head.score, run.data))
    return png(fig)


def _best_panel(
    ax: Axes,
    points: list[tuple[float, float]],
    quality: ReportQuality,
    lines: list[tuple[float, str, str]],
) -> None:
    """The best value so far as a step line, with the threshold and floor lines."""
    if points:
        ts, vs = zip(*points, strict=True)
        ax.step(
            ts,
            [quality.plotted(v) for v in vs],
            where="post",
            marker="o",
            markersize=3,
            color="#2e7d32",
            label=f"best {quality.label}",
        )
    else:
        ax.text(
            0.5, 0.5, f"no {quality.label} data", ha="center", va="center", transform=ax.transAxes
        )
    for value, label, style in lines:
        ax.axhline(
            quality.plotted(value),
            color="#c62828" if style == "valid" else "#616161",
            linestyle="--" if style == "valid" else ":",
            linewidth=1,
            label=label,
        )
    if points or lines:
        ax.legend(fontsize="small", loc="lower right" if quality.higher_is_better else "best")
    ax.set_ylabel(f"best {quality.label} ({quality.unit})")
    ax.set_xlabel("time since run start (s)")
    ax.set_xlim(left=0)
    ax.grid(alpha=0.3)
