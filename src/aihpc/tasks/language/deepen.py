"""Growth in depth of decoder-only transformers: a new block, preserving the function.

Each operator keeps the contract of :mod:`aihpc.tasks.language.growth`: the child
computes exactly the parent's logits, its new random weights replay from a seed the plan
draws, and its ``plan_*`` twin's :class:`~aihpc.nas.moments.Growth` maps the weights and
the optimizer's state by the operator's gradient map, which ends its paragraph below.

:func:`add_block` -- a new pre-norm block ``x + attn(norm(x)) + mlp(norm(x))``
at position ``index`` whose attention output projection and MLP down
projection are zero, so both branches add exactly zero and the block is the
identity on the residual stream.  Its norms, q, k, v and MLP up projection
are random (gains 1), so the zero projections receive non-zero gradients at
once (zeroing both sides of a branch would stall it: each side's gradient
is a product with the other).  Gradients: the block's Jacobian is the
identity (both branches end in a zero matrix), so every parent tensor keeps
its gradient (factor 1), renumbered with its block; the new block's tensors
are new (no state).

Invalid requests raise :class:`~aihpc.base.errors.MorphError`.
"""

from __future__ import annotations

import random
from collections.abc import Mapping

import torch

from aihpc.base.checks import integer
from aihpc.base.errors import MorphError, SpecError
from aihpc.nas.moments import Growth, ParamState, ParamStates, copy_states
from aihpc.nas.plans import StateDict
from aihpc.tasks.language.growth import (
    STREAM_WRITES,
    LMPlan,
    check_lm_state,
    child_spec,
    filled,
    new_weights,
)
from aihpc.tasks.language.net import lm_state_shapes
from aihpc.tasks.language.spec import Block, LMSpec

__all__ = ["add_block", "plan_add_block"]


def plan_add_block(
    spec: LMSpec,
    index: int,
    rng: random.Random,
    heads: int | None = None,
    mlp_hidden: int | None = None,
) -> LMPlan:
    """Plan :func:`add_block` without touching weights (draws the weights' seed from ``rng``)."""
    n = spec.layers
    integer("add_block: index", index, 0, n, error=MorphError, what=f"in 0..{n}")
    like = spec.blocks[max(index - 1, 0)]
    try:
        new = Block(
            like.heads if heads is None else heads,
            like.mlp_hidden if mlp_hidden is None else mlp_hidden,
        )
    except SpecError as exc:
        raise MorphError(f"add_block: {exc}") from None
    blocks = spec.blocks[:index] + (new,) + spec.blocks[index:]
    child = child_spec(spec, "add_block", blocks=blocks)
    weights = new_weights(rng.getrandbits(63))
    prefix = f"blocks.{index}."
    new_shapes = {k: s for k, s in lm_state_shapes(child).items() if k.startswith(prefix)}

    def apply(state: Mapping[str, torch.Tensor]) -> StateDict:
        out = {_shift_block(k, index): v.detach().clone() for k, v in state.items()}
        randn = weights(state)
        for key, shape in new_shapes.items():
            if key.endswith("norm.weight"):
                out[key] = filled(state, 1.0, *shape)
            elif key.endswith(STREAM_WRITES):
                out[key] = filled(state, 0.0, *shape)
            else:
                out[key] = randn(*shape)
        return out

    def moments(states: Mapping[str, ParamState]) -> ParamStates:
        return {_shift_block(k, index): v for k, v in copy_states(states).items()}

    growth = Growth(apply, moments)
    return child, growth, f"add block {index} ({new.heads} heads, mlp {new.mlp_hidden})"


def _shift_block(key: str, index: int) -> str:
    """``key`` with its block number raised by one if it is ``index`` or later."""
    if not key.startswith("blocks."):
        return key
    number, rest = key[len("blocks.") :].split(".", 1)
    i = int(number)
    return f"blocks.{i + 1 if i >= index else i}.{rest}"


def add_block(
    spec: LMSpec,
    state: Mapping[str, torch.Tensor],
    index: int,
    rng: random.Random,
    heads: int | None = None,
    mlp_hidden: int | None = None,
) -> tuple[LMSpec, StateDict]:
    """Insert an identity block at position ``index`` (0..layers; later blocks move up one)
    with ``heads`` heads and ``mlp_hidden`` units, by default those of the block before it
    (block 0 when ``index`` is 0).  Exact: see the module docstring.  MorphError for a bad
    index or shape, or a state that does not match ``spec``."""
    check_lm_state(spec, state)
    child, growth, _ = plan_add_block(spec, index, rng, heads, mlp_hidden)
    return child, growth.weights(state)
