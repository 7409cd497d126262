"""The toy task ``blobs``: points classified by MLPs grown one identity layer at a time."""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any

import torch

from aihpc.base.config import RunConfig, TaskOptions
from aihpc.base.errors import ConfigError
from aihpc.nas.tpe_study import SearchSpace
from aihpc.records.codec import Record
from aihpc.records.messages import DataRef
from aihpc.records.trial import Hyperparameters
from aihpc.scoring.accuracy import Accuracy
from aihpc.tasks.base import (
    Arch,
    DataInfo,
    Plan,
    RegionRunner,
    Split,
    StepModel,
    device_autocast,
    other_fields,
    own,
)
from aihpc.tasks.quality import ACCURACY, ReportQuality
from toy_task.data import BlobsDataRecord, options, points
from toy_task.net import MLP, deepen
from toy_task.quality import BlobsOptions
from toy_task.spec import KIND, MLPSpec

#: The seed network's hidden layers.
SEED_HIDDEN = (16,)
#: Epochs of the training points a network needs to be worth training.
WORTH_EPOCHS = 4


class BlobsTask:
    """The toy task (the module docstring); stateless."""

    name: str = KIND
    datasets: tuple[str, ...] = ("synthetic",)
    grad_clip: float | None = None
    mlperf_benchmark: str = "aihpc_automl_blobs"
    peak_kernels: tuple[str, ...] = ("matmul",)
    compile_auto: Mapping[str, bool] = MappingProxyType({"cpu": False, "cuda": False})
    options_type: type[TaskOptions] = BlobsOptions
    input_kind: str = "points"
    generates: bool = False
    report_quality: ReportQuality = ACCURACY
    data_record: type[Record] = BlobsDataRecord

    # -- the run ----------------------------------------------------------------------------
    def default_workload(self, config: RunConfig, device: str) -> RunConfig:
        if config.search.screen:
            raise ConfigError(
                f"the blobs task has no proxies to screen with, got {config.search.screen}"
            )
        changes: dict[str, Any] = {"optimizer": config.search.optimizer or "sgd"}
        if config.search.batch_sizes is None:
            changes["batch_sizes"] = [32, 64]
        return config.replace(**changes)

    def inspect_data(self, config: RunConfig, device: str) -> DataInfo:
        given = _options(config).data_options
        train, val = points(given, config.run.seed)
        o = options(given)
        return {
            "name": config.run.dataset,
            "in_dim": o["dim"],
            "num_classes": o["classes"],
            "num_train": len(train),
            "num_val": len(val),
            "max_params": config.search.max_params or 100_000,
        }

    def quality(self, config: RunConfig, data: DataInfo) -> Accuracy:
        least = _options(config).min_accuracy
        return Accuracy(val_samples=int(data.get("num_val") or 1), min_accuracy=least)

    def search_space(self, config: RunConfig) -> SearchSpace:
        assert config.search.batch_sizes is not None, "batch sizes are set first"
        return SearchSpace(
            floats=(("lr", 1e-3, 0.3, True), ("weight_decay", 1e-6, 1e-3, True)),
            choices=(("batch_size", tuple(config.search.batch_sizes)),),
            fixed=(("optimizer", config.search.optimizer or "sgd"), ("schedule", "cosine")),
        )

    def default_hparams(self, config: RunConfig) -> Hyperparameters:
        assert config.search.batch_sizes is not None, "batch sizes are set first"
        return Hyperparameters(
            lr=0.05,
            batch_size=min(config.search.batch_sizes),
            weight_decay=1e-4,
            momentum=0.9,
            optimizer=config.search.optimizer or "sgd",
            schedule="cosine",
        )

    def min_train_ops(self, arch: Arch, data: DataInfo) -> float:
        train, _ = self.recount_per_sample(arch, 1, 0.0)
        return WORTH_EPOCHS * int(data["num_train"]) * train

    # -- architectures ------------------------------------------------------------------------
    def seed_arch(self, data: DataInfo) -> MLPSpec:
        return MLPSpec(int(data["in_dim"]), int(data["num_classes"]), SEED_HIDDEN)

    def arch(self, data: dict[str, Any]) -> MLPSpec:
        return MLPSpec.from_dict(data)

    def arch_reader(self) -> Callable[[dict[str, Any]], MLPSpec]:
        return MLPSpec.from_dict

    def plan(self, arch: Arch, rng: random.Random, max_params: int | None) -> Plan:
        return deepen(_spec(arch), rng, max_params)

    # -- models and their operations ----------------------------------------------------------
    def model(self, arch: Arch) -> torch.nn.Module:
        return MLP(_spec(arch))

    def model_input(self, arch: Arch) -> tuple[tuple[int, ...], int | None]:
        return (_spec(arch).in_dim,), None

    def step_model(
        self,
        model: torch.nn.Module,
        optimizer: torch.optim.Optimizer,
        device: torch.device,
        world: int,
        cache: RegionRunner | None,
    ) -> StepModel:
        return StepModel(model, device_autocast(device))

    def region_signatures(self, arch: Arch) -> frozenset[str]:
        return frozenset()

    def count_per_sample(self, arch: Arch, batch: int, dropout: float) -> tuple[float, float]:
        from aihpc.counting import count_ops

        meta = torch.device("meta")
        with meta:
            model = self.model(arch)
        x = torch.zeros((batch, _spec(arch).in_dim), device=meta)
        y = torch.zeros(batch, dtype=torch.long, device=meta)
        train = count_ops(model, (x,), train=True, target=y).total / batch
        infer = count_ops(model, (x,), train=False).total / batch
        return train, infer

    def model_flops(self, arch: Arch, train_samples: int) -> float | None:
        return None

    def recount_per_sample(self, arch: Arch, batch: int, dropout: float) -> tuple[float, float]:
        return self.count_per_sample(arch, batch, dropout)

    # -- data ----------------------------------------------------------------------------------
    def splits(self, ref: DataRef) -> tuple[Split, Split]:
        return points(ref.options_dict(), ref.seed)

    def staging_dtype(self, device: torch.device) -> torch.dtype:
        return torch.float32

    def sample_shape(self, arch: Arch) -> tuple[int, ...]:
        return (_spec(arch).in_dim,)

    def epoch_samples(self, ref: DataRef, train_samples: int) -> int:
        return train_samples

    def augment(self, xb: torch.Tensor, ref: DataRef, gen: torch.Generator) -> torch.Tensor:
        return xb

    def inputs_and_targets(
        self, xb: torch.Tensor, yb: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        return xb, yb

    # -- serving and reading a finished run ---------------------------------------------------
    def decode_ops(self, arch: Arch, prompt_tokens: int, new_tokens: int) -> tuple[float, float]:
        raise ValueError("a blobs classifier answers with one forward pass; it does not generate")

    def arch_rows(self, arch: Mapping[str, Any]) -> list[tuple[str, str]]:
        hidden = arch.get("hidden")
        widths = ", ".join(str(w) for w in hidden) if isinstance(hidden, list) else "n/a"
        return [("hidden widths", widths), *other_fields(arch, {"hidden"})]


def _options(config: RunConfig) -> BlobsOptions:
    return own(config.options, BlobsOptions, "the blobs task's settings")


def _spec(arch: Arch) -> MLPSpec:
    return own(arch, MLPSpec, "the blobs task's architectures")
