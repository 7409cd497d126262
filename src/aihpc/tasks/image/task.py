"""The image task: classification, CNNs grown by function-preserving network morphism (AIPerf's).

Architectures are :class:`~aihpc.tasks.image.spec.ArchSpec` DAGs seeded by
:func:`aihpc.tasks.image.seeds.seed_spec` (ResNet-style, sized to the input; its
base width by device, :data:`SEEDS`) and grown by
:func:`aihpc.tasks.image.morphism.random_plan` (deepen, widen, skip).  Data are
:mod:`aihpc.tasks.image.data`'s image sets; quality is the validation accuracy;
operations are counted per image (:mod:`aihpc.tasks.image.count` is the
verifier's fast path of the same count).

The seed is smaller than compute-optimal for the default budget (5 minutes),
so that growing is needed: what one worker can do in that budget is many times
the seed's :meth:`ImageTask.min_train_ops` (4 epochs of the data) on the CPU
and on a GPU alike (docs/design/default-workload.md, "The seed network", gives
the figures and where they were measured).  Training images are shifted at
random (:mod:`aihpc.tasks.image.augment`), so that no network fits the
training set early in the run.
"""

from __future__ import annotations

import functools
import random
from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from aihpc.base.config import RunConfig, TaskOptions
from aihpc.base.errors import ConfigError
from aihpc.nas.tpe_study import SearchSpace
from aihpc.records.codec import Record
from aihpc.records.messages import DataRef
from aihpc.records.run_data import ImageDataRecord
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
    own,
)
from aihpc.tasks.image.options import SHIFT_KEY, ImageOptions
from aihpc.tasks.image.quality import arch_rows
from aihpc.tasks.quality import ACCURACY, ReportQuality

if TYPE_CHECKING:
    import torch

    from aihpc.tasks.image.spec import ArchSpec

# Largest network a child may grow to, by device kind, when max_params is not set
# (GPU: the ResNet-50 seed's 23.7 M parameters, with room for a widened stage).
DEFAULT_MAX_PARAMS = {"cpu": 2_000_000, "cuda": 60_000_000}
# The batch sizes the hyperparameter search picks from, when batch_sizes is not set.
# GPU: a batch of 128 at 128x128 is too little work per kernel: it ran at under half the rate of 512
# (benchmarks/gpu_fill.py; docs/measurements/2026-11-29-figures-from-code-comments.md).
DEFAULT_BATCH_SIZES = {"cpu": (32, 64, 128), "cuda": (256, 512)}
# The seed network's base width by device kind and seed size (aihpc.tasks.image.seeds.SIZES),
# where it is not the size's own: on the CPU, the default data's (why: docs/design/
# default-workload.md, "The seed network")
SEEDS: dict[str, dict[str, int]] = {"cpu": {"cifar": 8}, "cuda": {}}
# The epochs of the run's data a network needs to be worth training (min_train_ops): the geometric
# middle of 2 and 8 epochs, a drawn trial budget's span when it was set (at 32 epochs growth nearly
# stopped and the best accuracy was lower: docs/measurements/2026-11-29-fork-leader-cpu.md)
WORTH_EPOCHS = 4
# The default workload: a synthetic data set sized to the device kind, so that the search has
# room to improve all through a 5-minute run (docs/design/default-workload.md: its ceiling, and
# how the CPU's and the GPU's were chosen and measured).
DEFAULT_SYNTHETIC = {
    "cpu": {
        "num_samples": 12000,
        "num_classes": 50,
        "channels": 3,
        "image_size": 16,
        "difficulty": 0.6,
    },
    "cuda": {
        "num_samples": 50000,
        "num_classes": 100,
        "channels": 3,
        "image_size": 128,
        "difficulty": 0.6,
    },
}


class ImageTask:
    """Image classification (see the module docstring); stateless."""

    name: str = "image"
    datasets: tuple[str, ...] = ("digits", "synthetic", "imagefolder", "npz")
    mlperf_benchmark: str = "aihpc_automl"
    grad_clip: float | None = None
    peak_kernels: tuple[str, ...] = ("matmul", "conv")
    # regional compilation (aihpc.train.regions) off on both: measured slower over a search
    # (docs/measurements/2026-11-26-regional-compilation-cpu.md, 2026-11-27-gpu-h100.md)
    compile_auto: Mapping[str, bool] = MappingProxyType({"cpu": False, "cuda": False})
    options_type: type[TaskOptions] = ImageOptions
    input_kind: str = "image"
    generates: bool = False
    report_quality: ReportQuality = ACCURACY
    data_record: type[Record] = ImageDataRecord

    def default_workload(self, config: RunConfig, device: str) -> RunConfig:
        search = config.search
        if search.optimizer is None:
            config = config.replace(optimizer="sgd")
        if search.batch_sizes is None:
            config = config.replace(batch_sizes=list(DEFAULT_BATCH_SIZES[device]))
        if config.run.dataset != "synthetic":
            return config
        options = {**DEFAULT_SYNTHETIC[device], **_options(config).data_options}
        return config.replace(data_options=options)

    def inspect_data(self, config: RunConfig, device: str) -> DataInfo:
        from aihpc.tasks.image.data import load_dataset
        from aihpc.tasks.image.data.ceiling import task_description

        data = load_dataset(
            config.run.dataset,
            path=config.run.data_path,
            seed=config.run.seed,
            **_options(config).data_options,
        )
        info: DataInfo = {
            "input_shape": list(data.input_shape),
            "num_classes": data.num_classes,
            "seed_network": seed_network(
                tuple(data.input_shape), device, _options(config).seed_width
            ),
        }
        seed_params = self.seed_arch(info).num_params()
        max_params = config.search.max_params or DEFAULT_MAX_PARAMS[device]
        if seed_params > max_params:
            raise ConfigError(
                f"max_params must be at least the seed network's {seed_params} parameters, "
                f"got {max_params}"
            )
        return {
            "name": data.name,
            **info,
            "num_train": data.num_train,
            "num_val": data.num_val,
            "max_params": max_params,
            **task_description(data),
        }

    def quality(self, config: RunConfig, data: DataInfo) -> Accuracy:
        least = _options(config).min_accuracy
        return Accuracy(val_samples=int(data.get("num_val") or 1), min_accuracy=least)

    def search_space(self, config: RunConfig) -> SearchSpace:
        search = config.search
        assert search.batch_sizes is not None, "batch sizes are sized to the device first"
        return image_space(search.batch_sizes, search.optimizer or "sgd", search.schedule)

    def default_hparams(self, config: RunConfig) -> Hyperparameters:
        """SGD with momentum 0.9 at ResNet's learning rate of 0.1 per 256 images, scaled linearly
        to the batch (Goyal et al. 2017), weight decay 5e-4 (AdamW: 1e-3 and 1e-2), the middle
        batch size, no dropout."""
        search = config.search
        assert search.batch_sizes is not None, "batch sizes are sized to the device first"
        sizes = sorted(search.batch_sizes)
        batch = sizes[(len(sizes) - 1) // 2]
        optimizer = search.optimizer or "sgd"
        if optimizer == "sgd":
            lr, weight_decay = min(max(0.1 * batch / 256, 1e-3), 0.4), 5e-4
        else:
            lr, weight_decay = 1e-3, 1e-2
        return Hyperparameters(
            lr=lr,
            batch_size=batch,
            weight_decay=weight_decay,
            momentum=0.9,
            optimizer=optimizer,
            schedule=search.schedule,
        )

    def min_train_ops(self, arch: Arch, data: DataInfo) -> float:
        """:data:`WORTH_EPOCHS` epochs of the run's training images at the architecture's counted
        training operations per image.

        There is no compute-optimal rule for image classifiers as there is
        for language models, and the data are small: a search's budget buys
        epochs of the same images, not new ones.  A network that cannot be
        shown its training set a few times before the deadline ends
        undertrained, one that can be shown it many times is smaller than the
        budget could afford; 4 is the geometric middle of 2 and 8 epochs
        (:data:`WORTH_EPOCHS`).
        """
        train, _ = self.recount_per_sample(arch, 1, 0.0)
        return WORTH_EPOCHS * int(data["num_train"]) * train

    def seed_arch(self, data: DataInfo) -> ArchSpec:
        from aihpc.tasks.image.seeds import seed_spec

        width = data.get("seed_network", {}).get("width")
        return seed_spec(tuple(data["input_shape"]), int(data["num_classes"]), width=width)

    def arch(self, data: dict[str, Any]) -> ArchSpec:
        from aihpc.tasks.image.spec import ArchSpec

        return ArchSpec.from_dict(data)

    def arch_reader(self) -> Callable[[dict[str, Any]], ArchSpec]:
        """Reads each layer once: a child's architecture patched from its parent's shares the
        parent's Layer objects (:class:`aihpc.tasks.image.spec.LayerMemo`)."""
        from aihpc.tasks.image.spec import ArchSpec, LayerMemo

        return functools.partial(ArchSpec.from_dict, memo=LayerMemo())

    def plan(self, arch: Arch, rng: random.Random, max_params: int | None) -> Plan:
        from aihpc.tasks.image.morphism import random_plan

        return random_plan(_spec(arch), rng, max_params)

    def model(self, arch: Arch) -> torch.nn.Module:
        from aihpc.tasks.image.build import SpecNet

        return SpecNet(_spec(arch))

    def model_input(self, arch: Arch) -> tuple[tuple[int, ...], int | None]:
        return tuple(_spec(arch).input_shape), None

    def step_model(
        self,
        model: torch.nn.Module,
        optimizer: torch.optim.Optimizer,
        device: torch.device,
        world: int,
        cache: RegionRunner | None,
    ) -> StepModel:
        """The network itself under bfloat16 autocast on a GPU; compiled, region by region
        (:class:`aihpc.tasks.image.regions.RegionNet`: its stem, blocks and head), both its
        training and its evaluation passes."""
        autocast = device_autocast(device)
        if cache is None:
            return StepModel(model, autocast)
        from aihpc.tasks.image.build import SpecNet
        from aihpc.tasks.image.regions import RegionNet

        if not isinstance(model, SpecNet):
            raise TypeError(f"no regional compilation for a {type(model).__name__}")
        net = RegionNet(model, cache)
        return StepModel(net, autocast, ("train", "eval"), 2 * len(net.regions))

    def region_signatures(self, arch: Arch) -> frozenset[str]:
        from aihpc.tasks.image.regions import partition

        return frozenset(r.signature for r in partition(_spec(arch)))

    def count_per_sample(self, arch: Arch, batch: int, dropout: float) -> tuple[float, float]:
        import torch

        from aihpc.counting import count_ops

        meta = torch.device("meta")
        with meta:
            model = self.model(arch)
        for m in model.modules():
            if isinstance(m, torch.nn.Dropout):
                m.p = dropout
        x = torch.zeros((batch, *_spec(arch).input_shape), device=meta)
        y = torch.zeros(batch, dtype=torch.long, device=meta)
        train = count_ops(model, (x,), train=True, target=y).total / batch
        infer = count_ops(model, (x,), train=False).total / batch
        return train, infer

    def model_flops(self, arch: Arch, train_samples: int) -> float | None:
        return None

    def recount_per_sample(self, arch: Arch, batch: int, dropout: float) -> tuple[float, float]:
        """Layer by layer, each distinct layer counted once (:mod:`aihpc.tasks.image.count`)."""
        from aihpc.tasks.image.count import count_spec_per_sample

        return count_spec_per_sample(_spec(arch), batch, dropout)

    def splits(self, ref: DataRef) -> tuple[Split, Split]:
        from aihpc.tasks.image.data import load_dataset

        options = {k: v for k, v in ref.options_dict().items() if k != SHIFT_KEY}
        data = load_dataset(ref.name, path=ref.path, seed=ref.seed, **options)
        return data.train, data.val

    def staging_dtype(self, device: torch.device) -> torch.dtype:
        from aihpc.machine.devices import training_dtype

        return training_dtype(device)

    def sample_shape(self, arch: Arch) -> tuple[int, ...]:
        return tuple(_spec(arch).input_shape)

    def epoch_samples(self, ref: DataRef, train_samples: int) -> int:
        return train_samples

    def augment(self, xb: torch.Tensor, ref: DataRef, gen: torch.Generator) -> torch.Tensor:
        """Each image shifted at random (:mod:`aihpc.tasks.image.augment`), by at most the run's
        ``shift`` pixels, or by default an eighth of its smaller side."""
        from aihpc.tasks.image.augment import default_shift, shifted

        shift = ref.options_dict().get(SHIFT_KEY)
        if shift is None:
            shift = default_shift(xb.shape[-2], xb.shape[-1])
        return shifted(xb, int(shift), gen)

    def inputs_and_targets(
        self, xb: torch.Tensor, yb: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        return xb, yb

    def decode_ops(self, arch: Arch, prompt_tokens: int, new_tokens: int) -> tuple[float, float]:
        raise ValueError(
            "an image classifier answers a query with one forward pass; it does not generate"
        )

    def arch_rows(self, arch: Mapping[str, Any]) -> list[tuple[str, str]]:
        return arch_rows(arch)


def image_space(batch_sizes: Sequence[int], optimizer: str, schedule: str) -> SearchSpace:
    """The image task's: lr log-uniform in [1e-3, 0.4] (SGD) or [1e-4, 1e-2] (AdamW); weight
    decay log-uniform in [1e-6, 1e-2]; momentum in [0.5, 0.99]; dropout in [0, 0.5]; batch size
    one of ``batch_sizes``; ``optimizer`` and ``schedule`` fixed."""
    lr_low, lr_high = (1e-3, 0.4) if optimizer == "sgd" else (1e-4, 1e-2)
    return SearchSpace(
        floats=(
            ("lr", lr_low, lr_high, True),
            ("weight_decay", 1e-6, 1e-2, True),
            ("momentum", 0.5, 0.99, False),
            ("dropout", 0.0, 0.5, False),
        ),
        choices=(("batch_size", tuple(batch_sizes)),),
        fixed=(("optimizer", optimizer), ("schedule", schedule)),
    )


def seed_network(
    input_shape: tuple[int, ...], device: str, width: int | None = None
) -> dict[str, Any]:
    """What the seed network of ``input_shape`` on ``device`` sets (results.json's
    ``data.seed_network``): its base width, ``width`` where the run sets one (ConfigError where
    the seed's size is fixed), else by :data:`SEEDS`, where that gives one."""
    from aihpc.tasks.image.seeds import auto_size

    size = auto_size(input_shape)
    if width is not None:
        if size == "resnet50":
            raise ConfigError(
                f"seed_width does not apply to inputs of {input_shape[1]}x{input_shape[2]} (the "
                f"seed is ResNet-50, fixed), got {width}"
            )
        return {"width": width}
    width = SEEDS[device].get(size)
    return {} if width is None else {"width": width}


def _options(config: RunConfig) -> ImageOptions:
    """The image task's own settings of ``config`` (a TypeError for another task's)."""
    return own(config.options, ImageOptions, "the image task's settings")


def _spec(arch: Arch) -> ArchSpec:
    """``arch`` as the image task's architecture (a TypeError for another task's)."""
    from aihpc.tasks.image.spec import ArchSpec

    return own(arch, ArchSpec, "the image task's architectures")
