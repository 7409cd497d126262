"""How a report describes the image task's architectures; its quality is validation accuracy
(:mod:`aihpc.scoring.accuracy`)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Any

from aihpc.base.fmt import NA, format_value
from aihpc.tasks.base import other_fields


def arch_rows(arch: Mapping[str, Any]) -> list[tuple[str, str]]:
    """A CNN's layer count and layer types ("conv × 3, linear × 1"), then its other fields;
    tolerant of the spec's exact shape."""
    layers = next(
        (arch[k] for k in ("layers", "nodes", "blocks") if isinstance(arch.get(k), list)), None
    )
    count: int | None = None
    kinds = NA
    if layers is not None:
        names = [
            str(next((x[k] for k in ("type", "kind", "op") if k in x), "?"))
            if isinstance(x, Mapping)
            else str(x)
            for x in layers
        ]
        count = len(layers)
        kinds = ", ".join(f"{kind} × {n}" for kind, n in Counter(names).items()) or "none"
    rows = [("layers", format_value(count)), ("layer types", kinds)]
    return rows + other_fields(arch, {"layers", "nodes", "blocks"})
