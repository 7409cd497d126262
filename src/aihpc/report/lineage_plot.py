"""The search lineage drawn: the tree of trials by their quality, coloured by morphism.

The lineage itself is built in :mod:`aihpc.report.lineage`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aihpc.report.figure import figure, png
from aihpc.report.lineage import Lineage, morph_color

if TYPE_CHECKING:  # pragma: no cover
    from matplotlib.axes import Axes


def plot_lineage(lineage: Lineage) -> bytes | None:
    """The search tree over trial ids: the quality up (an accuracy in %, a loss in nats/token), a
    grey line from each parent to its child, points coloured by the morphism that made the trial,
    the best trial's ancestry in bold.

    Trials without a value (failed, cut short) sit as crosses on the worse edge: the bottom for
    an accuracy, the top for a loss.
    """
    from matplotlib.collections import LineCollection

    ids = list(lineage.nodes)
    if not ids:
        return None
    x = {i: float(i) for i in ids}
    quality = lineage.quality
    values = [quality.plotted(n.value) for n in lineage.nodes.values() if n.value is not None]
    low, high = (min(values), max(values)) if values else (0.0, 100.0)
    span = max(high - low, 1.0 if quality.higher_is_better else 0.01)
    worst = low - 0.08 * span if quality.higher_is_better else high + 0.08 * span
    y = {
        i: quality.plotted(n.value) if n.value is not None else worst
        for i, n in lineage.nodes.items()
    }

    fig = figure(9, 4.8)
    ax = fig.subplots()
    edges = [
        [(x[n.parent], y[n.parent]), (x[i], y[i])]
        for i, n in lineage.nodes.items()
        if n.parent is not None
    ]
    ax.add_collection(LineCollection(edges, colors="#bdbdbd", linewidths=0.8, zorder=1))
    path = lineage.ancestry
    ax.plot([x[i] for i in path], [y[i] for i in path], color="#212121", linewidth=2.2, zorder=2)
    kinds = _points(ax, lineage, x, y)
    if path:
        _mark_best(ax, path, x, y)
    ax.set_ylim(min(low, worst) - 0.04 * span, max(high, worst) + 0.1 * span)
    ax.autoscale(axis="x")
    ax.set_xlabel("trial id (order of creation)")
    ax.set_ylabel(quality.axis_label)
    ax.set_title("Search lineage: parent → child, by morphism (bold: the best trial's ancestry)")
    ax.grid(alpha=0.3)
    _legend(ax, kinds, quality.missing, any(n.value is None for n in lineage.nodes.values()))
    return png(fig)


def _points(ax: Axes, lineage: Lineage, x: dict[int, float], y: dict[int, float]) -> dict[str, str]:
    """Each trial's point, coloured by its morphism (a cross: no value); the colours used."""
    size = 36 if len(lineage.nodes) <= 60 else 14
    groups: dict[tuple[str, str], list[int]] = {}
    for i, node in lineage.nodes.items():
        groups.setdefault(
            (node.kind.split("+")[0], "o" if node.value is not None else "x"), []
        ).append(i)
    for (kind, marker), members in groups.items():
        ax.scatter(
            [x[i] for i in members],
            [y[i] for i in members],
            s=size,
            marker=marker,
            color=morph_color(kind),
            zorder=3,
            linewidths=1.2 if marker == "x" else 0.5,
            edgecolors="white" if marker == "o" else None,
        )
    return {kind: morph_color(kind) for kind, _ in groups}


def _mark_best(ax: Axes, path: tuple[int, ...], x: dict[int, float], y: dict[int, float]) -> None:
    """A star on the best trial, and the ids of its last 12 ancestors."""
    ax.scatter(
        [x[path[-1]]],
        [y[path[-1]]],
        s=220,
        marker="*",
        color="#fdd835",
        edgecolors="#212121",
        zorder=4,
    )
    for i in path[-12:]:
        ax.annotate(
            f"#{i}",
            (x[i], y[i]),
            textcoords="offset points",
            xytext=(0, 7),
            ha="center",
            fontsize="small",
            zorder=5,
        )


def _legend(ax: Axes, kinds: dict[str, str], missing: str, unevaluated: bool) -> None:
    """The morphisms' colours, the ancestry's line, and the cross of trials without a value
    (labelled ``missing``)."""
    from matplotlib.lines import Line2D

    handles = [Line2D([], [], marker="o", linestyle="", color=c, label=k) for k, c in kinds.items()]
    handles += [Line2D([], [], color="#212121", linewidth=2.2, label="best's ancestry")]
    if unevaluated:
        handles.append(Line2D([], [], marker="x", linestyle="", color="#616161", label=missing))
    ax.legend(
        handles=handles,
        title="made by",
        fontsize="small",
        loc="upper left",
        bbox_to_anchor=(1.01, 1.0),
    )
