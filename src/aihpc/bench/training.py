"""Deep500 Level 2: time to a target validation accuracy, with the convergence curve.

:func:`time_to_target` trains a zoo model on a data set of :mod:`aihpc.tasks.image.data`
with SGD (momentum 0.9, constant learning rate, cross-entropy), evaluates the
whole validation split after every epoch, and stops at the first of:

* ``"target reached"``: validation accuracy >= the target (in (0, 1]);
* ``"budget exhausted: N epochs"``: the epoch budget is spent;
* ``"budget exhausted: M minutes"``: the wall-clock budget is spent.  It is
  checked at the end of each epoch (after its evaluation), as MLPerf
  evaluates at epoch boundaries, so a run overshoots it by at most one epoch;
* ``"diverged: non-finite training loss"``.

Clocks (seconds, ``time.perf_counter``, device synchronised at the edges):
``seconds`` of an epoch point is the *training* time summed from the start
of the first epoch to the end of this one, evaluation excluded; evaluation
is timed apart (``eval_s`` per epoch).  So ``time_to_target_s`` is training
seconds, the figure Deep500 and MLPerf compare; the wall-clock time of the
loop, evaluation included, is ``wall_s``.  Data loading and model building
come before the clocks start.  ``samples_per_s`` is the epoch's training
samples over its training seconds.

Determinism: ``seed`` seeds the weights, dropout and the order of the
training samples (one ``torch.Generator`` per epoch, keyed by seed and
epoch); the data set and its train/validation split are always those of
seed 0, so runs with different seeds differ only in what they should.  On the
CPU with the same thread count the same seed gives the same curve of
accuracies, bit for bit.  The last incomplete batch of an epoch is dropped
(a batch of one cannot train BatchNorm).

Result data (the ``data`` of a ``bench-training`` result file)::

    {"model": str, "dataset": str, "target": float, "reached": bool,
     "stop_reason": str, "time_to_target_s": float | None,
     "epochs": [{"epoch": int, "seconds": float, "eval_s": float,
                 "train_loss": float | None, "val_accuracy": float,
                 "samples": int, "samples_per_s": float}, ...],
     "throughput_samples_per_s": float, "device": str, "batch": int,
     "lr": float, "momentum": float, "seed": int, "max_epochs": int,
     "minutes": float, "threads": int, "parameters": int,
     "train_samples": int, "val_samples": int, "best_val_accuracy": float,
     "train_s": float, "eval_s": float, "wall_s": float}

``train_loss`` is the mean over the epoch's samples (None when it was not
finite); ``throughput_samples_per_s`` all training samples over all training
seconds.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

from aihpc.base.checks import integer
from aihpc.base.errors import ConfigError
from aihpc.machine.devices import resolve_device
from aihpc.records.kinds import BenchTrainingData, TrainingEpoch

MOMENTUM = 0.9
"""SGD momentum of every Level-2 run."""

DATA_SEED = 0
"""Seed of the data set and its split: fixed, so that ``--seed`` varies only the training."""


@dataclass(frozen=True)
class TrainingConfig:
    """What one Level-2 run trains, validated when built (ConfigError naming the value).

    ``minutes`` is the wall-clock budget (training and evaluation), ``lr``
    the constant learning rate, ``device`` ``cpu``, ``cuda``, ``cuda:N`` or
    ``auto`` (a GPU when there is one), ``threads`` the CPU threads of
    PyTorch's kernels during the run (None: PyTorch's default).
    """

    model: str
    target: float
    dataset: str = "digits"
    data_path: str | None = None
    max_epochs: int = 50
    minutes: float = 10.0
    batch: int = 64
    lr: float = 0.05
    device: str = "auto"
    seed: int = 0
    threads: int | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.target, (int, float)) or not 0.0 < self.target <= 1.0:
            raise ConfigError(
                f"target must be a validation accuracy in (0, 1], got {self.target!r}"
            )
        for name, minimum in (("max_epochs", 1), ("batch", 2), ("seed", 0), ("threads", 1)):
            value = getattr(self, name)
            if name == "threads" and value is None:
                continue
            integer(name, value, minimum)
        for name in ("minutes", "lr"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
                raise ConfigError(f"{name} must be > 0, got {value!r}")


@dataclass(frozen=True)
class EpochPoint:
    """One point of the convergence curve (see the module docstring for the clocks)."""

    epoch: int
    seconds: float
    eval_s: float
    train_loss: float | None
    val_accuracy: float
    samples: int
    samples_per_s: float


@dataclass(frozen=True)
class TrainingOutcome:
    """A finished Level-2 run: the curve, how it stopped, and the throughput."""

    config: TrainingConfig
    reached: bool
    stop_reason: str
    curve: tuple[EpochPoint, ...]
    device: str
    threads: int
    parameters: int
    train_samples: int
    val_samples: int
    wall_s: float

    @property
    def time_to_target_s(self) -> float | None:
        """Training seconds at the end of the epoch that reached the target; None if none did."""
        return self.curve[-1].seconds if self.reached else None

    @property
    def train_s(self) -> float:
        return self.curve[-1].seconds if self.curve else 0.0

    @property
    def throughput(self) -> float:
        """All training samples over all training seconds (samples/s)."""
        return sum(p.samples for p in self.curve) / self.train_s if self.train_s > 0 else 0.0

    def to_record(self) -> BenchTrainingData:
        """The result data documented in the module docstring."""
        c = self.config
        return BenchTrainingData(
            model=c.model,
            dataset=c.dataset,
            target=c.target,
            reached=self.reached,
            stop_reason=self.stop_reason,
            time_to_target_s=self.time_to_target_s,
            epochs=tuple(TrainingEpoch(**vars(p)) for p in self.curve),
            throughput_samples_per_s=self.throughput,
            device=self.device,
            batch=c.batch,
            lr=c.lr,
            momentum=MOMENTUM,
            seed=c.seed,
            max_epochs=c.max_epochs,
            minutes=c.minutes,
            threads=self.threads,
            parameters=self.parameters,
            train_samples=self.train_samples,
            val_samples=self.val_samples,
            best_val_accuracy=max((p.val_accuracy for p in self.curve), default=0.0),
            train_s=self.train_s,
            eval_s=sum(p.eval_s for p in self.curve),
            wall_s=self.wall_s,
        )


def check_fit(
    model: str, input_shape: tuple[int, ...], num_classes: int, batch: int, source: str
) -> None:
    """ConfigError unless zoo ``model`` maps ``batch`` images of ``input_shape`` to ``num_classes``
    logits.

    The model is built and run on the meta device (no memory, no arithmetic),
    in training mode, so a spatial size the model pools below 1x1 (VGG and
    AlexNet on 8x8 digits) or a model that takes token ids is caught before
    anything trains.  ``source`` names the data in the message.
    """
    from aihpc import models

    meta = models.info(model)
    shape = "x".join(map(str, input_shape))
    if getattr(meta, "input_kind", "image") != "image":
        raise ConfigError(f"model {model!r} takes token ids, not the {shape} images of {source}")
    try:
        with torch.device("meta"):
            net = models.create(model, num_classes=num_classes, in_channels=input_shape[0])
            logits = net(torch.empty((batch, *input_shape)))
    except (RuntimeError, ValueError) as exc:
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ConfigError(
            f"model {model!r} cannot take the {shape} images of {source}: {reason}"
        ) from None
    if tuple(logits.shape) != (batch, num_classes):
        raise ConfigError(
            f"model {model!r} gives logits of shape {tuple(logits.shape)} on the {shape} "
            f"images of {source}, not ({batch}, {num_classes})"
        )


@dataclass
class _Run:
    """What the epochs train with: the model, its optimizer, the data on the device."""

    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    x_train: torch.Tensor
    y_train: torch.Tensor
    x_val: torch.Tensor
    y_val: torch.Tensor
    device: torch.device


def _prepare(config: TrainingConfig, device: torch.device) -> _Run:
    """Load the data, check that the model fits it, build the seeded model and its optimizer."""
    from aihpc import models
    from aihpc.tasks.image.data import load_dataset

    models.info(config.model)  # an unknown model fails before the data set loads
    path = Path(config.data_path) if config.data_path is not None else None
    data = load_dataset(config.dataset, path=path, seed=DATA_SEED)
    source = f"data set {config.dataset!r}"
    check_fit(config.model, tuple(data.input_shape), data.num_classes, config.batch, source)
    x_train, y_train = data.tensors("train")
    x_val, y_val = data.tensors("val")
    if x_train.shape[0] < config.batch:
        raise ConfigError(
            f"batch must be at most the {x_train.shape[0]} training samples of "
            f"{config.dataset!r}, got {config.batch}"
        )
    torch.manual_seed(config.seed)
    model = models.create(
        config.model, num_classes=data.num_classes, in_channels=data.input_shape[0]
    ).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=config.lr, momentum=MOMENTUM)
    return _Run(
        model,
        optimizer,
        x_train.to(device),
        y_train.long().to(device),
        x_val.to(device),
        y_val.long().to(device),
        device,
    )


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _train_epoch(run: _Run, batch: int, seed: int, epoch: int) -> tuple[float, float, int]:
    """One epoch in a seeded order: (training seconds, mean loss, samples); the last partial batch
    dropped."""
    n = run.x_train.shape[0]
    order = torch.randperm(n, generator=torch.Generator().manual_seed(seed * 1_000_003 + epoch)).to(
        run.device
    )
    run.model.train()
    _sync(run.device)
    start = time.perf_counter()
    losses = []
    for i in range(n // batch):
        idx = order[i * batch : (i + 1) * batch]
        loss = F.cross_entropy(run.model(run.x_train[idx]), run.y_train[idx])
        run.optimizer.zero_grad(set_to_none=True)
        torch.autograd.backward(loss)
        run.optimizer.step()
        losses.append(loss.detach())
    mean_loss = float(torch.stack(losses).mean())  # one synchronisation per epoch, not per step
    _sync(run.device)
    return time.perf_counter() - start, mean_loss, (n // batch) * batch


def _evaluate(run: _Run, batch: int) -> tuple[float, float]:
    """(validation accuracy, seconds it took) over the whole validation split."""
    from aihpc.train.evaluation import evaluate
    from aihpc.train.feed import eval_batches
    from aihpc.train.staging import StagedSplit

    _sync(run.device)
    start = time.perf_counter()
    batches = eval_batches(StagedSplit(run.x_val, run.y_val), batch, 0, 1, run.device)
    _, accuracy, _ = evaluate(run.model, batches, contextlib.nullcontext(), math.inf)
    _sync(run.device)
    return accuracy, time.perf_counter() - start


def _stop_reason(config: TrainingConfig, point: EpochPoint, wall_s: float) -> str | None:
    """Why the run stops after ``point``, or None to go on (the target is checked first)."""
    if point.train_loss is None:
        return "diverged: non-finite training loss"
    if point.val_accuracy >= config.target:
        return "target reached"
    if point.epoch >= config.max_epochs:
        return f"budget exhausted: {config.max_epochs} epochs"
    if wall_s >= config.minutes * 60.0:
        return f"budget exhausted: {config.minutes:g} minutes"
    return None


def time_to_target(
    config: TrainingConfig, progress: Callable[[str], None] | None = None
) -> TrainingOutcome:
    """Train until the target or the budget (module docstring); ``progress`` gets one line per
    epoch.

    ``config.threads`` applies for the run only; PyTorch's thread count is restored afterwards.
    """
    previous = torch.get_num_threads()
    if config.threads is not None:
        torch.set_num_threads(config.threads)
    try:
        return _train_to_target(config, progress)
    finally:
        torch.set_num_threads(previous)


def _train_to_target(
    config: TrainingConfig, progress: Callable[[str], None] | None
) -> TrainingOutcome:
    """The loop of :func:`time_to_target`: epochs until a stop reason."""
    device = resolve_device(config.device)
    run = _prepare(config, device)
    curve: list[EpochPoint] = []
    train_s, reason = 0.0, None
    wall_start = time.perf_counter()
    while reason is None:
        epoch = len(curve) + 1
        seconds, loss, samples = _train_epoch(run, config.batch, config.seed, epoch)
        accuracy, eval_s = _evaluate(run, config.batch)
        train_s += seconds
        point = EpochPoint(
            epoch=epoch,
            seconds=train_s,
            eval_s=eval_s,
            train_loss=loss if math.isfinite(loss) else None,
            val_accuracy=accuracy,
            samples=samples,
            samples_per_s=samples / seconds,
        )
        curve.append(point)
        reason = _stop_reason(config, point, time.perf_counter() - wall_start)
        if progress is not None:
            progress(f"epoch {epoch}: {train_s:.2f} s of training, val accuracy {accuracy:.4f}")
    return TrainingOutcome(
        config=config,
        reached=reason == "target reached",
        stop_reason=reason,
        curve=tuple(curve),
        device=str(device),
        threads=torch.get_num_threads(),
        parameters=sum(p.numel() for p in run.model.parameters()),
        train_samples=run.x_train.shape[0],
        val_samples=run.x_val.shape[0],
        wall_s=time.perf_counter() - wall_start,
    )


def format_table(outcome: TrainingOutcome) -> str:
    """The convergence curve, one row per epoch, then the outcome line and the throughput."""
    c = outcome.config
    lines = [
        f"bench training: {c.model} on {c.dataset} ({outcome.train_samples} train, "
        f"{outcome.val_samples} val), "
        f"target val accuracy {c.target:g}, batch {c.batch}, lr {c.lr:g}, seed {c.seed}, "
        f"{outcome.device}",
        f"{'epoch':>5}  {'train s':>9}  {'eval s':>7}  {'train loss':>10}  {'val acc':>7}  "
        f"{'samples/s':>10}",
    ]
    for p in outcome.curve:
        loss = f"{p.train_loss:10.4f}" if p.train_loss is not None else f"{'nan':>10}"
        lines.append(
            f"{p.epoch:5d}  {p.seconds:9.3f}  {p.eval_s:7.3f}  {loss}  "
            f"{p.val_accuracy:7.4f}  {p.samples_per_s:10.0f}"
        )
    last, best = outcome.curve[-1], max(p.val_accuracy for p in outcome.curve)
    if outcome.reached:
        lines.append(
            f"TARGET REACHED: val accuracy {last.val_accuracy:.4f} >= {c.target:g} after "
            f"{last.epoch} epoch(s), {last.seconds:.3f} s of training "
            f"({outcome.wall_s:.3f} s with evaluation)"
        )
    else:
        lines.append(
            f"TARGET NOT REACHED ({outcome.stop_reason}): best val accuracy {best:.4f} < "
            f"{c.target:g} "
            f"after {last.epoch} epoch(s), {last.seconds:.3f} s of training"
        )
    lines.append(
        f"throughput: {outcome.throughput:.0f} samples/s over {outcome.train_s:.3f} s of training"
    )
    return "\n".join(lines)
