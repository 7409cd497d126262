"""The zoo as a list: one record per model, for ``aihpc models`` (its JSON and its table)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from aihpc.base.fmt import text_table


@dataclass(frozen=True)
class ZooEntry:
    """A registered model: its metadata and its exact parameter count at the defaults."""

    name: str
    family: str
    input_kind: str  # "image" or "tokens"
    input_shape: tuple[int, ...]  # one sample: (C, H, W), or (T,) for a tokens model
    num_classes: int  # a tokens model's vocabulary
    parameters: int
    description: str

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "input_shape": list(self.input_shape)}

    def input_text(self) -> str:
        shape = "x".join(map(str, self.input_shape))
        return f"{shape} tokens" if self.input_kind == "tokens" else shape


def zoo() -> list[ZooEntry]:
    """Every registered model, in registration order."""
    from aihpc import models

    return [
        ZooEntry(
            name=meta.name,
            family=meta.family,
            input_kind=meta.input_kind,
            input_shape=tuple(meta.input_shape),
            num_classes=meta.num_classes,
            parameters=models.parameter_count(name),
            description=meta.description,
        )
        for name, meta in ((n, models.info(n)) for n in models.names())
    ]


def zoo_table(entries: list[ZooEntry]) -> str:
    """The zoo for a terminal: name, family, input, classes, millions of parameters, description."""
    rows = [
        [
            e.name,
            e.family,
            e.input_text(),
            str(e.num_classes),
            f"{e.parameters / 1e6:.2f}",
            e.description,
        ]
        for e in entries
    ]
    head = ["name", "family", "input", "classes", "params M", "description"]
    return "aihpc model zoo\n\n" + text_table(head, rows)
