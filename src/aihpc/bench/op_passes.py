"""One timed pass of a Level 0 operator: its operations, its bytes, its time and rates.

Steps 2 to 4 of :mod:`aihpc.bench.operators` (counting, timing, bytes), whose
module docstring gives the conventions; a
:class:`~aihpc.records.kinds_bench.PassRecord` is one pass's record (forward,
or forward+backward).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass

import torch
from torch import Tensor, nn

from aihpc.bench.op_check import SEED, as_leaves, as_tuple, differentiated, seeded
from aihpc.bench.timing import Timing, measure
from aihpc.records.kinds_bench import PassRecord
from aihpc.roofline.model import Roofline


@dataclass(frozen=True)
class TimingPlan:
    """Arguments of :func:`aihpc.bench.timing.measure` for every pass (seconds)."""

    warmup_s: float
    min_run_time: float
    max_run_time: float


MIN_BLOCKS = 3
"""Fewer timed blocks than this (a call slower than max_run_time / 3) gets a warning: no spread."""

QUICK_TIMING = TimingPlan(warmup_s=0.01, min_run_time=0.05, max_run_time=0.15)
FULL_TIMING = TimingPlan(warmup_s=0.05, min_run_time=0.2, max_run_time=2.0)


def finite_or_none(x: float | None) -> float | None:
    """``x`` where it is finite, else None (JSON has no inf)."""
    return None if x is None or not math.isfinite(x) else float(x)


class _Differentiated(nn.Module):
    """The operator with its floating inputs made leaves that require grad; returns the first
    output."""

    def __init__(self, op: nn.Module) -> None:
        super().__init__()
        self.op = op

    def forward(self, *inputs: Tensor) -> Tensor:
        return as_tuple(self.op(*as_leaves(inputs)))[0]


def count_case(module: nn.Module, inputs: Sequence[Tensor]) -> tuple[int, int, dict[str, int]]:
    """``(forward ops, forward+backward ops, uncounted)`` of the operator alone (the conventions
    of :mod:`aihpc.bench.operators`)."""
    from aihpc.counting import count_ops
    from aihpc.counting.counter import LOSS_KEY

    counted = count_ops(_Differentiated(module), tuple(inputs), train=True, loss="sum")
    loss = counted.by_module.get(LOSS_KEY, {"forward": 0, "backward": 0})
    forward = counted.forward - loss["forward"]
    return forward, counted.total - loss["forward"] - loss["backward"], dict(counted.uncounted)


def tensor_bytes(tensors: Iterable[Tensor | None]) -> int:
    """Bytes of the tensors' elements (``numel * element_size``); None counts 0."""
    return sum(t.numel() * t.element_size() for t in tensors if t is not None)


def traffic(
    module: nn.Module, inputs: Sequence[Tensor], outputs: Sequence[Tensor]
) -> tuple[int, int]:
    """``(forward bytes, forward+backward bytes)``, as :mod:`aihpc.bench.operators` counts them."""
    params = list(module.parameters())
    forward = tensor_bytes(inputs) + tensor_bytes(params) + tensor_bytes(outputs)
    gradients = tensor_bytes([x for x in inputs if x.is_floating_point()]) + tensor_bytes(params)
    return forward, forward + tensor_bytes(outputs[:1]) + gradients


def pass_result(
    ops: int, nbytes: int, timing: Timing, roofline: Roofline | None, dtype: str
) -> PassRecord:
    """Rates of one pass: ops / median seconds, bytes / median seconds, ops / bytes, roofline
    share."""
    seconds = timing.median
    warning = timing.warning
    if timing.blocks < MIN_BLOCKS:
        warning = (
            f"only {timing.blocks} timed block(s) fit in max_run_time: the spread is not measured"
            + (f"; {warning}" if warning else "")
        )
    flops = ops / seconds if seconds > 0 else math.inf
    intensity = ops / nbytes if nbytes else math.inf
    share = roofline.share(flops, intensity, dtype) if roofline is not None else None
    return PassRecord(
        seconds=seconds,
        spread=finite_or_none(timing.spread),
        warning=warning,
        calls=timing.calls,
        ops=ops,
        bytes=nbytes,
        flops_per_s=flops,
        bytes_per_s=nbytes / seconds if seconds > 0 else 0.0,
        intensity=intensity,
        roofline_share=finite_or_none(share),
    )


def time_passes(
    module: nn.Module, inputs: Sequence[Tensor], plan: TimingPlan, label: str
) -> tuple[Timing, Timing]:
    """Median seconds of the forward alone and of forward+backward, timed as documented there."""
    leaves = as_leaves(inputs)
    wrt = differentiated(module, leaves)
    with torch.no_grad(), seeded(leaves[0].device, SEED + 1):
        grad_output = torch.randn_like(as_tuple(module(*inputs))[0])

    def forward() -> None:
        with torch.no_grad():
            module(*inputs)

    def forward_backward() -> None:
        torch.autograd.grad(as_tuple(module(*leaves))[0], wrt, grad_output, allow_unused=True)

    kwargs = asdict(plan)
    return (
        measure(forward, label=f"{label} fwd", **kwargs),
        measure(forward_backward, label=f"{label} fwd+bwd", **kwargs),
    )
