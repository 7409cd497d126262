"""Checking an operator of :mod:`aihpc.bench.op_catalogue` against its reference.

:func:`check_case` checks a case in float64 at its ``check`` shape (outputs
and gradients within :data:`FLOAT64_TOLERANCE`, and
``torch.autograd.gradcheck``); :mod:`aihpc.bench.operators` shares the helpers
to validate each dtype: :func:`evaluate` (outputs and gradients of a candidate
or a reference) and :func:`errors` (relative L2 and max abs error).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from aihpc.bench.op_catalogue import Built, OpCase, Output

FLOAT64_TOLERANCE = 1e-9
"""Candidate against reference, both float64: only summation order differs (~K x 1e-16)."""

GRADCHECK: dict[str, Any] = {"eps": 1e-6, "atol": 1e-5, "rtol": 1e-3}
"""torch.autograd.gradcheck's defaults: central differences of step eps in float64."""

SEED = 0
"""Seed of every build (and, plus one, of every output gradient), so validation numbers repeat.

The output gradient must not be drawn from the same stream as the input: for
batch norm a gradient equal to its input x lies in the span of {1, x}, which
the backward projects out, leaving a near-zero, ill-conditioned gradient."""


@dataclass(frozen=True)
class CaseCheck:
    """The float64 checks of one operator at its ``check`` shape (shared by its dtype rows)."""

    gradcheck: bool
    l2: float
    grad_l2: float

    def problems(self) -> list[str]:
        """Why the case fails, one phrase each (empty when it passes)."""
        found = []
        if not self.l2 <= FLOAT64_TOLERANCE:
            found.append(
                "float64 output differs from the reference "
                f"(L2 {self.l2:.1e} > {FLOAT64_TOLERANCE:.0e})"
            )
        if not self.grad_l2 <= FLOAT64_TOLERANCE:
            found.append(f"float64 gradient differs from the reference's (L2 {self.grad_l2:.1e})")
        if not self.gradcheck:
            found.append("gradcheck: backward disagrees with finite differences")
        return found


@contextlib.contextmanager
def seeded(device: torch.device, seed: int = SEED) -> Iterator[None]:
    """Inside the block the RNG (CPU, and ``device`` if CUDA) starts from ``seed``; restored
    after."""
    with torch.random.fork_rng(devices=[device.index or 0] if device.type == "cuda" else []):
        torch.manual_seed(seed)
        yield


def build_case(
    case: OpCase, shape: dict[str, int], dtype: torch.dtype, device: torch.device
) -> Built:
    """The case's module and inputs at ``shape``, seeded with :data:`SEED`."""
    with seeded(device):
        return case.build(shape, dtype, device)


def as_tuple(out: Output) -> tuple[Tensor, ...]:
    """An operator's output as a tuple (the first item is the one differentiated)."""
    return out if isinstance(out, tuple) else (out,)


def as_leaves(inputs: Sequence[Tensor]) -> tuple[Tensor, ...]:
    """Floating inputs as fresh leaves that require grad; the others (targets) unchanged."""
    return tuple(x.detach().requires_grad_() if x.is_floating_point() else x for x in inputs)


def differentiated(module: nn.Module, leaves: Sequence[Tensor]) -> list[Tensor]:
    """What the backward computes gradients for: the leaves that require grad, then the
    parameters."""
    return [x for x in leaves if x.requires_grad] + list(module.parameters())


def evaluate(
    fn: Callable[..., Output],
    module: nn.Module,
    inputs: Sequence[Tensor],
    grad_output: Tensor | None,
) -> tuple[tuple[Tensor, ...], tuple[Tensor | None, ...], Tensor]:
    """Outputs of ``fn(module, *inputs)`` and the gradients of the first (for ``grad_output``,
    seeded random when None) w.r.t. the floating inputs and the parameters, and that gradient."""
    leaves = as_leaves(inputs)
    outputs = as_tuple(fn(module, *leaves))
    if grad_output is None:
        with seeded(outputs[0].device, SEED + 1):
            grad_output = torch.randn_like(outputs[0])
    wrt = differentiated(module, leaves)
    if not outputs[0].requires_grad:
        return outputs, (None,) * len(wrt), grad_output
    grads = torch.autograd.grad(
        outputs[0], wrt, grad_output.to(outputs[0].dtype), allow_unused=True
    )
    return outputs, tuple(grads), grad_output


def call_module(module: nn.Module, *inputs: Tensor) -> Output:
    """The candidate, called as :func:`evaluate` calls a reference: ``fn(module, *inputs)``."""
    output: Output = module(*inputs)
    return output


def errors(got: Sequence[Tensor | None], want: Sequence[Tensor | None]) -> tuple[float, float]:
    """``(relative L2, max abs)`` of ``got`` against ``want``, worst over the pairs.

    Relative L2 = ||got - want|| / ||want|| (the absolute norm where ||want|| = 0),
    computed in float64; inf where a value is not finite or a gradient is
    missing on one side only.  Empty pairs give (0, 0).
    """
    worst_l2 = worst_abs = 0.0
    for g, w in zip(got, want, strict=True):
        if g is None and w is None:
            continue
        if g is None or w is None or g.shape != w.shape:
            return math.inf, math.inf
        diff = g.detach().to(torch.float64) - w.detach().to(torch.float64)
        norm = float(torch.linalg.vector_norm(w.detach().to(torch.float64)))
        l2 = float(torch.linalg.vector_norm(diff)) / (norm if norm > 0 else 1.0)
        biggest = float(diff.abs().max()) if diff.numel() else 0.0
        worst_l2 = max(worst_l2, l2 if math.isfinite(l2) else math.inf)
        worst_abs = max(worst_abs, biggest if math.isfinite(biggest) else math.inf)
    return worst_l2, worst_abs


def _gradcheck(module: nn.Module, inputs: Sequence[Tensor]) -> bool:
    """gradcheck of all outputs w.r.t. the floating inputs and the parameters (float64)."""
    names = [n for n, _ in module.named_parameters()]
    floating = [i for i, x in enumerate(inputs) if x.is_floating_point()]
    tensors = tuple(inputs[i].detach().requires_grad_() for i in floating) + tuple(
        p.detach().requires_grad_() for p in module.parameters()
    )

    def fn(*values: Tensor) -> Output:
        args = list(inputs)
        for i, value in zip(floating, values, strict=False):
            args[i] = value
        params = dict(zip(names, values[len(floating) :], strict=True))
        output: Output = torch.func.functional_call(module, params, tuple(args))
        return output

    return bool(torch.autograd.gradcheck(fn, tensors, raise_exception=False, **GRADCHECK))


@contextlib.contextmanager
def _one_thread() -> Iterator[None]:
    """One intra-op thread inside the block.  The checks run ~1000 tiny kernels;
    with 2 OpenMP threads on a 2-core machine that other work keeps busy, each
    parallel region waits for a descheduled thread (a scheduler quantum, ~5-10
    ms): a conv gradcheck measured 0.1 s idle and 12 s loaded."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


def check_case(case: OpCase, device: torch.device) -> CaseCheck:
    """Candidate against reference and gradcheck, in float64 at the ``check`` shape."""
    with _one_thread():
        module, inputs = build_case(case, dict(case.check), torch.float64, device)
        outputs, grads, grad_output = evaluate(call_module, module, inputs, None)
        refs, ref_grads, _ = evaluate(case.reference, module, inputs, grad_output)
        l2, _ = errors(outputs, refs)
        grad_l2, _ = errors(grads, ref_grads)
        return CaseCheck(gradcheck=_gradcheck(module, inputs), l2=l2, grad_l2=grad_l2)
