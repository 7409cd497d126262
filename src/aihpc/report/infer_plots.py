"""The plots of an inference result (``infer.json``): its latency distribution and its
throughput-latency curve, PNG bytes (None where the record holds nothing to draw).

* :func:`plot_latency`: each scenario's histogram of the latencies the system saw (the test
  its figure is of), as the share of its samples per logarithmic bin on a log time axis,
  the server's bound as a line; a language model's time to first token in a second panel.
* :func:`plot_throughput_latency`: the server's tests, the samples per second each achieved
  against its 99th-percentile latency (a language model's: time to first token, which its
  bound is on), valid and invalid marked, the bound as a vertical line; the offline rate as
  a horizontal line, and as a point at its 99th-percentile latency where it has one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aihpc.records.inference import InferData
from aihpc.records.inference_scenarios import (
    Histogram,
    InferTest,
    StreamScenario,
    loadgen_number,
    loadgen_rate,
    loadgen_seconds,
    loadgen_valid,
)
from aihpc.report.figure import figure, png, si_axis, tick_label

if TYPE_CHECKING:  # pragma: no cover
    from matplotlib.axes import Axes

COLORS = {"offline": "#1e88e5", "single-stream": "#8e24aa", "server": "#fb8c00"}
VALID, INVALID = "#2e7d32", "#c62828"


def log_seconds(ax: Axes) -> None:
    """A logarithmic time axis in SI seconds; its minor ticks labelled too where it spans
    less than a decade and a half (else it would show one label, or none)."""
    from matplotlib.ticker import FuncFormatter, NullFormatter

    ax.set_xscale("log")
    si_axis(ax.xaxis, "s")
    lo, hi = ax.get_xlim()
    small = lo > 0 and hi / lo < 30
    minor = FuncFormatter(lambda v, _pos: tick_label(v, "s")) if small else NullFormatter()
    ax.xaxis.set_minor_formatter(minor)


def _histograms(
    data: InferData, first_token: bool
) -> dict[str, tuple[tuple[float, ...], list[float]]]:
    """Scenario -> (edges in seconds, share of the samples per bin) of its latencies' histogram
    (``first_token``: of its times to first token)."""
    found = {}
    for name, s in data.scenarios.items():
        h: Histogram | None = s.first_token_histogram if first_token else s.histogram
        if h is None:
            continue
        total = sum(h.counts)
        if total and len(h.edges_s) == len(h.counts) + 1:
            found[name] = (h.edges_s, [c / total for c in h.counts])
    return found


def bound(data: InferData) -> tuple[float | None, str]:
    """The server's bound in seconds and what it bounds (a latency, or the time to first
    token)."""
    b = data.bounds
    if b.latency is not None:
        return b.latency, "latency"
    return b.ttft, "time to first token"


def plot_latency(data: InferData) -> bytes | None:
    """The latency distributions (the module docstring)."""
    panels = [("latency of a query", _histograms(data, first_token=False))]
    first = _histograms(data, first_token=True)
    if first:
        panels.append(("time to first token", first))
    if not panels[0][1] and not first:
        return None
    fig = figure(9, 3.2 * len(panels))
    axes = fig.subplots(len(panels), 1, squeeze=False)[:, 0]
    limit, what = bound(data)
    for ax, (title, histograms) in zip(axes, panels, strict=True):
        for name, (edges, shares) in histograms.items():
            ax.stairs(shares, edges, label=name, color=COLORS.get(name), linewidth=1.5)
        if limit is not None and (what == "latency") == (title == "latency of a query"):
            ax.axvline(limit, color=INVALID, linestyle="--", linewidth=1, label="server bound")
        log_seconds(ax)
        ax.set_xlabel(f"{title} (log scale)")
        ax.set_ylabel("share of samples")
        ax.grid(alpha=0.3)
        ax.legend(fontsize="small")
    axes[0].set_title("Latency distribution")
    return png(fig)


def achieved(test: InferTest) -> float | None:
    """The samples per second a test achieved: LoadGen's completed rate (server), its rate
    (offline), else the rate asked."""
    r = test.results
    completed = loadgen_number(r, "completed_samples_per_sec")
    rate = completed if completed is not None else loadgen_rate(r)
    return rate if rate is not None else test.settings.target_qps


def server_points(data: InferData, tokens: bool) -> list[tuple[float, float, bool]]:
    """(p99 latency or time to first token in s, samples/s, valid) of each server test."""
    key = "first_token_99.00_percentile_latency_ns" if tokens else "99.00_percentile_latency_ns"
    server = data.scenarios.server
    points = []
    for test in server.tests if server is not None else ():
        x, y = loadgen_seconds(test.results, key), achieved(test)
        if x is not None and y is not None:  # valid: LoadGen's verdict, and it kept up
            points.append((x, y, loadgen_valid(test.results) and test.kept_up is not False))
    return sorted(points, key=lambda p: p[1])


def plot_throughput_latency(data: InferData) -> bytes | None:
    """The throughput-latency curve (the module docstring)."""
    limit, what = bound(data)
    tokens = what != "latency"
    points = server_points(data, tokens)
    offline = data.scenarios.offline
    rate = offline.samples_per_second if offline is not None else None
    if not points and rate is None:
        return None
    fig = figure(9, 4.2)
    ax = fig.subplots()
    if points:
        xs, ys, ok = zip(*points, strict=True)
        ax.plot(xs, ys, color=COLORS["server"], linewidth=1, zorder=1)
        _marks(ax, points)
    if limit is not None:
        ax.axvline(limit, color=INVALID, linestyle="--", linewidth=1, label=f"bound ({what})")
    _offline(ax, offline, rate, tokens)
    log_seconds(ax)
    ax.set_xlabel(f"99th-percentile {what} (log scale)")
    ax.set_ylabel("samples / s achieved")
    ax.set_ylim(bottom=0)
    ax.set_title("Throughput against latency: the server's tests")
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small", loc="best")
    return png(fig)


def _marks(ax: Axes, points: list[tuple[float, float, bool]]) -> None:
    for valid, marker, color, label in (
        (True, "o", VALID, "valid"),
        (False, "x", INVALID, "invalid"),
    ):
        chosen = [(x, y) for x, y, v in points if v is valid]
        if chosen:
            xs, ys = zip(*chosen, strict=True)
            ax.scatter(xs, ys, marker=marker, color=color, s=40, zorder=2, label=f"server, {label}")


def _offline(ax: Axes, offline: StreamScenario | None, rate: float | None, tokens: bool) -> None:
    if rate is None or offline is None:
        return
    ax.axhline(rate, color=COLORS["offline"], linestyle=":", linewidth=1, label="offline rate")
    x = offline.p99_first_token_s if tokens else offline.p99_latency_s
    if x is not None and x > 0:
        ax.scatter(
            [x], [rate], marker="s", color=COLORS["offline"], s=40, zorder=2, label="offline"
        )
