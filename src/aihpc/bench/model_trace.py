"""What one step of a network does, per reported module: counted on the meta device, timed under the
profiler.

The machinery of :mod:`aihpc.bench.model` (which documents the method and
the data format).  A *row* is a reported module's name (``"(model)"`` for
the model itself), ``"(loss)"`` or ``"other"``; a row holds what the module
does itself, not what its reported sub-modules do.

* :func:`row_ops` -- operations per row and phase, counted by
  ``torch.utils.flop_counter`` with :mod:`aihpc.counting`'s formulas as
  :func:`aihpc.counting.count_ops` counts them, on a meta-device copy.  A
  forward op goes to the innermost reported module running; a backward op to
  the row whose forward created the autograd node running it (every node a
  torch function creates is claimed by the row on top at that moment).  This
  is exact where the module tracker behind ``count_ops``' ``by_module`` is
  not: in backward it charges a branch that shares its input with another
  (a ResNet block's downsample next to its first conv) to both.
* :func:`traffic` -- bytes per row of one eval forward on a meta-device copy
  in the compute dtype (the less of its own aten ops' reads and writes and
  its module's inputs, outputs and own parameters), and the sum and the
  largest of the op outputs (the memory estimate of ``check_fits``).
* :func:`profile_layers` -- per-row seconds of a few steps under
  ``torch.profiler`` (forward through ``record_function`` ranges, backward
  through the autograd sequence numbers the profiler records) and seconds
  per ``count_ops`` operator family; medians over the steps.
"""

from __future__ import annotations

import bisect
import contextlib
import copy
import math
import os
import statistics
import sys
from collections.abc import Callable, Collection, Iterator
from functools import cache
from typing import Any

import torch
import torch.nn.functional as F
import torch.utils._pytree as pytree
from torch import nn
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import FlopCounterMode

from aihpc.base.errors import ModelError

MODEL, LOSS, OTHER = "(model)", "(loss)", "other"
MAX_PROFILED = 10
"""At most this many profiled steps (ResNet-20's training step is ~1,400 profiler events)."""
RANGE = "aihpc.layer:"
"""Prefix of the profiler range of a row's forward (the loss's too: ``RANGE + LOSS``)."""
_STEP = "aihpc.step"
_BACKWARD = "autograd::engine::evaluate_function: "


@contextlib.contextmanager
def _hooks(
    modules: dict[str, nn.Module], pre: Callable[..., Any], post: Callable[..., Any]
) -> Iterator[None]:
    """``pre(name, inputs)`` and ``post(name, output)`` around every reported module's forward
    (their return values are dropped: a hook returning a value would replace the module's)."""
    handles = []
    for name, module in modules.items():
        handles.append(
            module.register_forward_pre_hook(lambda m, a, n=name: None if pre(n, a) else None)
        )
        handles.append(
            module.register_forward_hook(lambda m, a, o, n=name: None if post(n, o) else None)
        )
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


def _meta_copy(
    model: nn.Module, modules: dict[str, nn.Module], example: torch.Tensor, dtype: torch.dtype
) -> tuple[nn.Module, dict[str, nn.Module], torch.Tensor]:
    """A meta-device copy of ``model`` in ``dtype`` (floating tensors), its reported modules and
    input."""
    memo: dict[int, Any] = {id(t): torch.empty_like(t, device="meta") for t in model.buffers()}
    memo.update(
        {
            id(p): nn.Parameter(torch.empty_like(p, device="meta"), requires_grad=p.requires_grad)
            for p in model.parameters()
        }
    )
    net = copy.deepcopy(model, memo).to(dtype)
    copies = dict(net.named_modules())
    x = torch.empty_like(example, device="meta")
    return (
        net,
        {n: copies["" if n == MODEL else n] for n in modules},
        x.to(dtype) if x.is_floating_point() else x,
    )


@contextlib.contextmanager
def _model_errors(model: nn.Module, example: torch.Tensor) -> Iterator[None]:
    """A model failing on the meta device is a one-line ModelError naming the input."""
    try:
        yield
    except (RuntimeError, IndexError, NotImplementedError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        shape = "x".join(map(str, example.shape))
        raise ModelError(
            f"{type(model).__name__} fails on input {shape} (on the meta device): {first}"
        ) from None


class _Traffic(TorchDispatchMode):  # type: ignore[no-untyped-call]
    """Bytes each aten op reads and writes (its tensor inputs and outputs, each storage once;
    views move nothing), charged to the row on top of ``stack``; ``outputs`` and ``largest``:
    the sum and the largest of the op outputs."""

    def __init__(self, stack: list[str]) -> None:
        super().__init__()  # type: ignore[no-untyped-call]  # torch leaves it unannotated
        self.stack = stack
        self.bytes: dict[str, int] = {}
        self.outputs = self.largest = 0

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        if getattr(func, "is_view", False):
            return out
        # storage (its C++ address: meta tensors all have data_ptr 0) -> bytes
        seen: dict[int, int] = {}
        for t in pytree.tree_leaves((args, kwargs or {})):
            if isinstance(t, torch.Tensor):
                seen[t.untyped_storage()._cdata] = t.numel() * t.element_size()
        for t in pytree.tree_leaves(out):
            if isinstance(t, torch.Tensor) and t.untyped_storage()._cdata not in seen:
                size = seen[t.untyped_storage()._cdata] = t.numel() * t.element_size()
                self.outputs += size
                self.largest = max(self.largest, size)
        self.bytes[self.stack[-1]] = self.bytes.get(self.stack[-1], 0) + sum(seen.values())
        return out


def _tensor_bytes(value: Any) -> int:
    return sum(
        t.numel() * t.element_size()
        for t in pytree.tree_leaves(value)
        if isinstance(t, torch.Tensor)
    )


def nearest_reported_ancestor(name: str, names: Collection[str]) -> str | None:
    """The reported module a row's module sits in (None for the model itself)."""
    while name != MODEL:
        name = name.rsplit(".", 1)[0] if "." in name else MODEL
        if name in names:
            return name
    return None


def traffic(
    model: nn.Module, example: torch.Tensor, modules: dict[str, nn.Module], dtype: torch.dtype
) -> _Traffic:
    """:class:`_Traffic` of one eval-mode forward and cross-entropy of a meta copy of ``model`` in
    ``dtype``; a module row's bytes are then capped at its inputs, outputs and own parameters."""
    net, reported, x = _meta_copy(model, modules, example, dtype)
    stack = [OTHER]
    mode = _Traffic(stack)
    moved = dict.fromkeys(reported, 0)

    def enter(name: str, inputs: Any) -> None:
        moved[name] += _tensor_bytes(inputs)
        stack.append(name)

    def leave(name: str, output: Any) -> None:
        moved[name] += _tensor_bytes(output)
        stack.pop()

    with _model_errors(model, example), _hooks(reported, enter, leave), torch.no_grad(), mode:
        logits = net.eval()(x)
        stack.append(LOSS)
        F.cross_entropy(logits, torch.zeros(logits.shape[0], dtype=torch.long, device="meta"))
    total = {name: _tensor_bytes(list(m.parameters())) for name, m in reported.items()}
    own = dict(total)
    for name in reported:
        parent = nearest_reported_ancestor(name, reported)
        if parent is not None:
            own[parent] -= total[name]  # the child's parameters are its row's
    for name in reported:
        mode.bytes[name] = min(mode.bytes.get(name, 0), moved[name] + own[name])
    return mode


class _RowOps(FlopCounterMode):
    """``count_ops``' formulas; a forward op counted for the row on top of ``stack``, a backward
    op for the row in ``nodes`` (autograd sequence number -> row) of the node running it."""

    def __init__(self, stack: list[str], nodes: dict[int, str]) -> None:
        from aihpc.counting.registry import FORMULAS

        super().__init__(display=False, custom_mapping={p: f.ops for p, f in FORMULAS.items()})
        self.stack, self.nodes = stack, nodes
        self.ops: dict[tuple[str, str], int] = {}

    def _count_flops(self, func_packet: Any, out: Any, args: Any, kwargs: Any) -> Any:
        if func_packet in self.flop_registry:
            n = int(self.flop_registry[func_packet](*args, **kwargs, out_val=out))
            node = torch._C._current_autograd_node()
            key = (
                (self.stack[-1], "forward")
                if node is None
                else (self.nodes.get(node._sequence_nr(), OTHER), "backward")
            )
            self.ops[key] = self.ops.get(key, 0) + n
        return out


class _ClaimNodes(TorchFunctionMode):
    """Every autograd node a torch function creates -> the row on top of ``stack`` (in
    ``nodes``)."""

    def __init__(self, stack: list[str], nodes: dict[int, str]) -> None:
        super().__init__()
        self.stack, self.nodes = stack, nodes

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        pending = [
            t.grad_fn for t in pytree.tree_leaves(out) if isinstance(t, torch.Tensor) and t.grad_fn
        ]
        while pending:  # new nodes lie between the output and nodes already claimed
            node = pending.pop()
            if node._sequence_nr() in self.nodes or type(node).__name__ == "AccumulateGrad":
                continue
            self.nodes[node._sequence_nr()] = self.stack[-1]
            pending.extend(n for n, _ in node.next_functions if n is not None)
        return out


def row_ops(
    model: nn.Module, example: torch.Tensor, modules: dict[str, nn.Module], training: bool
) -> dict[tuple[str, str], int]:
    """(row, "forward" | "backward") -> operations of one step (see the module docstring)."""
    net, reported, x = _meta_copy(model, modules, example, torch.float32)
    net.train(training)
    stack: list[str] = [OTHER]
    nodes: dict[int, str] = {}
    counter = _RowOps(stack, nodes)
    with (
        _model_errors(model, example),
        _hooks(reported, lambda n, _: stack.append(n), lambda *_: stack.pop()),
        counter,
        _ClaimNodes(stack, nodes),
        torch.enable_grad() if training else torch.no_grad(),
    ):
        logits = net(x)
        if training:
            stack.append(LOSS)
            torch.autograd.backward(
                F.cross_entropy(
                    logits, torch.zeros(logits.shape[0], dtype=torch.long, device="meta")
                )
            )
    return counter.ops


@contextlib.contextmanager
def _layer_ranges(modules: dict[str, nn.Module]) -> Iterator[None]:
    """Every reported module's forward inside a ``record_function`` range named after it."""
    open_ranges: dict[str, list[Any]] = {}

    def enter(name: str, _: Any) -> None:
        rf = torch.autograd.profiler.record_function(RANGE + name)
        rf.__enter__()  # type: ignore[no-untyped-call]  # torch leaves it unannotated
        open_ranges.setdefault(name, []).append(rf)

    with _hooks(modules, enter, lambda name, _: open_ranges[name].pop().__exit__(None, None, None)):
        yield


@cache
def _known_family(event_name: str) -> str | None:
    """``"aten::addmm"`` -> its ``count_ops`` family, or None if the counter does not know the
    op."""
    from torch.utils.flop_counter import flop_registry

    from aihpc.counting.registry import FORMULAS, KNOWN_ZERO, family

    if not event_name.startswith("aten::"):
        return None
    try:
        packet = getattr(torch.ops.aten, event_name[6:], None)
    except (AttributeError, RuntimeError):
        return None
    if packet is None or not (
        packet in FORMULAS or packet in KNOWN_ZERO or packet in flop_registry
    ):
        return None
    return family(packet)


class _Attribution:
    """Charges every profiled event's self time to a (row, phase), and aten events to a family;
    ``rows``, ``families`` and ``wall`` are medians over the profiled steps (seconds per step)."""

    def __init__(self, events: list[Any], device_type: str) -> None:
        self.scope: dict[int, tuple[str, Any] | None] = {}
        self.up: dict[int, str | None] = {}
        ordered = sorted(events, key=lambda e: e.time_range.start)
        seq_rows: dict[int, str] = {}
        for e in ordered:  # the op creating node k starts last among the events tagged k
            s = self._scope(e)
            if s is not None and s[0] == "range" and e.sequence_nr >= 0:
                seq_rows[e.sequence_nr] = s[1]
        bounds = [e for e in ordered if e.name == _STEP]
        starts = [e.time_range.start for e in bounds]
        rows: dict[tuple[str, str], list[float]] = {}
        families: dict[str, list[float]] = {}
        for e in ordered:
            step = max(0, bisect.bisect_right(starts, e.time_range.start) - 1)
            seconds = (
                e.self_device_time_total if device_type == "cuda" else e.self_cpu_time_total
            ) / 1e6
            s = self._scope(e)
            key = (
                (OTHER, "")
                if s is None
                else (s[1], "forward")
                if s[0] == "range"
                else (seq_rows.get(s[1], OTHER), "backward")
            )
            rows.setdefault(key, [0.0] * len(bounds))[step] += seconds
            if e.name.startswith("aten::"):
                families.setdefault(self._family(e), [0.0] * len(bounds))[step] += seconds
        self.steps = len(bounds)
        self.wall = statistics.median(e.cpu_time_total / 1e6 for e in bounds)
        self.rows = {k: statistics.median(v) for k, v in rows.items()}
        self.families = {k: statistics.median(v) for k, v in families.items()}

    def _scope(self, e: Any) -> tuple[str, Any] | None:
        chain = []
        while e is not None and id(e) not in self.scope:
            chain.append(e)
            e = e.cpu_parent
        s = self.scope[id(e)] if e is not None else None
        for x in reversed(chain):
            if x.name.startswith(RANGE):
                s = ("range", x.name[len(RANGE) :])
            elif x.name.startswith(_BACKWARD):
                s = ("backward", x.sequence_nr)
            self.scope[id(x)] = s
        return s

    def _family(self, e: Any) -> str:
        """The family of the outermost op the counter knows in ``e``'s aten call chain (an
        ``mkldnn_convolution`` under ``convolution`` is "convolution"), else ``e``'s own name:
        a composite wrapper (``conv2d``, ``linear``; little self time) or a fused kernel the
        counter does not see (``mkldnn_rnn_layer``)."""
        return self._up(e) or e.name[6:]

    def _up(self, e: Any) -> str | None:
        chain = []
        while e is not None and e.name.startswith("aten::") and id(e) not in self.up:
            chain.append(e)
            e = e.cpu_parent
        fam = self.up.get(id(e)) if e is not None else None
        for x in reversed(chain):
            fam = fam or _known_family(x.name)
            self.up[id(x)] = fam
        return fam


def profile_layers(
    step: Callable[[], None],
    modules: dict[str, nn.Module],
    device: torch.device,
    step_seconds: float,
    seconds: float,
) -> _Attribution:
    """Profile about ``seconds`` of steps (1 to :data:`MAX_PROFILED`), each in a range of its
    own."""
    from torch.profiler import ProfilerActivity, profile

    steps = max(1, min(MAX_PROFILED, math.ceil(seconds / max(step_seconds, 1e-9))))
    prof = profile(
        activities=[ProfilerActivity.CPU]
        + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    )
    with _layer_ranges(modules):
        with _quiet_fd2():
            prof.start()
        try:
            for _ in range(steps):
                with torch.autograd.profiler.record_function(_STEP):
                    step()
                    if device.type == "cuda":
                        torch.cuda.synchronize(device)
        finally:
            with _quiet_fd2():
                prof.stop()
    events = prof.events()  # type: ignore[no-untyped-call]  # torch leaves it unannotated
    return _Attribution(list(events), device.type)


@contextlib.contextmanager
def _quiet_fd2() -> Iterator[None]:
    """Kineto writes a line to file descriptor 2 as a profile starts and stops; drop those."""
    sys.stderr.flush()
    try:
        saved = os.dup(2)
    except OSError:  # no file descriptor 2: nothing to silence
        yield
        return
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 2)
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
