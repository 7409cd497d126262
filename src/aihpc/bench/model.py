"""Deep500 Level 1: a network's time per layer and per operator type, beside its counted operations.

:func:`bench_network` times one step -- inference (eval mode, forward under
``no_grad``) and/or training (train mode, forward + cross-entropy + backward,
gradients set to None first) -- and explains it:

* **Whole step**: median and spread of :func:`aihpc.bench.timing.measure`.
* **Per layer**: about ``profile_seconds`` more steps run under
  ``torch.profiler``, each *reported module* inside a ``record_function``
  range opened and closed by forward pre/post hooks.  A layer's forward time
  is the self time of the events in its range and not in a nested reported
  module's.  Backward: autograd tags each node with the sequence number of
  the forward op that created it, the profiler records it on both, so each
  ``autograd::engine::evaluate_function`` is charged to the layer whose
  forward created the node.  ``AccumulateGrad``, the loss seed and zeroing
  the gradients belong to no layer.  Times are CPU self times on the CPU,
  kernel times (``self_device_time_total``) on CUDA, each the median over
  the profiled steps, so a step preempted by another process (4 ms slices
  on a busy CPU) loses that time from its layers but not from the measured
  step, where it lands in ``other``.  The profiler and the hooks cost a few
  microseconds per op and per module (``profiled_seconds`` vs ``seconds``).
* **Reported modules**: every module (``depth=None``) or those at most
  ``depth`` levels below the model (``"(model)"``, level 0).  A row is what
  a module does *itself*: a leaf's forward, a container's own functional ops
  (residual add, ``scaled_dot_product_attention``), never its reported
  children's.  Containers without operations of their own are left out
  (their time goes to ``other``).  Training adds the row ``"(loss)"``.
* **Operations** per row: counted on a meta-device copy with
  :func:`aihpc.counting.count_ops`' formulas, a backward op charged through
  its autograd node, like the time (:func:`aihpc.bench.model_trace.row_ops`),
  so the rows add up exactly to ``count_ops``' step (checked on every run);
  FLOP/s = operations / seconds.  The counter follows the CPU's
  decomposition, so a fused kernel has its time and its operations under
  different families in the operator list (CPU attention: time under
  "attention", operations under "bmm" and "softmax"; an LSTM: time under
  "mkldnn_rnn_layer", operations under "addmm", "sigmoid", ...).
* **Bytes** per row: one forward's traffic, from a meta-device copy in the
  compute dtype (nothing is allocated), the less of (a) what the row's own
  aten ops read and write, each op's tensor inputs and outputs once (views
  free, no reuse through caches) and (b) the module's inputs, outputs and
  own parameters once.  For a one-op layer (conv, linear, batch norm) the
  two agree; (a) is less for a container's own ops (a residual add reads
  two tensors, not the block's), (b) for a fused multi-op layer (an LSTM
  keeps its weights in cache over its time steps).  Backward is taken as
  2x the forward bytes (each tensor and its gradient).  Intensity = ops /
  bytes; ``roofline_share`` = FLOP/s over :meth:`Roofline.attainable` at
  that intensity (None: no peak for the dtype).
* **Per operator type**: each aten op's profiled self time, charged to the
  outermost op of its call chain that the counter knows and grouped into
  ``count_ops``' ``by_operator`` families (``mkldnn_convolution`` under
  ``convolution`` is "convolution"; an op with no known op above it keeps
  its own name), beside the family's counted operations.

Data format (the ``data`` of a ``bench-network`` result,
:class:`aihpc.records.kinds_bench.BenchNetworkData`; seconds, operations
and bytes per step of ``batch`` samples, rates in operations/s)::

    {"model": str | null, "spec": str | null, "input_shape": [...], "batch": int,
     "device": str, "dtype": str, "threads": int, "depth": int | null,
     "roofline": RooflineRecord,
     "modes": {"inference" | "training": {
         "seconds", "spread", "warning", "profiled_seconds", "profiled_steps",
         "ops", "flops_per_s", "peak_share", "other_seconds",
         "layers": [{"name", "type", "ops", "seconds", "share", "flops_per_s", "bytes",
                     "intensity", "roofline_share",
                     "forward": {...the same...}, "backward": {...}}, ...],  # training; model order
         "operators": [{"type", "seconds", "ops", "flops_per_s"}, ...]}},  # slowest first
     "points": [{"label": "MODE:LAYER", "dtype", "intensity", "flops_per_s"}, ...]}

``share``: the row's fraction of the measured step; ``other_seconds`` =
``seconds`` - the rows' sum (negative when profiling overhead exceeds the
unattributed time); the operator list ends with ``"other"``, the step less
the aten ops' time.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from aihpc.base.errors import ConfigError, ModelError
from aihpc.bench import model_trace as trace
from aihpc.bench.model_checks import (
    allocation_failed,
    check_dtype,
    check_fits,
    memory_guard,
    reported_modules,
)
from aihpc.bench.model_trace import LOSS, MODEL, OTHER
from aihpc.bench.timing import Timing, measure
from aihpc.records.kinds_bench import (
    BenchNetworkData,
    LayerRecord,
    ModeRecord,
    NetworkPointRecord,
    OperatorTypeRecord,
    PhaseRecord,
)
from aihpc.roofline.model import Roofline

__all__ = ["MODES", "NetworkResult", "bench_network"]

MODES = ("inference", "training")
PROFILE_SECONDS = 1.0
"""Profiled time per mode by default: about 10 steps of ResNet-20 at batch 8 on one CPU core
(inference ~11 ms, training ~40 ms a step, measured), one of ResNet-50's training (~2.4 s)."""


@dataclass(frozen=True)
class Phase:
    """One row's work in one phase: operations, seconds and bytes per step."""

    ops: int
    seconds: float
    bytes: int

    def __add__(self, other: Phase) -> Phase:
        return Phase(self.ops + other.ops, self.seconds + other.seconds, self.bytes + other.bytes)

    def to_record(self, roofline: Roofline, dtype: str, step_seconds: float) -> PhaseRecord:
        return PhaseRecord(**self._figures(roofline, dtype, step_seconds))

    def _figures(self, roofline: Roofline, dtype: str, step_seconds: float) -> dict[str, Any]:
        """The phase's fields of a :class:`PhaseRecord` (a layer's row holds them too)."""
        rate = self.ops / self.seconds if self.seconds > 0 else None
        intensity = self.ops / self.bytes if self.bytes > 0 else None
        share = roofline.share(rate, intensity, dtype) if rate is not None and intensity else None
        return {
            "ops": self.ops,
            "seconds": self.seconds,
            "share": self.seconds / step_seconds,
            "flops_per_s": rate,
            "bytes": self.bytes,
            "intensity": intensity,
            "roofline_share": share,
        }


@dataclass(frozen=True)
class LayerResult:
    """A reported module's own work: ``backward`` is None in inference."""

    name: str
    type: str
    forward: Phase
    backward: Phase | None

    @property
    def total(self) -> Phase:
        return self.forward if self.backward is None else self.forward + self.backward

    def to_record(self, roofline: Roofline, dtype: str, step_seconds: float) -> LayerRecord:
        """Both phases together; in training (a backward), each phase apart too."""
        figures = self.total._figures(roofline, dtype, step_seconds)
        if self.backward is None:
            return LayerRecord(name=self.name, type=self.type, **figures)
        return LayerRecord(
            name=self.name,
            type=self.type,
            **figures,
            forward=self.forward.to_record(roofline, dtype, step_seconds),
            backward=self.backward.to_record(roofline, dtype, step_seconds),
        )


@dataclass(frozen=True)
class ModeResult:
    """One mode's whole-step timing, profiled rows and operator types (seconds per step)."""

    mode: str
    timing: Timing
    profiled_seconds: float
    profiled_steps: int
    ops: int
    layers: tuple[LayerResult, ...]
    operators: tuple[tuple[str, float, int], ...]  # (family, seconds, ops), slowest first

    def to_record(self, roofline: Roofline, dtype: str) -> ModeRecord:
        step = self.timing.median
        rate = self.ops / step
        peak = roofline.peaks.get(dtype)
        operators = [
            OperatorTypeRecord(type=t, seconds=s, ops=n, flops_per_s=n / s if s > 0 else None)
            for t, s, n in self.operators
        ]
        other = step - sum(s for _, s, _ in self.operators)
        operators.append(OperatorTypeRecord(type=OTHER, seconds=other, ops=0, flops_per_s=None))
        return ModeRecord(
            seconds=step,
            spread=self.timing.spread,
            warning=self.timing.warning,
            profiled_seconds=self.profiled_seconds,
            profiled_steps=self.profiled_steps,
            ops=self.ops,
            flops_per_s=rate,
            peak_share=rate / peak if peak else None,
            other_seconds=step - sum(layer.total.seconds for layer in self.layers),
            layers=tuple(layer.to_record(roofline, dtype, step) for layer in self.layers),
            operators=tuple(operators),
        )


def _step(
    model: nn.Module,
    example: torch.Tensor,
    training: bool,
    autocast: Callable[[], Any],
    target: torch.Tensor,
) -> Callable[[], None]:
    """One step as a no-argument callable: an inference forward, or forward + loss + backward."""

    def infer() -> None:
        with torch.no_grad(), autocast():
            model(example)

    def train() -> None:
        model.zero_grad(set_to_none=True)
        with autocast():
            logits = model(example)
            with torch.autograd.profiler.record_function(trace.RANGE + LOSS):
                loss = F.cross_entropy(logits, target)
        torch.autograd.backward(loss)

    return train if training else infer


def _layers(
    modules: dict[str, nn.Module],
    ops: dict[tuple[str, str], int],
    moved: dict[str, int],
    seconds: dict[tuple[str, str], float],
    training: bool,
) -> tuple[LayerResult, ...]:
    """The rows in model order: each reported module's own operations, seconds and bytes
    (a container only when it has operations of its own), then the loss in training."""
    rows = []
    for name in [*modules, *([LOSS] if training else [])]:
        forward = Phase(
            ops.get((name, "forward"), 0), seconds.get((name, "forward"), 0.0), moved.get(name, 0)
        )
        backward = (
            Phase(
                ops.get((name, "backward"), 0),
                seconds.get((name, "backward"), 0.0),
                2 * moved.get(name, 0),
            )
            if training
            else None
        )
        kind = "CrossEntropyLoss" if name == LOSS else type(modules[name]).__name__
        row = LayerResult(name, kind, forward, backward)
        container = name == MODEL or any(n.startswith(name + ".") for n in modules)
        if name == LOSS or not container or row.total.ops:
            rows.append(row)
    return tuple(rows)


def _operators(
    families: dict[str, float], by_operator: dict[str, dict[str, int]]
) -> tuple[tuple[str, float, int], ...]:
    """(family, seconds per step, counted operations), slowest first."""
    names = dict.fromkeys([*families, *by_operator])
    rows = [(n, families.get(n, 0.0), sum(by_operator.get(n, {}).values())) for n in names]
    return tuple(sorted(rows, key=lambda r: (-r[1], -r[2], r[0])))


def _run_mode(
    model: nn.Module,
    example: torch.Tensor,
    training: bool,
    modules: dict[str, nn.Module],
    moved: dict[str, int],
    autocast: Callable[[], Any],
    target: torch.Tensor,
    device: torch.device,
    profile_seconds: float,
) -> ModeResult:
    """Count, time and profile one mode."""
    from aihpc.counting import count_ops

    count = count_ops(model, example, train=training)
    ops = trace.row_ops(model, example, modules, training)
    if sum(ops.values()) != count.total:  # pragma: no cover - the two counts use the same formulas
        raise RuntimeError(
            f"per-layer operations {sum(ops.values())} != counted step {count.total}"
        )
    model.train(training)
    step = _step(model, example, training, autocast, target)
    mode = "training" if training else "inference"
    timing = measure(step, label=f"{mode} step")
    profiled = trace.profile_layers(step, modules, device, timing.median, profile_seconds)
    layers = _layers(modules, ops, moved, profiled.rows, training)
    operators = _operators(profiled.families, count.by_operator)
    return ModeResult(mode, timing, profiled.wall, profiled.steps, count.total, layers, operators)


@dataclass(frozen=True)
class NetworkResult:
    """Every mode of one network on one device and dtype; :meth:`to_record` is the result's
    ``data``."""

    device: str
    dtype: str
    batch: int
    input_shape: tuple[int, ...]
    depth: int | None
    threads: int
    roofline: Roofline
    modes: dict[str, ModeResult]

    def to_record(self, model: str | None, spec: str | None) -> BenchNetworkData:
        """The result's data, of the zoo ``model`` or the spec file ``spec`` (the other None)."""
        modes = {m: r.to_record(self.roofline, self.dtype) for m, r in self.modes.items()}
        points = tuple(
            NetworkPointRecord(
                label=f"{m}:{row.name}",
                dtype=self.dtype,
                intensity=row.intensity,
                flops_per_s=row.flops_per_s,
            )
            for m, mode in modes.items()
            for row in mode.layers
            if row.flops_per_s and row.intensity
        )
        return BenchNetworkData(
            model=model,
            spec=spec,
            device=self.device,
            dtype=self.dtype,
            batch=self.batch,
            input_shape=tuple(self.input_shape),
            depth=self.depth,
            threads=self.threads,
            roofline=self.roofline.to_record(),
            modes=modes,
            points=points,
        )


def _validate(model: nn.Module, example: torch.Tensor, autocast: Callable[[], Any]) -> torch.Tensor:
    """The logits of one eval-mode forward; ModelError if the model rejects the input or returns
    no 2-D logits."""
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad(), autocast():
            logits = model(example)
    except RuntimeError as exc:
        if allocation_failed(exc):
            raise
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        shape = "x".join(map(str, example.shape))
        raise ModelError(f"{type(model).__name__} does not accept input {shape}: {first}") from None
    finally:
        model.train(was_training)
    if not isinstance(logits, torch.Tensor) or logits.dim() != 2:
        raise ModelError(
            f"{type(model).__name__} must return 2-D logits (rows, classes), got "
            f"{tuple(logits.shape) if isinstance(logits, torch.Tensor) else type(logits).__name__}"
        )
    return logits


def _run_modes(
    model: nn.Module,
    example: torch.Tensor,
    modes: tuple[str, ...],
    modules: dict[str, nn.Module],
    moved: dict[str, int],
    autocast: Callable[[], Any],
    device: torch.device,
    profile_seconds: float,
) -> dict[str, ModeResult]:
    """Each of ``modes``, in :data:`MODES` order, on the model and batch already on ``device``."""
    logits = _validate(model, example, autocast)
    target = torch.randint(logits.shape[1], (logits.shape[0],), device=device)
    return {
        m: _run_mode(
            model,
            example,
            m == "training",
            modules,
            moved,
            autocast,
            target,
            device,
            profile_seconds,
        )
        for m in MODES
        if m in modes
    }


def bench_network(
    model: nn.Module,
    example: torch.Tensor,
    *,
    modes: tuple[str, ...] = MODES,
    device: torch.device,
    dtype: str = "float32",
    roofline: Roofline,
    depth: int | None = None,
    profile_seconds: float = PROFILE_SECONDS,
) -> NetworkResult:
    """Time ``model`` on the batch ``example`` (batch first) in each of ``modes`` on ``device``.

    ``dtype`` "float32", or "bfloat16" / "float16" through autocast; the
    model and the input are moved to ``device`` (the model is modified: its
    mode and gradients).  The training target is ``randint(classes, (rows,))``
    for the model's ``(rows, classes)`` logits.  ConfigError for bad
    arguments or a batch that does not fit in memory (:func:`check_fits`),
    ModelError for a model that rejects the input.  About ``profile_seconds``
    of steps are profiled per mode.
    """
    if not modes or any(m not in MODES for m in modes):
        raise ConfigError(f"modes must be among {', '.join(MODES)}, got {modes!r}")
    if not profile_seconds > 0:
        raise ConfigError(f"profile_seconds must be > 0, got {profile_seconds!r}")
    compute = check_dtype(dtype, device)

    def autocast() -> Any:
        return torch.autocast(
            device_type=device.type, dtype=compute, enabled=compute != torch.float32
        )

    modules = reported_modules(model, depth)
    measured = trace.traffic(model, example, modules, compute)
    check_fits(model, example, modes, device, dtype, measured)
    with memory_guard(f"batch {'x'.join(map(str, example.shape))}", device):
        model.to(device)
        example = example.to(device)
        results = _run_modes(
            model, example, modes, modules, measured.bytes, autocast, device, profile_seconds
        )
    return NetworkResult(
        device=str(device),
        dtype=dtype,
        batch=int(example.shape[0]),
        input_shape=tuple(example.shape[1:]),
        depth=depth,
        threads=torch.get_num_threads(),
        roofline=roofline,
        modes=results,
    )
