"""``[image]``: the image task's own settings (``RunConfig.options`` of an image run)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from aihpc.base.checks import integer
from aihpc.base.config import read_section, section_keys
from aihpc.base.errors import ConfigError

#: The key of the training images' shift among a data reference's options (never a data set's)
SHIFT_KEY = "shift"


@dataclass(frozen=True)
class ImageOptions:
    """The best accuracy of a valid run, the data set's own options, the seed network's width,
    and how far training images are shifted."""

    min_accuracy: float = 0.5  # the best validation accuracy of a valid run, a fraction
    # passed to the data set's reader (aihpc.tasks.image.data.load_dataset): the synthetic
    # images' num_samples, num_classes, image_size, channels, difficulty; a reader's image_size
    data_options: dict[str, Any] = field(default_factory=dict)
    # the seed network's base width (channels of its first stage); None: the device's (SEEDS)
    seed_width: int | None = None
    # the largest random shift of a training image, in pixels (aihpc.tasks.image.augment); 0: no
    # shifts; None: the default, an eighth of the image's smaller side
    shift: int | None = None

    def __post_init__(self) -> None:
        if not 0.0 <= self.min_accuracy < 1.0:
            raise ConfigError(f"min_accuracy must be in [0, 1), got {self.min_accuracy!r}")
        if self.seed_width is not None:
            integer("seed_width", self.seed_width, 1, what="a whole number >= 1")
        if self.shift is not None:
            integer("shift", self.shift, 0, what="a whole number of pixels >= 0")

    @classmethod
    def keys(cls) -> tuple[str, ...]:
        return section_keys(cls)

    @classmethod
    def ignored(cls) -> tuple[str, ...]:
        return ("max_val_loss",)  # the language task's, in every flat configuration from before

    @classmethod
    def from_dict(cls, values: Mapping[str, Any], source: str) -> ImageOptions:
        return read_section(cls, values, source)

    def to_dict(self) -> dict[str, Any]:
        return {
            "min_accuracy": self.min_accuracy,
            "data_options": dict(self.data_options),
            "seed_width": self.seed_width,
            "shift": self.shift,
        }

    def ref_options(self) -> dict[str, Any]:
        """The data set's options, and the shift where the run sets one (what a worker trains
        on: :meth:`aihpc.tasks.image.task.ImageTask.augment`)."""
        shift = {} if self.shift is None else {SHIFT_KEY: self.shift}
        return {**self.data_options, **shift}
