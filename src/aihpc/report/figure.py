"""A report figure off-screen: made with matplotlib's Figure API (no pyplot), saved as PNG bytes."""

from __future__ import annotations

import io
from typing import TYPE_CHECKING, Any

from aihpc.base.fmt import format_si

if TYPE_CHECKING:  # pragma: no cover
    from matplotlib.figure import Figure

DPI = 100


def figure(width: float, height: float) -> Figure:
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), dpi=DPI, layout="constrained")


def png(fig: Figure) -> bytes:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=DPI, metadata={"Software": None})
    return buffer.getvalue()


def si_axis(axis: Any, unit: str) -> None:
    from matplotlib.ticker import FuncFormatter

    axis.set_major_formatter(FuncFormatter(lambda v, _pos: tick_label(v, unit)))


def tick_label(value: float, unit: str = "") -> str:
    """SI tick text without trailing zeros: ``5e9 -> "5 GOPS"``, ``2.5e9 -> "2.5 GOPS"``."""
    text = format_si(value, unit)
    number, _, suffix = text.partition(" ")
    if "." in number:
        number = number.rstrip("0").rstrip(".")
    return f"{number} {suffix}".strip()
