"""The report's tables and plots of a large run, drawn from its digest (:mod:`aihpc.report.digest`).

Each stands in for a view that shows every trial: a distribution table for
the trials table, histograms for the bars per trial and the workers'
timeline, the time by phase over all trials, and the lineage as a density
of (trial id, quality) with the best trial's ancestry drawn over it.  The
quality (accuracy or validation loss) is the run's :class:`ReportQuality`.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from typing import Any

from aihpc.base.fmt import format_si
from aihpc.report.digest import Digest
from aihpc.report.figure import figure, png
from aihpc.report.markup import kv_table
from aihpc.results.sections import WorkerBusy


def caption(digest: Digest, kept: int) -> str:
    """What the trials section of a large run shows: its distributions, then the ``kept`` trials
    whole."""
    ranked = digest.quality.ranked
    return (
        f'<p class="sub">{digest.count:,} trials: too many to list. How they ended and '
        f"how they are distributed, then the {kept} trials kept whole (the {ranked} and the "
        f"best trial's ancestry), {ranked} first; every trial is in the results file.</p>"
    )


def _spread(values: list[float], fmt: Callable[[Any], str]) -> str:
    if not values:
        return "—"
    deciles = statistics.quantiles(values, n=10) if len(values) > 1 else [values[0]] * 9
    return (
        f"min {fmt(min(values))} · p10 {fmt(deciles[0])} · median {fmt(deciles[4])} · "
        f"p90 {fmt(deciles[8])} · max {fmt(max(values))}"
    )


def distribution_table(digest: Digest) -> str:
    """How the trials ended and the spread of their quality, operations, parameters, epochs."""
    quality = digest.quality
    values = [v for v in digest.values if v is not None]
    epochs = ", ".join(f"{n:,} with {k}" for k, n in sorted(digest.epochs.items()))
    return kv_table(
        [
            ("trials", f"{digest.count:,}"),
            ("ended", ", ".join(f"{n:,} {s}" for s, n in sorted(digest.status.items()))),
            (f"best val {quality.short}", _spread(values, quality.brief)),
            ("operations", _spread(digest.ops, format_si)),
            ("parameters", _spread(digest.params, format_si)),
            ("epochs", epochs),
        ]
    )


def ops_histogram(digest: Digest) -> bytes | None:
    """Histogram of the operations per trial (log-spaced bins)."""
    values = [v for v in digest.ops if v > 0]
    if not values:
        return None
    import numpy as np

    fig = figure(9, 3.8)
    ax = fig.subplots()
    low, high = min(values), max(values)
    bins = [float(b) for b in np.geomspace(low, high * 1.0001, 50)] if high > low else 10
    ax.hist(values, bins=bins, color="#1e88e5")
    ax.set_xscale("log" if high > 100 * low else "linear")
    ax.set_xlabel("operations per trial")
    ax.set_ylabel("trials")
    ax.set_title(f"Operations per trial ({len(values):,} trials)")
    ax.grid(axis="y", alpha=0.3)
    return png(fig)


def busy_histogram(workers: Sequence[WorkerBusy]) -> bytes | None:
    """Histogram of the workers' busy fractions."""
    busy = [100 * w.busy_fraction for w in workers]
    if not busy:
        return None
    fig = figure(9, 3.4)
    ax = fig.subplots()
    ax.hist(busy, bins=40, color="#43a047")
    ax.set_xlabel("busy (% of the run's wall time)")
    ax.set_ylabel("workers")
    ax.set_title(f"How busy the {len(busy):,} workers were")
    ax.grid(axis="y", alpha=0.3)
    return png(fig)


def lineage_density(digest: Digest, ancestry: tuple[int, ...]) -> bytes | None:
    """Every trial's (id, best value of the run's quality) as a density, the best trial's
    ancestry over it."""
    quality = digest.quality
    points = [
        (i, quality.plotted(v))
        for i, v in zip(digest.ids, digest.values, strict=True)
        if v is not None
    ]
    if not points:
        return None
    value_of = dict(points)
    fig = figure(9, 4.8)
    ax = fig.subplots()
    xs, ys = zip(*points, strict=True)
    shown = ax.hexbin(xs, ys, gridsize=(90, 40), bins="log", cmap="Greys", mincnt=1)
    fig.colorbar(shown, ax=ax, label="trials")
    path = [i for i in ancestry if i in value_of]
    ax.plot(path, [value_of[i] for i in path], color="#e53935", linewidth=2.0, marker="o")
    ax.set_xlabel("trial id (order of creation)")
    ax.set_ylabel(quality.axis_label)
    ax.set_title("Search lineage: every trial (density), the best trial's ancestry (red)")
    return png(fig)


def ancestry_note(digest: Digest) -> str:
    return (
        f'<p class="sub">The search tree of {digest.count:,} trials is too large to draw '
        "node by node: the plot shows their density, and the table the best trial's "
        "ancestry; each trial names its parent in the results file.</p>"
    )
