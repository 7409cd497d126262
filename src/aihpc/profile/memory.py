"""Memory of a training step at its peak, broken into what holds it.

All figures are bytes of tensor storage, each storage counted once (views
and tied weights share one):

* ``parameters``: the storages of ``model.parameters()``;
* ``gradients``: those of the parameters' ``.grad`` after a backward pass
  (equal to ``parameters`` for dense float32 training);
* ``optimizer_state``: the tensors in ``optimizer.state``: SGD with
  momentum keeps one buffer per parameter (= ``parameters``); AdamW two
  moments (= 2 x ``parameters``) plus one float32 step counter (4 bytes)
  per parameter tensor;
* ``activations``: what autograd saves for the backward pass during the
  forward pass and the loss, seen through
  ``torch.autograd.graph.saved_tensors_hooks``, parameters' storages left
  out.  It holds the input batch where the first layer saves it (a weight
  gradient needs it), the token ids an embedding saves, and the loss's
  log-probabilities and targets;
* ``peak_bytes``: the most bytes allocated at once during a profiled step.
  On a GPU, ``torch.cuda.max_memory_allocated`` since
  ``reset_peak_memory_stats`` just before the profiled steps (everything on
  the device).  On the CPU, the bytes resident between steps (parameters,
  buffers, gradients, optimizer state) plus the highest running sum of the
  allocations and frees that ``torch.profiler`` (``profile_memory=True``)
  recorded during the profiled steps, in time order.  The host-side data set
  the batches are drawn from is not counted (on a GPU it is host memory);
  memory that libraries take outside PyTorch's allocator (oneDNN scratch
  pads) is not seen;
* ``other = peak - (parameters + gradients + optimizer_state +
  activations)``: buffers (batch-norm statistics), the batch and outputs
  autograd did not save, gradients of activations in flight during the
  backward pass, the optimizer's temporaries, workspaces.

Gradients stay allocated between steps (:mod:`aihpc.profile.step`) and every
saved activation is alive at the end of the loss, so the four parts are
resident at once and ``other`` is not negative.

The profiler's own categorised memory timeline
(``torch.profiler._memory_profiler.MemoryProfile``, what
``export_memory_timeline`` draws) does run on the CPU in torch 2.13, but it
needs ``record_shapes`` and ``with_stack`` (heavier traces), guesses
categories from a data-flow graph of the trace, and counts host tensors the
step merely reads (the data set).  The figures here are measured directly
and agree with it: ResNet-20, batch 32, one SGD step on the CPU, its
timeline peaks at 53,597,144 bytes without the data set, ours at 53,596,888;
its parameter, gradient and optimizer-state bytes equal ours (1,078,888
each), and its activation and autograd-detail bytes at the peak
(48,765,064) are within 0.3% of our saved activations (48,648,452).  The
test suite checks the parts against a small MLP worked by hand.

Before a step is built, :func:`check_fits` runs the forward pass and loss on
PyTorch's ``meta`` device (no memory, no compute) to find the saved
activations, and refuses a shape whose parameters, gradients, optimizer
state, activations and data exceed the free memory, with one line.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from aihpc import models
from aihpc.base.errors import ConfigError, OutOfMemory
from aihpc.profile.step import DATA_BATCHES, StepConfig, in_channels
from aihpc.records.kinds_measure import MemoryRecord

GIB = 2**30


def _storage_key(t: torch.Tensor) -> int:
    """Identity of a tensor's storage, valid on every device (``meta`` included) while it lives."""
    key: int = t.untyped_storage()._cdata
    return key


def unique_bytes(tensors: Iterable[torch.Tensor]) -> int:
    """Bytes of the distinct storages behind ``tensors``."""
    sizes = {_storage_key(t): t.untyped_storage().nbytes() for t in tensors}
    return sum(sizes.values())


def _state_tensors(value: Any) -> Iterator[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from _state_tensors(v)
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _state_tensors(v)


def parameter_bytes(model: nn.Module) -> int:
    return unique_bytes(model.parameters())


def gradient_bytes(model: nn.Module) -> int:
    return unique_bytes(p.grad for p in model.parameters() if p.grad is not None)


def optimizer_state_bytes(optimizer: torch.optim.Optimizer) -> int:
    return unique_bytes(_state_tensors(dict(optimizer.state)))


def resident_bytes(model: nn.Module, optimizer: torch.optim.Optimizer) -> int:
    """Bytes that outlive a step: parameters, buffers, gradients and optimizer state, each storage
    once."""
    grads = (p.grad for p in model.parameters() if p.grad is not None)
    return unique_bytes(
        [*model.parameters(), *model.buffers(), *grads, *_state_tensors(dict(optimizer.state))]
    )


class ActivationMeter:
    """``with ActivationMeter(model) as meter: loss = ...``; then ``meter.bytes``:
    the distinct storages autograd saved for backward inside the block, the
    model's parameters left out.  The saved tensors themselves are kept as
    they are (the hooks pack a tensor as itself), so the step is unchanged."""

    def __init__(self, model: nn.Module) -> None:
        self._exclude = {_storage_key(p) for p in model.parameters()}
        self._sizes: dict[int, int] = {}
        self._hooks = torch.autograd.graph.saved_tensors_hooks(self._pack, lambda t: t)

    def _pack(self, t: torch.Tensor) -> torch.Tensor:
        key = _storage_key(t)
        if key not in self._exclude:
            self._sizes[key] = t.untyped_storage().nbytes()
        return t

    def __enter__(self) -> ActivationMeter:
        self._hooks.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self._hooks.__exit__(*exc)

    @property
    def bytes(self) -> int:
        return sum(self._sizes.values())


def transient_peak(prof: torch.profiler.profile, device: torch.device) -> int:
    """Highest running sum, in time order, of the allocations (+) and frees (-)
    on ``device`` that ``prof`` (run with ``profile_memory=True``) recorded.

    Reads the allocation events of the profiler's event tree
    (``kineto_results.experimental_event_tree()``, an experimental API that
    ``MemoryProfile`` itself is built on; checked here on torch 2.13)."""
    from torch._C._profiler import _EventType

    events: list[tuple[int, int]] = []
    # inside the profile's block its profiler and results are set
    stack = list(prof.profiler.kineto_results.experimental_event_tree())  # type: ignore[union-attr]
    while stack:
        event = stack.pop()
        if event.tag == _EventType.Allocation and event.extra_fields.device.type == device.type:
            events.append((event.start_time_ns, event.extra_fields.alloc_size))
        stack.extend(event.children)
    running = peak = 0
    for _, size in sorted(events):
        running += size
        peak = max(peak, running)
    return peak


def memory_breakdown(
    peak_bytes: int,
    parameters: int,
    gradients: int,
    optimizer_state: int,
    activations: int,
    method: str,
) -> MemoryRecord:
    """Memory at the peak of a training step, in bytes (see the module docstring), with
    ``other``: what the peak holds beyond the parts named."""
    other = peak_bytes - parameters - gradients - optimizer_state - activations
    return MemoryRecord(
        peak_bytes=peak_bytes,
        parameters=parameters,
        gradients=gradients,
        optimizer_state=optimizer_state,
        activations=activations,
        other=other,
        method=method,
    )


def peak_method(device: torch.device) -> str:
    """How ``peak_bytes`` was measured on ``device``, in words."""
    if device.type == "cuda":
        return "torch.cuda.max_memory_allocated over the profiled steps"
    return (
        "resident tensors + peak running sum of torch.profiler memory events "
        "over the profiled steps"
    )


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def describe(config: StepConfig) -> str:
    """``"resnet18 at batch 32, input 3x224x224"``."""
    return f"{config.model} at batch {config.batch}, input {config.shape_text}"


def required_bytes(config: StepConfig, device: torch.device) -> int:
    """A lower bound on the bytes one training step of ``config`` needs on ``device``:
    parameters, gradients, optimizer state, saved activations and the batch
    (and, on the CPU, the host data set), from a pass on the meta device.
    ConfigError if the input shape does not fit the model."""
    with torch.device("meta"):
        model = models.create(config.model, in_channels=in_channels(config))
    x = models.example_input(config.model, config.batch, config.input_shape, device="meta")
    rows = config.batch * (1 if config.input_kind == "image" else config.input_shape[0])
    y = torch.empty(rows, dtype=torch.long, device="meta")
    meter = ActivationMeter(model)
    try:
        with meter:
            F.cross_entropy(model(x), y)
    except (RuntimeError, ValueError, IndexError) as exc:
        raise ConfigError(
            f"input {config.shape_text} does not fit {config.model}: {_first_line(exc)}"
        ) from None
    params = parameter_bytes(model)
    state = params * (2 if config.optimizer == "adamw" else 1)
    batch = x.nbytes + y.nbytes
    data = DATA_BATCHES * batch if device.type == "cpu" else 0
    return 2 * params + state + meter.bytes + batch + data


def available_bytes(device: torch.device) -> int:
    """Free memory on ``device``: the GPU's free bytes, or the host's available memory."""
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        return int(free) + int(
            torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)
        )
    import psutil

    return int(psutil.virtual_memory().available)


def check_fits(config: StepConfig, device: torch.device) -> None:
    """OutOfMemory, one line, if a training step of ``config`` cannot fit ``device``'s free
    memory."""
    need, free = required_bytes(config, device), available_bytes(device)
    if need > free:
        raise OutOfMemory(
            f"{describe(config)} does not fit in {device.type} memory: a training step needs at "
            f"least {need / GIB:.2f} GiB (parameters, gradients, optimizer state, activations, "
            f"data), {free / GIB:.2f} GiB is free"
        )


def _is_allocation_failure(exc: RuntimeError) -> bool:
    text = str(exc).lower()
    return isinstance(exc, torch.OutOfMemoryError) or any(
        s in text for s in ("can't allocate memory", "out of memory", "not enough memory")
    )


@contextlib.contextmanager
def allocation_errors(config: StepConfig, device: torch.device) -> Iterator[None]:
    """Turn a failed allocation inside the block into one-line OutOfMemory naming the shape."""
    try:
        yield
    except RuntimeError as exc:
        if not _is_allocation_failure(exc):
            raise
        message = f"{describe(config)} does not fit in {device.type} memory: {_first_line(exc)}"
    else:
        return
    if device.type == "cuda":
        torch.cuda.empty_cache()
    raise OutOfMemory(message)
