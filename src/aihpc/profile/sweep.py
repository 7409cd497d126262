"""Sweeps: time per step and peak memory against one input dimension.

A sweep changes one thing of a :class:`~aihpc.profile.step.StepConfig` and
keeps the rest:

* ``batch``: the batch size;
* ``resolution``: an image model's height and width (square inputs, the
  channels kept); refused for a tokens model;
* ``seq-len``: a tokens model's sequence length; refused for an image model.

Default values surround the configured one: a quarter, a half, once and
twice it for ``batch`` and ``seq-len``, a half, three quarters, once and
five quarters for ``resolution``.  Every value is planned and checked to fit
memory (:func:`aihpc.profile.memory.check_fits`) before any is measured, so
a bad value fails in a second, not after the values before it; a value that
still runs out of memory while measured stops the sweep with one line and
nothing is written (result files are written only once everything is done).

Each row holds the median seconds per step of the profiled steps and the
peak bytes (as in :mod:`aihpc.profile.memory`).  :func:`plot_sweep` draws
time against the value and peak memory against the value, as PNG bytes
(matplotlib's Agg renderer, no pyplot).
"""

from __future__ import annotations

import io
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from aihpc.base.checks import is_integer
from aihpc.base.errors import ConfigError
from aihpc.profile.step import StepConfig
from aihpc.records.kinds_measure import SweepRecord, SweepRowRecord

if TYPE_CHECKING:  # pragma: no cover
    from matplotlib.figure import Figure

DIMENSIONS = ("resolution", "batch", "seq-len")
AXIS_LABELS = {
    "resolution": "resolution (pixels per side)",
    "batch": "batch size",
    "seq-len": "sequence length (tokens)",
}
_DEFAULT_FACTORS = {
    "batch": (0.25, 0.5, 1.0, 2.0),
    "seq-len": (0.25, 0.5, 1.0, 2.0),
    "resolution": (0.5, 0.75, 1.0, 1.25),
}
MIB = 2**20
DPI = 100


def parse_values(text: str) -> tuple[int, ...]:
    """``"8,16,32"`` -> ``(8, 16, 32)``: positive integers, sorted, each once."""
    parts = [p.strip() for p in text.split(",")]
    if not text.strip() or not all(p.isdigit() and int(p) >= 1 for p in parts):
        raise ConfigError(
            f"--values must be positive integers separated by commas (e.g. 8,16,32), got {text!r}"
        )
    return tuple(sorted({int(p) for p in parts}))


def current_value(config: StepConfig, dimension: str) -> int:
    """The value ``dimension`` has in ``config`` (a resolution is the height)."""
    if dimension == "batch":
        return config.batch
    return config.input_shape[1] if dimension == "resolution" else config.input_shape[0]


def default_values(config: StepConfig, dimension: str) -> tuple[int, ...]:
    """Values around the configured one (see the module docstring)."""
    base = current_value(config, dimension)
    return tuple(sorted({max(1, round(base * f)) for f in _DEFAULT_FACTORS[dimension]}))


def point_config(config: StepConfig, dimension: str, value: int) -> StepConfig:
    """``config`` with ``dimension`` set to ``value``."""
    if dimension == "batch":
        return config.with_changes(batch=value)
    if dimension == "resolution":
        return config.with_changes(input_shape=(config.input_shape[0], value, value))
    return config.with_changes(input_shape=(value,))


def check_dimension(config: StepConfig, dimension: str) -> None:
    """ConfigError if ``dimension`` is unknown or does not apply to ``config``'s model."""
    if dimension not in DIMENSIONS:
        raise ConfigError(f"sweep must be one of {', '.join(DIMENSIONS)}, got {dimension!r}")
    kind = config.input_kind
    if dimension == "resolution" and kind != "image":
        raise ConfigError(f"sweep 'resolution' needs an image model; {config.model} takes {kind}")
    if dimension == "seq-len" and kind != "tokens":
        raise ConfigError(
            f"sweep 'seq-len' needs a sequence (tokens) model; {config.model} takes {kind}s"
        )


def plan_sweep(
    config: StepConfig, dimension: str, values: tuple[int, ...] | None = None
) -> tuple[StepConfig, ...]:
    """The validated config of each value (the defaults when ``values`` is None), smallest first."""
    check_dimension(config, dimension)
    chosen = default_values(config, dimension) if values is None else tuple(sorted(set(values)))
    if not chosen or not all(is_integer(v, 1) for v in chosen):
        raise ConfigError(f"sweep values must be integers >= 1, got {list(chosen)}")
    return tuple(point_config(config, dimension, v) for v in chosen)


@dataclass(frozen=True)
class SweepRow:
    """One value of a sweep: median seconds per step and peak bytes."""

    value: int
    step_seconds: float
    peak_bytes: int


@dataclass(frozen=True)
class Sweep:
    """A finished sweep over ``dimension``; ``rows`` in the order of the values."""

    dimension: str
    rows: tuple[SweepRow, ...]

    @property
    def values(self) -> tuple[int, ...]:
        return tuple(r.value for r in self.rows)

    def to_record(self) -> SweepRecord:
        return SweepRecord(
            dimension=self.dimension,
            values=self.values,
            rows=tuple(
                SweepRowRecord(value=r.value, step_seconds=r.step_seconds, peak_bytes=r.peak_bytes)
                for r in self.rows
            ),
        )


Measure = Callable[[StepConfig], tuple[float, int]]
"""A config -> (median seconds per step, peak bytes)."""


def run_sweep(
    plan: tuple[StepConfig, ...],
    dimension: str,
    measure: Measure,
    progress: Callable[[str], None] | None = None,
) -> Sweep:
    """Measure every planned config in order; ``progress`` gets one line per value."""
    rows = []
    for i, config in enumerate(plan, 1):
        value = current_value(config, dimension)
        seconds, peak = measure(config)
        rows.append(SweepRow(value, seconds, peak))
        if progress is not None:
            progress(
                f"sweep {dimension} {value} ({i}/{len(plan)}): {seconds:.4g} s/step, "
                f"peak {peak / MIB:,.1f} MiB"
            )
    return Sweep(dimension, tuple(rows))


def _figure() -> Figure:
    from matplotlib.figure import Figure

    return Figure(figsize=(6.4, 4.0), dpi=DPI, layout="constrained")


def _png(fig: Figure) -> bytes:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=DPI, metadata={"Software": None})
    return buffer.getvalue()


def _line_plot(sweep: Sweep, ys: list[float], ylabel: str, title: str, color: str) -> bytes:
    fig = _figure()
    ax = fig.subplots()
    ax.plot(sweep.values, ys, marker="o", color=color)
    ax.set_xlabel(AXIS_LABELS[sweep.dimension])
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.set_xticks(list(sweep.values))
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    return _png(fig)


def plot_sweep(sweep: Sweep, model: str) -> dict[str, bytes]:
    """PNG bytes of ``"time"`` (seconds per step) and ``"memory"`` (peak MiB) against the swept
    value."""
    return {
        "time": _line_plot(
            sweep,
            [r.step_seconds for r in sweep.rows],
            "seconds per training step (median)",
            f"{model}: time per step against {sweep.dimension}",
            "#1e88e5",
        ),
        "memory": _line_plot(
            sweep,
            [r.peak_bytes / MIB for r in sweep.rows],
            "peak memory (MiB)",
            f"{model}: peak memory against {sweep.dimension}",
            "#43a047",
        ),
    }


def plot_names(sweep: Sweep, model: str) -> dict[str, str]:
    """File names of the plots: ``profile-<model>-<dimension>-time.png`` and ``-memory.png``."""
    return {kind: f"profile-{model}-{sweep.dimension}-{kind}.png" for kind in ("time", "memory")}
