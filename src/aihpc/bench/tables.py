"""The terminal tables of Deep500's levels 0 and 1, rendered from their result records.

:func:`operators_table` renders a ``bench-operators`` result's ``data``
(:class:`aihpc.records.kinds_bench.BenchOperatorsData`), :func:`network_table` a
``bench-network`` one (:class:`aihpc.records.kinds_bench.BenchNetworkData`); both with
:func:`aihpc.base.fmt.text_table`.
"""

from __future__ import annotations

from aihpc.base.fmt import text_table
from aihpc.records.kinds_bench import (
    BenchNetworkData,
    BenchOperatorsData,
    LayerRecord,
    ModeRecord,
    OperatorRowRecord,
    PassRecord,
)

# ------------------------------------------------------------------ Level 0: operators
OPERATOR_HEAD = [
    "operator",
    "dtype",
    "valid",
    "L2 err",
    "max err",
    "grad L2",
    "fwd ms",
    "GFLOP/s",
    "GB/s",
    "roof",
    "fwd+bwd ms",
    "GFLOP/s",
    "roof",
]


def _ms(p: PassRecord | None) -> str:
    if p is None:
        return "-"
    return f"{p.seconds * 1e3:.3g}" + ("!" if p.warning else "")


def _rate(rate: float | None, uncounted: bool = False) -> str:
    if rate is None:
        return "-"
    return f"{rate / 1e9:.3g}" + ("*" if uncounted else "")


def _share(p: PassRecord | None) -> str:
    if p is None:
        return "-"
    return "unknown" if p.roofline_share is None else f"{p.roofline_share:.0%}"


def _err(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.1e}"


def _operator_cells(row: OperatorRowRecord) -> list[str]:
    v, f, fb = row.validation, row.forward, row.forward_backward
    star = bool(row.uncounted)
    return [
        row.name,
        row.dtype,
        "ok" if v.status == "passed" else "FAILED",
        _err(v.l2),
        _err(v.max_abs),
        _err(v.grad_l2),
        _ms(f),
        _rate(None if f is None else f.flops_per_s, star),
        _rate(None if f is None else f.bytes_per_s),
        _share(f),
        _ms(fb),
        _rate(None if fb is None else fb.flops_per_s, star),
        _share(fb),
    ]


def _roofline_line(data: BenchOperatorsData) -> str:
    roof = data.roofline
    peaks = (roof.peaks if roof else {}).items()
    text = ", ".join(f"{k} {v / 1e9:.3g}" for k, v in peaks) or "none"
    bandwidth = roof.bandwidth if roof else None
    memory = "unknown" if bandwidth is None else f"{bandwidth / 1e9:.3g} GB/s"
    device = roof.device if roof else data.device
    return f"roofline of {device}: matmul peaks (GFLOP/s) {text}; triad {memory}"


def _operator_notes(data: BenchOperatorsData) -> list[str]:
    rows = data.rows
    notes = [
        f"FAILED {r.name} {r.dtype}: {r.validation.reason}"
        for r in rows
        if r.validation.status != "passed"
    ]
    uncounted = {r.name: r.uncounted for r in rows if r.uncounted}
    notes += [
        f"* {name}: uncounted ops {ops} (its GFLOP/s are a lower bound)"
        for name, ops in uncounted.items()
    ]
    if any(p and p.warning for r in rows for p in (r.forward, r.forward_backward)):
        notes.append("! the timing's spread is wide or unmeasured: see 'warning' in the JSON")
    notes.append(
        f"errors: relative L2 and max |error| against float64; {len(rows)} rows in "
        f"{data.seconds:.1f} s"
    )
    return notes


def operators_table(data: BenchOperatorsData) -> str:
    """A ``bench-operators`` result's ``data``: one line per (operator, dtype), with notes."""
    title = f"Level 0 operators on {data.device}" + (" (quick)" if data.quick else "")
    table = text_table(OPERATOR_HEAD, [_operator_cells(r) for r in data.rows])
    return "\n".join([title, _roofline_line(data), "", table, "", *_operator_notes(data)])


# ------------------------------------------------------------------ Level 1: a network
def _number(value: float | None, scale: float = 1.0, digits: int = 2) -> str:
    return "unknown" if value is None else f"{value / scale:.{digits}f}"


def _percent(value: float | None) -> str:
    return "unknown" if value is None else f"{100 * value:.1f}%"


def _layer_cells(layer: LayerRecord, training: bool) -> list[str]:
    times = [
        _number(phase.seconds if phase else None, 1e-3)
        for phase in ((layer.forward, layer.backward) if training else ())
    ]
    return [
        layer.name,
        layer.type,
        _number(layer.seconds, 1e-3),
        *times,
        _percent(layer.share),
        _number(layer.ops, 1e9, 3),
        _number(layer.flops_per_s, 1e9),
        _percent(layer.roofline_share),
    ]


def _layer_table(mode: ModeRecord, top: int, training: bool) -> str:
    """The ``top`` slowest layers, then the rest as "other"."""
    split = ["fwd ms", "bwd ms"] if training else []
    head = ["layer", "type", "ms", *split, "share", "GFLOP", "GFLOP/s", "of roof"]
    layers = sorted(mode.layers, key=lambda r: -r.seconds)[:top]
    rows = [_layer_cells(layer, training) for layer in layers]
    other = mode.other_seconds
    blank = [""] * len(split)
    rows.append(["other", "", _number(other, 1e-3), *blank, _percent(other / mode.seconds)])
    rows[-1] += [""] * (len(head) - len(rows[-1]))
    return text_table(head, rows)


def _operator_type_table(mode: ModeRecord, top: int) -> str:
    """Time by operator type: the ``top`` slowest and the last (the fastest), if more."""
    operators = mode.operators
    shown = operators[:top] + ((operators[-1],) if len(operators) > top else ())
    rows = [
        [
            op.type,
            _number(op.seconds, 1e-3),
            _percent(op.seconds / mode.seconds),
            _number(op.ops, 1e9, 3) if op.ops else "",
            _number(op.flops_per_s, 1e9) if op.flops_per_s else "",
        ]
        for op in shown
    ]
    return text_table(["operator type", "ms", "share", "GFLOP", "GFLOP/s"], rows)


def _mode_lines(name: str, mode: ModeRecord, top: int) -> list[str]:
    title = (
        f"{name}: {mode.seconds * 1e3:.2f} ms per step (spread {mode.spread:.0%}; profiled "
        f"{mode.profiled_seconds * 1e3:.2f} ms), {mode.ops / 1e9:.3f} GFLOP, "
        f"{_number(mode.flops_per_s, 1e9)} GFLOP/s = {_percent(mode.peak_share)} of peak"
    )
    lines = [
        title,
        _layer_table(mode, top, name == "training"),
        "",
        _operator_type_table(mode, top),
    ]
    return lines + ([f"warning: {mode.warning}"] if mode.warning else [])


def network_table(data: BenchNetworkData, top: int = 10) -> str:
    """The ``top`` slowest layers of each mode (time, share of the step, counted GFLOP, GFLOP/s,
    share of the roofline at the layer's intensity), then time by operator type."""
    source = data.model or data.spec
    shape = "x".join(map(str, [data.batch, *data.input_shape]))
    peak = data.roofline.peaks.get(data.dtype)
    lines = [
        f"{source}: input {shape}, {data.device}, {data.dtype}, {data.threads} threads, "
        f"peak {_number(peak, 1e9, 1)} GFLOP/s"
    ]
    for name, mode in data.modes.items():
        lines += ["", *_mode_lines(name, mode, top)]
    return "\n".join(lines)
