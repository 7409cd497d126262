"""Plain-text tables of an :class:`~aihpc.counting.counter.OpCount`."""

from __future__ import annotations

from aihpc.base.fmt import format_si
from aihpc.counting.counter import OpCount


def _rows(count: OpCount, by: str, depth: int | None) -> tuple[str, list[tuple[str, int, int]]]:
    if by == "operator":
        return "operator", [(k, v["forward"], v["backward"]) for k, v in count.by_operator.items()]
    rows = []
    for name, v in count.by_module.items():
        level = 0 if name.startswith("(") else name.count(".") + 1
        if depth is None or level <= depth:
            rows.append(("  " * level + name, v["forward"], v["backward"]))
    return "module", rows


def format_count(
    count: OpCount,
    by: str = "operator",
    depth: int | None = None,
    title: str = "",
    parameters: int | None = None,
) -> str:
    """An aligned table: one row per operator type (or module up to ``depth``
    levels below the model, by_module being inclusive of sub-modules) with
    forward / backward / total operations, then the totals, conv+linear MACs,
    the parameter count and any uncounted ops."""
    if by not in ("operator", "module"):
        raise ValueError(f"by must be 'operator' or 'module', got {by!r}")
    head, rows = _rows(count, by, depth)
    rows.append(("TOTAL", count.forward, count.backward))
    table = [[head, "forward", "backward", "total"]]
    table += [[name, *(format_si(n, count=True) for n in (f, b, f + b))] for name, f, b in rows]
    widths = [max(len(r[i]) for r in table) for i in range(4)]
    rule = "  ".join("-" * w for w in widths)

    def fmt(r: list[str]) -> str:
        return "  ".join(
            [r[0].ljust(widths[0])] + [c.rjust(w) for c, w in zip(r[1:], widths[1:], strict=True)]
        )

    lines = [title] if title else []
    lines += [fmt(table[0]), rule, *(fmt(r) for r in table[1:-1]), rule, fmt(table[-1])]
    mode = "training step (forward + loss + backward)" if count.train else "inference (eval mode)"
    per = count.per_sample()
    lines.append("")
    lines.append(
        f"{mode}, batch {count.batch_size}: {format_si(count.total, 'OPs', count=True)} "
        f"({count.total:,} operations; {format_si(per['total'], 'OPs', count=True)} per sample)"
    )
    lines.append(
        f"conv+linear MACs (forward): {format_si(count.conv_linear_macs, 'MACs', count=True)} "
        f"({format_si(per['conv_linear_macs'], 'MACs', count=True)} per sample)"
    )
    if parameters is not None:
        lines.append(f"parameters: {parameters:,} ({format_si(parameters, count=True)})")
    if count.uncounted:
        listed = ", ".join(f"{k} x{v}" for k, v in count.uncounted.items())
        lines.append(f"UNCOUNTED ops (no formula; counted as 0): {listed}")
    else:
        lines.append("uncounted ops: none")
    return "\n".join(lines)
