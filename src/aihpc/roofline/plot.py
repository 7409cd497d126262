"""The roofline plot of an ``aihpc roofline`` result, rendered off-screen to PNG.

Log-log axes: arithmetic intensity (FLOP/byte) on x, FLOP/s on y.  The
memory roof is the measured STREAM triad bandwidth (the line ``I x
bandwidth``, drawn up to the highest compute roof); each measured dtype has a
flat compute roof at its measured peak, from its ridge point on.  A dtype with
no measured peak draws no roof (never an invented one); its kernels are still
placed, marked "no measured peak" in the legend.  Kernels (``data.points``)
are coloured by dtype and shaped by the file they came from (circle: Level-0
operators, square: Level-1 layers); a kernel with zero intensity or rate
cannot sit on log axes and is left out of the plot (the table keeps it).

As :mod:`aihpc.report.plots`, this uses matplotlib's object-oriented
``Figure`` (no pyplot, no display, no global backend state) and the Agg
renderer; matplotlib is imported inside the functions.
"""

from __future__ import annotations

import io
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aihpc.base.fileio import atomic_write
from aihpc.base.fmt import format_si
from aihpc.records.kinds_measure import PlacedPointRecord, RooflineData
from aihpc.roofline.model import Roofline

if TYPE_CHECKING:  # pragma: no cover
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

DPI = 100

DTYPE_COLORS = {
    "float64": "#6d4c41",
    "float32": "#1e88e5",
    "tf32": "#00897b",
    "bfloat16": "#e53935",
    "float16": "#8e24aa",
}
_EXTRA_COLORS = ("#fb8c00", "#546e7a", "#d81b60", "#43a047")
SOURCE_MARKERS = {"bench-operators": "o", "bench-network": "s"}
SOURCE_NAMES = {"bench-operators": "Level-0 operators", "bench-network": "Level-1 layers"}
_OTHER_MARKER = "^"
_MEMORY_COLOR = "#424242"
_MAX_LABELS = 25  # more kernel labels than this overlap into noise


def roofline_png(data: RooflineData) -> bytes:
    """The roofline plot of a roofline result's ``data`` as PNG bytes (for files and the HTML
    report)."""
    buffer = io.BytesIO()
    roofline_figure(data).savefig(buffer, format="png", dpi=DPI, metadata={"Software": None})
    return buffer.getvalue()


def roofline_figure(data: RooflineData) -> Figure:
    """The roofline plot of a roofline result's ``data`` (``roofline`` and ``points``) as a
    matplotlib Figure."""
    from matplotlib.figure import Figure

    roof = Roofline.from_record(data.roofline)
    points = [p for p in data.points if p.intensity > 0 and p.flops_per_s > 0]
    colors = _dtype_colors([*roof.peaks, *(p.dtype for p in points)])
    lo, hi = _x_range(roof, points)
    fig = Figure(figsize=(8.5, 5.5), dpi=DPI, layout="constrained")
    ax = fig.add_subplot()
    ax.set_xscale("log")
    ax.set_yscale("log")
    _draw_roofs(ax, roof, colors, lo, hi)
    _draw_points(ax, points, colors, set(roof.peaks))
    if not roof.peaks and roof.bandwidth is None and not points:
        ax.text(0.5, 0.5, "nothing measured", ha="center", va="center", transform=ax.transAxes)
    ax.set_xlim(lo, hi)
    ax.set_xlabel("arithmetic intensity (FLOP/byte)")
    ax.set_ylabel("FLOP/s")
    _si_axis(ax.yaxis, "FLOP/s")
    ax.set_title(f"roofline of {roof.device} (measured)")
    ax.grid(True, which="major", linestyle=":", alpha=0.6)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize="small", loc="lower right")
    return fig


def plot_roofline(data: RooflineData, path: Path) -> Path:
    """Write :func:`roofline_png` of ``data`` to ``path`` atomically; StorageError if it cannot."""
    path = Path(path)
    atomic_write(path, roofline_png(data))
    return path


def _draw_roofs(ax: Axes, roof: Roofline, colors: dict[str, str], lo: float, hi: float) -> None:
    """The triad memory roof up to the highest compute roof, then each dtype's flat roof from its
    ridge."""
    bandwidth, top = roof.bandwidth, max(roof.peaks.values(), default=None)
    if bandwidth is not None:
        knee = hi if top is None else min(hi, max(lo, top / bandwidth))
        ax.plot(
            [lo, knee],
            [lo * bandwidth, knee * bandwidth],
            color=_MEMORY_COLOR,
            linewidth=2,
            label=f"memory (STREAM triad) {format_si(bandwidth, 'B/s')}",
        )
    for dtype, peak in sorted(roof.peaks.items(), key=lambda kv: -kv[1]):
        ridge = roof.ridge(dtype)
        start = lo if ridge is None else min(hi, max(lo, ridge))
        ax.plot(
            [start, hi],
            [peak, peak],
            color=colors[dtype],
            linewidth=2,
            label=f"{dtype} peak {format_si(peak, 'FLOP/s')}",
        )
        if ridge is not None and lo <= ridge <= hi:
            ax.plot([ridge], [peak], marker="|", markersize=10, color=colors[dtype])


def _draw_points(
    ax: Axes, points: list[PlacedPointRecord], colors: dict[str, str], roofed: set[str]
) -> None:
    """Kernels as markers, one legend entry per (dtype, source); labels while there are few."""
    groups: dict[tuple[str, str], list[PlacedPointRecord]] = {}
    for p in points:
        groups.setdefault((p.dtype, str(p.source)), []).append(p)
    for (dtype, source), group in groups.items():
        label = f"{dtype} {SOURCE_NAMES.get(source, source)}" + (
            "" if dtype in roofed else " (no measured peak)"
        )
        ax.scatter(
            [p.intensity for p in group],
            [p.flops_per_s for p in group],
            s=36,
            zorder=3,
            color=colors[dtype],
            marker=SOURCE_MARKERS.get(source, _OTHER_MARKER),
            edgecolors="black",
            linewidths=0.5,
            label=label,
        )
    if len(points) <= _MAX_LABELS:
        for p in points:
            ax.annotate(
                p.label,
                (p.intensity, p.flops_per_s),
                xytext=(4, 3),
                textcoords="offset points",
                fontsize=7,
            )


def _x_range(roof: Roofline, points: list[PlacedPointRecord]) -> tuple[float, float]:
    """Decades around every ridge and kernel intensity, one spare decade each side (1e-2..1e3 if
    none)."""
    xs = [r for r in (roof.ridge(d) for d in roof.peaks) if r] + [p.intensity for p in points]
    if not xs:
        return 1e-2, 1e3
    return 10.0 ** (math.floor(math.log10(min(xs))) - 1), 10.0 ** (
        math.ceil(math.log10(max(xs))) + 1
    )


def _dtype_colors(dtypes: list[str]) -> dict[str, str]:
    """A fixed colour per known dtype, the extra palette (cycled) for others, in order of
    appearance."""
    colors: dict[str, str] = {}
    extra = 0
    for dtype in dict.fromkeys(dtypes):
        if dtype in DTYPE_COLORS:
            colors[dtype] = DTYPE_COLORS[dtype]
        else:
            colors[dtype] = _EXTRA_COLORS[extra % len(_EXTRA_COLORS)]
            extra += 1
    return colors


def _si_axis(axis: Any, unit: str) -> None:
    """Tick labels with SI prefixes and no trailing zeros ("10 GFLOP/s")."""
    from matplotlib.ticker import FuncFormatter

    def label(value: float, _pos: int) -> str:
        number, _, suffix = format_si(value, unit).partition(" ")
        if "." in number:
            number = number.rstrip("0").rstrip(".")
        return f"{number} {suffix}".strip()

    axis.set_major_formatter(FuncFormatter(label))
