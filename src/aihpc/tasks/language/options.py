"""``[lm]``: the language task's own settings (``RunConfig.options`` of a language-model run).

A file from before the task had settings of its own gave ``context`` and
``epoch_tokens`` among the data set's options (``data_options``): they are
read from there too.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from aihpc.base.checks import integer
from aihpc.base.config import read_section, section_keys
from aihpc.base.errors import ConfigError

#: The task's own settings a file from before typed settings gave among the data set's options.
MOVED = ("context", "epoch_tokens")
#: What a run may set of the seed network (``seed_network``; the rest is the device's seed)
SEED_KEYS = ("width", "layers", "heads", "head_dim", "mlp_hidden")


@dataclass(frozen=True)
class LanguageOptions:
    """The best loss of a valid run, the context, an epoch's tokens, the data set's options, the
    seed network."""

    # the best validation loss (nats/token) of a valid run; None: the data's bigram loss
    max_val_loss: float | None = None
    # tokens a model reads per window; None: the synthetic documents' length, or sized to the
    # device (aihpc.tasks.language.task.DEFAULT_CONTEXT)
    context: int | None = None
    # tokens of windows one epoch trains on; None: sized to the device
    epoch_tokens: int | None = None
    # passed to the data set's reader (aihpc.tasks.language.data.load_language): the synthetic
    # language's train_tokens, topics, ...; a token file's dtype, vocab_size, val_path
    data_options: dict[str, Any] = field(default_factory=dict)
    # the seed network's sizes that differ from the device's seed (SEED_KEYS), e.g. {width = 64}
    seed_network: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        loss = self.max_val_loss
        if loss is not None and not (math.isfinite(loss) and loss > 0):
            raise ConfigError(f"max_val_loss must be a finite number > 0, got {loss!r}")
        for name in MOVED:
            if getattr(self, name) is not None:
                integer(name, getattr(self, name), 1)
        if not isinstance(self.seed_network, Mapping):
            raise ConfigError(f"seed_network must be a table, got {self.seed_network!r}")
        for key, value in self.seed_network.items():
            if key not in SEED_KEYS:
                raise ConfigError(f"seed_network's keys are {', '.join(SEED_KEYS)}, got {key!r}")
            integer(f"seed_network.{key}", value, 1)

    @classmethod
    def keys(cls) -> tuple[str, ...]:
        return section_keys(cls)

    @classmethod
    def ignored(cls) -> tuple[str, ...]:
        return ("min_accuracy",)  # the image task's, in every flat configuration from before

    @classmethod
    def from_dict(cls, values: Mapping[str, Any], source: str) -> LanguageOptions:
        values = dict(values)
        data = dict(values.get("data_options") or {})
        for name in MOVED:
            if name in data:
                if values.get(name) is not None:
                    raise ConfigError(f"give {name} once, not also in data_options, in {source}")
                values[name] = data.pop(name)
        if "data_options" in values:
            values["data_options"] = data
        return read_section(cls, values, source)

    def to_dict(self) -> dict[str, Any]:
        return {
            "max_val_loss": self.max_val_loss,
            "context": self.context,
            "epoch_tokens": self.epoch_tokens,
            "data_options": dict(self.data_options),
            "seed_network": dict(self.seed_network),
        }

    def ref_options(self) -> dict[str, Any]:
        """The data set's options, with the context and an epoch's tokens where set (a worker
        reads its windows and its epoch's length from them)."""
        own = {name: getattr(self, name) for name in MOVED if getattr(self, name) is not None}
        return {**self.data_options, **own}
