"""One random function-preserving growth step of a decoder-only transformer.

:func:`random_lm_plan` draws one of the growth operators -- a new block
(:mod:`aihpc.tasks.language.deepen`), a wider MLP, more heads, a wider residual stream or a
longer context (:mod:`aihpc.tasks.language.widen`) -- and plans it without touching weights;
:func:`random_lm_morph` applies the step to a state dict.  Each step keeps the contract of
:mod:`aihpc.tasks.language.growth`: the child computes exactly the parent's logits.

Invalid requests raise :class:`~aihpc.base.errors.MorphError`.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping

import torch

from aihpc.base.checks import integer
from aihpc.base.errors import MorphError
from aihpc.nas.plans import ATTEMPTS, StateDict, first_within
from aihpc.tasks.language.deepen import plan_add_block
from aihpc.tasks.language.growth import LMPlan, check_lm_state
from aihpc.tasks.language.spec import LMSpec
from aihpc.tasks.language.widen import (
    plan_add_heads,
    plan_grow_context,
    plan_widen_mlp,
    plan_widen_stream,
)

__all__ = ["KIND_WEIGHTS", "WIDTH_MULTIPLE", "random_lm_morph", "random_lm_plan"]

#: Grown widths (MLP, stream, heads * head_dim, context) are multiples of 16: vector units hold
#: 16 float32 values and tensor cores want multiples of 8 in bfloat16 (as the CNN's widths).
WIDTH_MULTIPLE = 16
#: How often :func:`random_lm_plan` proposes each kind; see its docstring for why.
KIND_WEIGHTS: dict[str, int] = {
    "add_block": 2,
    "widen_mlp": 2,
    "add_heads": 1,
    "widen_stream": 1,
    "grow_context": 1,
}


def _grown(old: int, rng: random.Random, multiple: int = WIDTH_MULTIPLE) -> int:
    """``old`` grown by 1/4, 1/2 or 1x of itself (at least 1), rounded up to ``multiple``."""
    grow = rng.choice([old, max(1, old // 2), max(1, old // 4)])
    return -(-(old + grow) // multiple) * multiple


def _propose(kind: str, spec: LMSpec, rng: random.Random, max_context: int) -> LMPlan:
    """One random plan of the given kind; MorphError if it does not apply."""
    if kind == "add_block":
        return plan_add_block(spec, rng.randrange(spec.layers + 1), rng)
    if kind == "widen_mlp":
        i = rng.randrange(spec.layers)
        return plan_widen_mlp(spec, i, _grown(spec.blocks[i].mlp_hidden, rng), rng)
    if kind == "add_heads":
        i = rng.randrange(spec.layers)
        heads = spec.blocks[i].heads
        # heads * head_dim a multiple of WIDTH_MULTIPLE where head_dim allows it
        step = WIDTH_MULTIPLE // math.gcd(spec.head_dim, WIDTH_MULTIPLE)
        return plan_add_heads(spec, i, _grown(heads, rng, step) - heads, rng)
    if kind == "widen_stream":
        return plan_widen_stream(spec, _grown(spec.width, rng), rng)
    if kind == "grow_context":
        return plan_grow_context(spec, min(max_context, _grown(spec.context, rng)))
    raise AssertionError(f"unknown kind {kind!r}")


def random_lm_plan(
    spec: LMSpec,
    rng: random.Random,
    max_params: int | None = None,
    max_context: int | None = None,
) -> LMPlan:
    """Plan one random exact growth step, drawn from ``rng``, without touching weights.

    The contract of :func:`aihpc.tasks.image.morphism.random_plan`: every draw comes
    from ``rng``, so the same spec and rng state give the same plan (the
    master plans, a worker replays it on the parent's weights); children with
    more than ``max_params`` parameters are skipped; up to 50 candidates are
    tried.  Kinds are drawn with :data:`KIND_WEIGHTS`: adding a block and
    widening one block's MLP twice as often as the rest, because depth and MLP
    width are where a standard decoder keeps most of its parameters (the MLP
    is two thirds of a block); a block's heads are the other third;
    widening the stream grows every projection and both embeddings at once,
    the coarsest step and the first to pass ``max_params``; context growth
    adds no parameter, only cost per sequence.  Widths grow by 1/4, 1/2 or 1x,
    rounded up to a multiple of :data:`WIDTH_MULTIPLE` (heads: so that
    ``heads * head_dim`` is one, where ``head_dim`` allows).  The context grows
    only up to ``max_context`` (default: the spec's own, i.e. never: the
    data decide the longest sequence).

    MorphError if the parent already exceeds ``max_params``, or if no
    candidate fits (naming ``max_params`` and the smallest child tried).
    """
    for name, value in (("max_params", max_params), ("max_context", max_context)):
        if value is not None:
            integer(f"random_lm_plan: {name}", value, error=MorphError)
    n_parent = spec.num_params()
    if max_params is not None and n_parent > max_params:
        raise MorphError(
            f"random_lm_plan: the parent has {n_parent} parameters, "
            f"more than max_params={max_params}"
        )
    limit = spec.context if max_context is None else max_context
    kinds = [k for k in KIND_WEIGHTS if k != "grow_context" or limit > spec.context]
    weights = [KIND_WEIGHTS[k] for k in kinds]
    plan, smallest = first_within(
        lambda: _propose(rng.choices(kinds, weights)[0], spec, rng, limit), max_params
    )
    if plan is not None:
        return plan
    if smallest is not None:
        raise MorphError(
            f"random_lm_plan: no growth step keeps the model within max_params={max_params}: "
            f"the smallest child tried has {smallest} parameters (parent: {n_parent})"
        )
    raise MorphError(f"random_lm_plan: no applicable growth step found in {ATTEMPTS} attempts")


def random_lm_morph(
    spec: LMSpec,
    state: Mapping[str, torch.Tensor],
    rng: random.Random,
    max_params: int | None = None,
    max_context: int | None = None,
) -> tuple[LMSpec, StateDict, str]:
    """Apply :func:`random_lm_plan`'s step to ``state``: ``(child_spec, child_state,
    description)``; MorphError as it, or if ``state`` does not match ``spec``."""
    check_lm_state(spec, state)
    child, growth, description = random_lm_plan(spec, rng, max_params, max_context)
    return child, growth.weights(state), description
