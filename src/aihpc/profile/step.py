"""One training step, run phase by phase under ``torch.profiler``, and its timing.

A step is five phases, each inside ``record_function("phase:<name>")`` and,
on a GPU, closed by a device synchronisation (so queued kernels are charged
to the phase that launched them; the trainer's own timer,
:class:`aihpc.train.timing.PhaseTimer`, reads CUDA events instead):

* ``data``: one batch gathered from a host-side data set made before the
  run (``DATA_BATCHES`` batches of random samples, visited in a fixed random
  order) and copied to the device; on the CPU the gather is the copy;
* ``forward``: the model; ``loss``: cross-entropy against random targets;
* ``backward``: ``loss.backward()``;
* ``optimizer``: ``step()`` then ``zero_grad(set_to_none=False)``: gradients
  stay allocated between steps, so parameters, gradients and optimizer state
  are all resident through the step (the memory model of
  :mod:`aihpc.profile.memory`; PyTorch's default ``set_to_none=True`` frees
  them instead and lowers the peak by at most the gradient bytes).

The whole step sits in ``record_function("profile:step")``.  Times are read
back from the profiler's events: a phase's seconds per step are the mean of
its ranges, its share that mean over the mean step; operator time is the self
time of each ``aten::`` op (CPU time on the CPU, kernel time on a GPU) per
step, charged to the op type of the outermost counted op around it
(:func:`operator_type`; the types are those of
:func:`aihpc.counting.registry.family`, backward ops under their forward op).
"""

from __future__ import annotations

import contextlib
import os
import statistics
import sys
import tempfile
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.autograd import DeviceType  # type: ignore[attr-defined, unused-ignore]
from torch.profiler import ProfilerActivity, profile, record_function

from aihpc import models
from aihpc.base.checks import integer, is_integer
from aihpc.base.errors import ConfigError
from aihpc.base.spread import spread as spread_of

PHASES = ("data", "forward", "loss", "backward", "optimizer")
OPTIMIZERS = ("sgd", "adamw")
DATA_BATCHES = 2
"""Batches in the host-side data set (the steps cycle through them)."""

STEP_RANGE = "profile:step"
_PHASE_PREFIX = "phase:"

#: Kernels the dispatcher reaches below the ops the counter knows, mapped to the counter's op type.
_KERNEL_TYPES = {
    "conv1d": "convolution",
    "conv2d": "convolution",
    "conv3d": "convolution",
    "mkldnn_convolution": "convolution",
    "cudnn_convolution": "convolution",
    "_convolution_mode": "convolution",
    "_nnpack_spatial_convolution": "convolution",
    "_slow_conv2d_forward": "convolution",
    "_slow_conv2d_backward": "convolution",
    "slow_conv_dilated2d": "convolution",
    "_conv_depthwise2d": "convolution",
    "mkldnn_convolution_backward": "convolution",
    "cudnn_convolution_backward": "convolution",
    "batch_norm": "batch_norm",
    "_batch_norm_impl_index": "batch_norm",
    "_batch_norm_impl_index_backward": "batch_norm",
    "lstm": "lstm",
    "mkldnn_rnn_layer": "lstm",
    "mkldnn_rnn_layer_backward": "lstm",
    "_thnn_fused_lstm_cell": "lstm",
    "_thnn_fused_lstm_cell_backward_impl": "lstm",
}


def input_kind(model: str) -> str:
    """``"image"`` or ``"tokens"``: what zoo model ``model`` takes (ModelError if unknown)."""
    return getattr(models.info(model), "input_kind", "image")


@dataclass(frozen=True)
class StepConfig:
    """One training step to profile, validated when built.

    ``input_shape`` is one sample's: ``(C, H, W)`` for an image model (a
    channel count other than the model's changes its first layer), ``(T,)``
    (the sequence length) for a tokens model.  ``steps`` profiled steps
    follow one warm-up step.  The device is not part of it: the same config
    runs wherever :func:`aihpc.profile.characterise` is pointed.
    """

    model: str
    batch: int
    input_shape: tuple[int, ...]
    steps: int = 3
    optimizer: str = "sgd"
    seed: int = 0

    def __post_init__(self) -> None:
        kind = input_kind(self.model)
        for name, value in (("batch", self.batch), ("steps", self.steps)):
            integer(name, value)
        if self.optimizer not in OPTIMIZERS:
            raise ConfigError(
                f"optimizer must be one of {', '.join(OPTIMIZERS)}, got {self.optimizer!r}"
            )
        rank = 3 if kind == "image" else 1
        shape = self.input_shape
        if len(shape) != rank or not all(is_integer(d, 1) for d in shape):
            form = "CxHxW" if kind == "image" else "T (the sequence length)"
            raise ConfigError(
                f"input shape of {self.model} ({kind} model) must be {form}, "
                f"got {'x'.join(map(str, shape)) or 'nothing'}"
            )

    @classmethod
    def for_model(
        cls, model: str, batch: int, input_shape: tuple[int, ...] | None = None, **options: Any
    ) -> StepConfig:
        """A config whose ``input_shape`` defaults to the model's own."""
        shape = tuple(models.info(model).input_shape) if input_shape is None else tuple(input_shape)
        return cls(model=model, batch=batch, input_shape=shape, **options)

    @property
    def input_kind(self) -> str:
        return input_kind(self.model)

    @property
    def shape_text(self) -> str:
        """``"3x224x224"``, or ``"35"`` for a sequence length."""
        return "x".join(map(str, self.input_shape))

    def with_changes(self, **changes: Any) -> StepConfig:
        return replace(self, **changes)


def make_optimizer(model: nn.Module, name: str) -> torch.optim.Optimizer:
    """SGD with momentum 0.9 (lr 0.01) or AdamW (lr 1e-3, weight decay 0.01)."""
    if name == "sgd":
        return torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    if name == "adamw":
        return torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    raise ConfigError(f"optimizer must be one of {', '.join(OPTIMIZERS)}, got {name!r}")


@dataclass
class StepWorkload:
    """What a profiled step trains: the model and optimizer on ``device``, and
    the host-side data set ``inputs`` (samples first) with ``targets``
    ``(samples, rows per sample)`` int64, visited batch by batch in ``order``."""

    model: nn.Module
    optimizer: torch.optim.Optimizer
    inputs: torch.Tensor
    targets: torch.Tensor
    order: tuple[torch.Tensor, ...]
    device: torch.device

    @classmethod
    def from_parts(
        cls,
        model: nn.Module,
        optimizer_name: str,
        inputs: torch.Tensor,
        targets: torch.Tensor,
        batch: int,
        device: torch.device,
        seed: int = 0,
    ) -> StepWorkload:
        """A workload for any model (already on ``device``) and host data set."""
        gen = torch.Generator().manual_seed(seed)
        order = torch.split(torch.randperm(inputs.shape[0], generator=gen), batch)
        if device.type == "cuda":
            inputs, targets = inputs.pin_memory(), targets.pin_memory()
        model.train()
        return cls(
            model, make_optimizer(model, optimizer_name), inputs, targets, tuple(order), device
        )

    def sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)


def in_channels(config: StepConfig) -> int | None:
    """The first layer's channels for ``models.create``: the input's where they differ from the
    model's, else None."""
    if (
        config.input_kind == "image"
        and config.input_shape[0] != models.info(config.model).input_shape[0]
    ):
        return config.input_shape[0]
    return None


def build_workload(config: StepConfig, device: torch.device) -> StepWorkload:
    """The zoo model of ``config`` on ``device``, its optimizer, and a random data set of
    DATA_BATCHES batches."""
    torch.manual_seed(config.seed)
    meta = models.info(config.model)
    model = models.create(config.model, in_channels=in_channels(config)).to(device)
    samples = DATA_BATCHES * config.batch
    inputs = models.example_input(config.model, samples, config.input_shape)
    rows = 1 if config.input_kind == "image" else config.input_shape[0]
    targets = torch.randint(meta.num_classes, (samples, rows))
    return StepWorkload.from_parts(
        model, config.optimizer, inputs, targets, config.batch, device, config.seed
    )


def run_step(w: StepWorkload, index: int) -> None:
    """Training step ``index`` (its batch is ``w.order[index % len]``), phase by phase."""
    with record_function(_PHASE_PREFIX + "data"):
        idx = w.order[index % len(w.order)]
        x = w.inputs[idx].to(w.device, non_blocking=True)
        y = w.targets[idx].reshape(-1).to(w.device, non_blocking=True)
        w.sync()
    with record_function(_PHASE_PREFIX + "forward"):
        logits = w.model(x)
        w.sync()
    with record_function(_PHASE_PREFIX + "loss"):
        loss = F.cross_entropy(logits, y)
        w.sync()
    with record_function(_PHASE_PREFIX + "backward"):
        torch.autograd.backward(loss)
        w.sync()
    with record_function(_PHASE_PREFIX + "optimizer"):
        w.optimizer.step()
        w.optimizer.zero_grad(set_to_none=False)
        w.sync()


@contextlib.contextmanager
def _kineto_notes_dropped() -> Iterator[None]:
    """Kineto writes ``USDT:``/``STAGE:`` notes straight to file descriptor 2
    when the profiler starts and stops; drop those lines, keep anything else."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as tmp:
        os.dup2(tmp.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            tmp.seek(0)
            lines = tmp.read().decode("utf-8", "replace").splitlines(keepends=True)
            kept = "".join(line for line in lines if not line.startswith(("USDT:", "STAGE:")))
            if kept:
                sys.stderr.write(kept)


def run_profiled(w: StepWorkload, steps: int, first: int = 1) -> profile:
    """Steps ``first .. first + steps - 1`` of ``w`` under a profiler recording
    memory events (and CUDA kernels on a GPU); returns the stopped profiler."""
    activities = [ProfilerActivity.CPU] + (
        [ProfilerActivity.CUDA] if w.device.type == "cuda" else []
    )
    prof = profile(activities=activities, profile_memory=True)
    with _kineto_notes_dropped():
        prof.start()
    try:
        for i in range(first, first + steps):
            with record_function(STEP_RANGE):
                run_step(w, i)
    finally:
        with _kineto_notes_dropped():
            prof.stop()
    return prof


@dataclass(frozen=True)
class PhaseTime:
    """A phase's mean seconds per step and its share of the mean step."""

    name: str
    seconds: float
    share: float


@dataclass(frozen=True)
class OperatorTime:
    """An op type's self time per step (seconds), its share of the mean step, and its calls per
    step (calls of the ops that decide the type, see :func:`operator_type`)."""

    type: str
    seconds: float
    share: float
    calls: float


@dataclass(frozen=True)
class StepTiming:
    """Times of the profiled steps: each step's seconds, the phases, the op types (slowest
    first)."""

    step_seconds: tuple[float, ...]
    phases: tuple[PhaseTime, ...]
    operators: tuple[OperatorTime, ...]

    @property
    def median(self) -> float:
        """Median seconds per step."""
        return statistics.median(self.step_seconds)

    @property
    def mean(self) -> float:
        return statistics.fmean(self.step_seconds)

    @property
    def spread(self) -> float:
        """IQR / median of the steps (:func:`aihpc.base.spread.spread`); 0 for a single step."""
        return spread_of(self.step_seconds)


def _counted_type(name: str) -> str | None:
    """The counter's op type of ``aten::<op>`` (or of a kernel below it), None for an op it has no
    formula for."""
    from aihpc.counting.registry import FORMULAS

    short = name.removeprefix("aten::")
    if short in _KERNEL_TYPES:
        return _KERNEL_TYPES[short]
    packet = getattr(torch.ops.aten, short, None) if short.isidentifier() else None
    formula = FORMULAS.get(packet) if packet is not None else None
    return formula.family if formula is not None else None


def operator_type(event: Any) -> tuple[str, int]:
    """The op type a profiler event is reported under, and the id of the call that decides it.

    That is the counter's type of the outermost ``aten::`` op around (or at)
    the event that has one, so the time of the kernels a call reaches is
    charged to what was called (``relu`` -> ``clamp_min`` is ``relu``,
    ``conv2d`` -> ``mkldnn_convolution`` is ``convolution``); an op under no
    counted op keeps its own name, without the in-place ``_``.
    """
    chosen = None
    node = event
    while node is not None:
        if node.name.startswith("aten::"):
            kind = _counted_type(node.name)
            if kind is not None:
                chosen = (kind, node.id)
        node = node.cpu_parent
    if chosen is not None:
        return chosen
    short = event.name.removeprefix("aten::")
    return (short[:-1] if short.endswith("_") and not short.endswith("__") else short), event.id


def step_timing(prof: profile, steps: int, device: torch.device) -> StepTiming:
    """The phases and op types of ``steps`` profiled steps, from the profiler's events."""
    ranges: dict[str, list[float]] = defaultdict(list)
    for event in prof.events():  # type: ignore[no-untyped-call]  # torch leaves it unannotated
        if event.device_type != DeviceType.CPU:  # a GPU's copy of a range (user annotation)
            continue
        if event.name == STEP_RANGE or event.name.startswith(_PHASE_PREFIX):
            ranges[event.name].append(event.time_range.elapsed_us() / 1e6)
    step_seconds = tuple(ranges[STEP_RANGE])
    if len(step_seconds) != steps:
        raise RuntimeError(f"the profiler recorded {len(step_seconds)} steps, expected {steps}")
    mean_step = statistics.fmean(step_seconds)
    phases = tuple(
        PhaseTime(
            name,
            sum(ranges[_PHASE_PREFIX + name]) / steps,
            sum(ranges[_PHASE_PREFIX + name]) / steps / mean_step,
        )
        for name in PHASES
    )
    return StepTiming(step_seconds, phases, operator_times(prof, steps, mean_step, device))


def operator_times(
    prof: profile, steps: int, mean_step: float, device: torch.device
) -> tuple[OperatorTime, ...]:
    """The op types' self time (device time on a GPU) per step over ``steps`` profiled steps,
    slowest first."""
    seconds: dict[str, float] = defaultdict(float)
    roots: dict[str, set[int]] = defaultdict(set)
    for event in prof.events():  # type: ignore[no-untyped-call]  # torch leaves it unannotated
        if event.device_type != DeviceType.CPU or not event.name.startswith("aten::"):
            continue
        us = event.self_device_time_total if device.type == "cuda" else event.self_cpu_time_total
        kind, root = operator_type(event)
        seconds[kind] += us / 1e6 / steps
        roots[kind].add(root)
    rows = [OperatorTime(k, s, s / mean_step, len(roots[k]) / steps) for k, s in seconds.items()]
    return tuple(sorted(rows, key=lambda r: (-r.seconds, r.type)))
