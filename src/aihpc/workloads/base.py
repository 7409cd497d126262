"""What a science workload is: the contract every workload module implements.

A workload (:class:`Workload`) is a model, a data generator and a reader for
the real format, a quality metric, and a quality target, plus named sizes
(:class:`Size`) of its generated data and training hyperparameters.  The
time-to-train driver (:mod:`aihpc.workloads.ttt`) knows nothing else about it.

Data on disk follows the MLPerf HPC reference layout: ``DIR/train/`` and
``DIR/validation/`` hold one sample per file (plus any files a workload
needs beside them, e.g. DeepCAM's ``DIR/stats.h5``), so staging is a file
copy, as in the reference ``stage_files``.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import torch
from torch import nn

from aihpc.base.checks import integer
from aihpc.base.errors import ConfigError, DataError

SPLITS = ("train", "validation")


@dataclass(frozen=True)
class Size:
    """One named configuration of a workload: generated data and training settings.

    ``shape``: one sample's input as the model sees it, channels first;
    ``n_train``/``n_valid``: generated samples; ``batch_size``, ``lr``,
    ``max_epochs`` (the default budget, and the period of the learning
    rate's cosine decay); ``options``: workload-specific
    settings (e.g. model width), read by the workload only.
    """

    n_train: int
    n_valid: int
    batch_size: int
    lr: float
    max_epochs: int
    options: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name in ("n_train", "n_valid", "batch_size", "max_epochs"):
            value = getattr(self, name)
            integer(name, value)
        if not (isinstance(self.lr, float) and math.isfinite(self.lr) and self.lr > 0):
            raise ConfigError(f"lr must be a finite float > 0, got {self.lr!r}")


@dataclass(frozen=True)
class Samples:
    """A split read into memory: inputs ``x`` (N, C, ...) float32 and targets ``y``."""

    x: torch.Tensor
    y: torch.Tensor

    def __len__(self) -> int:
        return int(self.x.shape[0])


class Workload(ABC):
    """A science workload.  Subclasses set the class attributes and implement the methods.

    Contract: ``generate`` is deterministic in ``seed`` and writes only under
    ``out_dir``; ``read`` accepts the files ``generate`` writes and the
    documented real format, raising :class:`DataError` (one line, naming the
    file) for anything else; ``evaluate`` returns the quality metric of
    ``model`` on ``samples`` as a Python float, with the model left in eval
    mode; ``reached(value, target)`` says whether ``value`` meets ``target``.
    """

    name: ClassVar[str]  # as on the command line
    benchmark: ClassVar[str]  # MLPerf submission_benchmark, with a rules file of that name
    description: ClassVar[str]
    metric: ClassVar[str]  # e.g. "mae", "iou"
    metric_key: ClassVar[str]  # MLPerf key of the quality value: "eval_error" or "eval_accuracy"
    higher_is_better: ClassVar[bool]
    target: ClassVar[float]  # the reference quality target of the default size
    target_note: ClassVar[str]  # how the target was chosen
    loss_name: ClassVar[str]  # aihpc.count_ops loss: "mse" or "cross_entropy"
    sizes: ClassVar[dict[str, Size]]
    default_size: ClassVar[str] = "small"

    def size(self, name: str | None = None) -> Size:
        key = self.default_size if name is None else name
        if key not in self.sizes:
            raise ConfigError(
                f"unknown size {key!r} for workload {self.name}; valid: {', '.join(self.sizes)}"
            )
        return self.sizes[key]

    def reached(self, value: float, target: float) -> bool:
        return value >= target if self.higher_is_better else value <= target

    def better(self, value: float, best: float | None) -> bool:
        return best is None or (value > best if self.higher_is_better else value < best)

    @abstractmethod
    def generate(self, out_dir: Path, size: Size, seed: int) -> None:
        """Write ``size.n_train`` / ``size.n_valid`` samples in out_dir/{train,validation}."""

    @abstractmethod
    def read(self, data_dir: Path, split: str, size: Size) -> Samples:
        """Read split ``split`` ("train" or "validation") of the data under ``data_dir``."""

    @abstractmethod
    def input_shape(self, size: Size) -> tuple[int, ...]:
        """One sample's model input, channels first (no batch dimension)."""

    @abstractmethod
    def model(self, size: Size) -> nn.Module:
        """A freshly initialised model (seed torch first for a reproducible one)."""

    @abstractmethod
    def loss(self, train: Samples) -> nn.Module:
        """The training loss (it may depend on the training data, e.g. class weights)."""

    @abstractmethod
    def evaluate(self, model: nn.Module, samples: Samples, batch_size: int) -> float:
        """The quality metric of ``model`` on ``samples``."""

    def optimizer(
        self, model: nn.Module, size: Size
    ) -> tuple[torch.optim.Optimizer, Any, dict[str, Any]]:
        """The optimizer, its per-epoch learning-rate schedule, the hyperparameters MLPerf logs.

        By default Adam at ``size.lr`` with a cosine decay to 0 over the size's
        ``max_epochs`` (a budget given on the command line does not change it).
        """
        opt = torch.optim.Adam(model.parameters(), lr=size.lr)
        schedule = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=size.max_epochs)
        return (
            opt,
            schedule,
            {
                "opt_name": "adam",
                "opt_base_learning_rate": size.lr,
                "opt_learning_rate_decay_schedule": f"cosine over {size.max_epochs} epochs",
            },
        )


def split_files(data_dir: Path, split: str, suffixes: tuple[str, ...]) -> list[Path]:
    """The sample files of one split, sorted; DataError if the folder is missing or empty."""
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
    folder = Path(data_dir) / split
    if not folder.is_dir():
        raise DataError(
            f"data folder {folder} does not exist (expected {data_dir}/train and "
            f"{data_dir}/validation, as in the MLPerf HPC reference layout)"
        )
    files = sorted(p for p in folder.iterdir() if p.is_file() and p.name.endswith(suffixes))
    if not files:
        raise DataError(f"no {' or '.join(suffixes)} files in {folder}")
    return files
