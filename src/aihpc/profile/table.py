"""The readable table of a :class:`~aihpc.profile.characterise.Profile`."""

from __future__ import annotations

from collections.abc import Sequence

from aihpc.base.fmt import format_si
from aihpc.base.spread import spread_warning
from aihpc.profile.characterise import Profile
from aihpc.profile.sweep import AXIS_LABELS

MIB = 2**20
OPERATOR_ROWS = 12
"""Op types listed one by one; the rest are summed in one row."""


def _align(rows: Sequence[Sequence[str]], indent: str = "") -> list[str]:
    """Left-align the first column, right-align the others."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return [
        indent
        + "  ".join(
            [r[0].ljust(widths[0])] + [c.rjust(w) for c, w in zip(r[1:], widths[1:], strict=True)]
        ).rstrip()
        for r in rows
    ]


def _seconds(s: float) -> str:
    return f"{s:.4f}" if s < 10 else f"{s:.2f}"


def _phases(p: Profile) -> list[str]:
    t = p.timing
    rows = [("phase", "s/step", "share")]
    rows += [(ph.name, _seconds(ph.seconds), f"{100 * ph.share:.1f}%") for ph in t.phases]
    gap = t.mean - sum(ph.seconds for ph in t.phases)
    rows.append(("(between phases)", _seconds(gap), f"{100 * gap / t.mean:.1f}%"))
    return _align(rows)


def _operators(p: Profile) -> list[str]:
    ops = p.timing.operators
    rows = [("operator type", "s/step", "share", "calls/step")]
    rows += [
        (o.type, _seconds(o.seconds), f"{100 * o.share:.1f}%", f"{o.calls:g}")
        for o in ops[:OPERATOR_ROWS]
    ]
    rest = ops[OPERATOR_ROWS:]
    if rest:
        s = sum(o.seconds for o in rest)
        rows.append(
            (f"({len(rest)} more types)", _seconds(s), f"{100 * s / p.timing.mean:.1f}%", "")
        )
    outside = p.timing.mean - sum(o.seconds for o in ops)
    rows.append(
        ("(outside aten ops)", _seconds(outside), f"{100 * outside / p.timing.mean:.1f}%", "")
    )
    return _align(rows)


def _memory(p: Profile) -> list[str]:
    m = p.memory
    parts = [
        ("parameters", m.parameters),
        ("gradients", m.gradients),
        ("optimizer state", m.optimizer_state),
        ("activations", m.activations),
        ("other", m.other),
        ("peak", m.peak_bytes),
    ]
    rows = [("memory at the peak", "MiB", "share")]
    rows += [(name, f"{b / MIB:,.1f}", f"{100 * b / m.peak_bytes:.1f}%") for name, b in parts]
    return [*_align(rows), f"peak measured as: {m.method}"]


def _sweep(p: Profile) -> list[str]:
    s = p.sweep
    if s is None:
        return []
    rows = [(AXIS_LABELS[s.dimension], "s/step", "peak MiB")]
    rows += [(str(r.value), _seconds(r.step_seconds), f"{r.peak_bytes / MIB:,.1f}") for r in s.rows]
    return ["", f"sweep over {s.dimension}:", *_align(rows)]


def _peak(p: Profile) -> list[str]:
    """The step's share of the measured peak (its kernel) and of the nominal peak."""
    peak = p.peak_record()
    if peak is None:
        return []
    line = (
        f"share of peak: {100 * peak.share:.1f} % of the measured "
        f"{format_si(peak.flops_per_s, 'FLOP/s')} ({peak.kernel})"
    )
    nominal = peak.nominal
    if peak.nominal_share is not None and nominal is not None:
        line += (
            f", {100 * peak.nominal_share:.1f} % of the nominal "
            f"{format_si(nominal.flops_per_s, 'FLOP/s')}"
        )
    elif nominal is not None:
        line += f"; nominal peak not known ({nominal.note})"
    return [line]


def format_profile(p: Profile) -> str:
    """Header, phases, operator types, memory breakdown and (if any) the sweep, as aligned text."""
    c, t = p.config, p.timing
    fastest, slowest = _seconds(min(t.step_seconds)), _seconds(max(t.step_seconds))
    ops = format_si(p.ops.total, "OPs", count=True)
    rate = format_si(p.flops_per_s, "OP/s", count=True)
    head = [
        f"profile: {c.model}, input {c.shape_text}, batch {c.batch}, {p.device}, {c.optimizer}; "
        f"{c.steps} profiled step{'s' if c.steps > 1 else ''} after 1 warm-up",
        f"step: {_seconds(t.median)} s (median; {fastest}-{slowest} s); "
        f"{ops} counted (forward + loss + backward) -> {rate}",
    ]
    head += _peak(p)
    warning = spread_warning("profile", f"{len(t.step_seconds)} steps' times", t.spread)
    if warning is not None:
        head.append(f"warning: {warning}; more --steps give a steadier median")
    return "\n".join([*head, "", *_phases(p), "", *_operators(p), "", *_memory(p), *_sweep(p)])
