"""The contract every growth operator of a decoder-only transformer keeps, and what they share.

The operators grow a (spec, weights) pair: in depth (:mod:`aihpc.tasks.language.deepen`),
in width and in context (:mod:`aihpc.tasks.language.widen`);
:mod:`aihpc.tasks.language.morphism` draws one of them at random.

Every operator takes a parent :class:`~aihpc.tasks.language.spec.LMSpec` and its
``LMNet(spec).state_dict()`` and returns ``(child_spec, child_state)``:
``LMNet(child_spec)`` loaded with ``child_state`` (``strict=True``) computes
exactly the parent's logits, up to floating-point rounding, for every input
the parent accepts.  The child's tensors never alias the parent's; new ones
take the parent's dtype and device.  New random weights are normal(0, 0.02)
(:data:`~aihpc.tasks.language.net.INIT_STD`), drawn from a seed that the plan takes
from ``rng``, so a plan replays identically.  Each operator has a
``plan_*`` twin that plans the child without weights, as
:func:`aihpc.tasks.image.morphism.random_plan` does for CNNs; its
:class:`~aihpc.nas.moments.Growth` maps the weights and, beside them, the
optimizer's state by the operator's gradient map (:mod:`aihpc.nas.moments`:
moments times the gradient's factors, second moments times their squares,
new entries zero, new tensors no state).  Each operator's paragraph in its
module's docstring says why it preserves the function and ends with its
gradient map.

Invalid requests raise :class:`~aihpc.base.errors.MorphError`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace

import torch

from aihpc.base.checks import integer
from aihpc.base.errors import MorphError, SpecError
from aihpc.nas.moments import Growth
from aihpc.nas.plans import float_kind
from aihpc.tasks.language.net import INIT_STD, lm_state_shapes
from aihpc.tasks.language.spec import LMSpec

__all__ = [
    "STREAM_READS",
    "STREAM_WRITES",
    "LMPlan",
    "block_index",
    "check_lm_state",
    "child_spec",
    "filled",
    "new_weights",
]

#: A planned operator: child spec, its maps of the parent's weights and optimizer state
#: (:class:`~aihpc.nas.moments.Growth`), description.
LMPlan = tuple[LMSpec, Growth, str]

# the projections that read the residual stream (new input columns random when it widens) and
# those that write it (new output rows zero); every "...norm.weight" is a gain
STREAM_READS = (
    "attn.q.weight",
    "attn.k.weight",
    "attn.v.weight",
    "mlp.up.weight",
    "unembed.weight",
)
STREAM_WRITES = ("attn.out.weight", "mlp.down.weight")


def check_lm_state(spec: LMSpec, state: Mapping[str, torch.Tensor]) -> None:
    """MorphError unless ``state`` has the keys and shapes of ``LMNet(spec).state_dict()``."""
    if not isinstance(state, Mapping):
        raise MorphError(f"state must be a state dict (mapping), got {type(state).__name__}")
    expected = lm_state_shapes(spec)
    missing = sorted(set(expected) - set(state))
    unexpected = sorted(set(state) - set(expected))
    if missing or unexpected:
        raise MorphError(
            f"state dict does not match the LM spec: missing keys {missing[:5]}, "
            f"unexpected keys {unexpected[:5]}"
        )
    for key, shape in expected.items():
        value = state[key]
        if not isinstance(value, torch.Tensor) or tuple(value.shape) != shape:
            got = tuple(value.shape) if isinstance(value, torch.Tensor) else type(value).__name__
            raise MorphError(
                f"state dict does not match the LM spec: {key!r} is {got}, the spec needs {shape}"
            )


def child_spec(spec: LMSpec, op: str, **changes: object) -> LMSpec:
    """``spec`` with ``changes``; an invalid result is reported as MorphError."""
    try:
        return replace(spec, **changes)  # type: ignore[arg-type]
    except SpecError as exc:
        raise MorphError(f"{op}: the grown spec is invalid: {exc}") from None


def block_index(spec: LMSpec, block: object, op: str) -> int:
    last = spec.layers - 1
    return integer(f"{op}: block", block, 0, last, error=MorphError, what=f"in 0..{last}")


def new_weights(seed: int) -> Callable[[Mapping[str, torch.Tensor]], Callable[..., torch.Tensor]]:
    """A factory, per parent state, of normal(0, INIT_STD) tensors in the state's dtype and on
    its device, drawn in order from a CPU generator seeded with ``seed`` (replayable anywhere)."""

    def bind(state: Mapping[str, torch.Tensor]) -> Callable[..., torch.Tensor]:
        dtype, device = float_kind(state)
        gen = torch.Generator().manual_seed(seed)

        def randn(*shape: int) -> torch.Tensor:
            return (torch.randn(shape, generator=gen, dtype=dtype) * INIT_STD).to(device)

        return randn

    return bind


def filled(state: Mapping[str, torch.Tensor], fill: float, *shape: int) -> torch.Tensor:
    """A new tensor of ``shape`` filled with ``fill``, in the state's float dtype and device."""
    dtype, device = float_kind(state)
    return torch.full(shape, fill, dtype=dtype, device=device)
