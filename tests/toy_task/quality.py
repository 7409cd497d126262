"""The toy task's settings (``[blobs]`` of a run's TOML file); its quality is validation accuracy,
valid from ``min_accuracy`` (:mod:`aihpc.scoring.accuracy`, as the image task's)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from aihpc.base.config import read_section, section_keys
from aihpc.base.errors import ConfigError


@dataclass(frozen=True)
class BlobsOptions:
    """The best accuracy of a valid run, and the data set's options (:mod:`toy_task.data`)."""

    min_accuracy: float = 0.3
    data_options: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not 0.0 <= self.min_accuracy < 1.0:
            raise ConfigError(f"min_accuracy must be in [0, 1), got {self.min_accuracy!r}")

    @classmethod
    def keys(cls) -> tuple[str, ...]:
        return section_keys(cls)

    @classmethod
    def ignored(cls) -> tuple[str, ...]:
        return ()  # a task newer than flat configurations meets none of another task's

    @classmethod
    def from_dict(cls, values: Mapping[str, Any], source: str) -> BlobsOptions:
        return read_section(cls, values, source)

    def to_dict(self) -> dict[str, Any]:
        return {"min_accuracy": self.min_accuracy, "data_options": dict(self.data_options)}

    def ref_options(self) -> dict[str, Any]:
        return dict(self.data_options)
