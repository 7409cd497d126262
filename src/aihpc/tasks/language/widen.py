"""Growth in width of decoder-only transformers (an MLP's hidden units, a block's heads,
the residual stream) and of their context, preserving the function.

Each operator keeps the contract of :mod:`aihpc.tasks.language.growth`: the child
computes exactly the parent's logits, its new random weights replay from a seed the plan
draws, and its ``plan_*`` twin's :class:`~aihpc.nas.moments.Growth` maps the weights and
the optimizer's state by the operator's gradient map, which ends its paragraph below.

:func:`widen_mlp` -- new hidden units with random input weights (rows of
``up``) and zero output weights (columns of ``down``): whatever GELU gives
them is multiplied by zero.  ``down``'s new columns get gradients at once;
``up``'s new rows from the next step on.  Gradients: the old entries keep
theirs (factor 1); the new rows and columns are new (zero moments).

:func:`add_heads` -- new heads of the same ``head_dim`` (so attention's
``1/sqrt(head_dim)`` scale is unchanged) with random q, k, v rows and zero
rows of the output projection (columns of ``attn.out.weight``, which is
stored ``(d, heads*head_dim)``).  Heads are computed independently, so the
old heads' outputs are unchanged and the new ones are multiplied by zero.
Gradients: as :func:`widen_mlp`'s, old entries factor 1, new rows of q, k,
v and new columns of the output projection zero.

:func:`widen_stream` -- the residual stream grows from ``d`` to ``d'``.  New
embedding columns are zero and the new output rows of every projection that
writes the stream (``attn.out``, ``mlp.down``) are zero, so the new
dimensions of the stream stay exactly zero everywhere.  Every projection
that reads the stream (q, k, v, ``mlp.up``, ``unembed``) gets random new
input columns, which multiply those zeros.  RMSNorm computes
``g * x / sqrt(mean(x**2) + eps)``; with zeros in the new dimensions the mean
of squares over ``d'`` is ``d/d'`` times the old one, so with
``eps' = eps * d/d'`` the denominator is ``sqrt(d/d') * sqrt(mean + eps)``,
and gains ``g' = g * sqrt(d/d')`` cancel it exactly: ``norm_eps`` is
multiplied by ``d/d'`` and every gain by ``sqrt(d/d')``, new gains included
(``sqrt(d/d')``, the image of the default gain 1; they multiply zeros).
Gradients: a gain scaled by ``a = sqrt(d/d')`` divides by ``a`` a
denominator also ``a`` times larger, so its gradient is the old one times
``1/a``, its first moments times ``1/a``, its second times ``1/a² = d'/d``;
the stream's old dimensions see no new term (the new ones are zero), so
every old entry of a matrix keeps its gradient (factor 1); the new entries
(columns, rows, gains) are new (zero moments).

:func:`grow_context` -- only the spec's ``context`` changes: rotary
positions have no parameters, so the logits of every sequence the parent
accepted are the same, and longer ones become legal.  Gradients: unchanged,
every tensor copied (factor 1).

Invalid requests raise :class:`~aihpc.base.errors.MorphError`.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping
from dataclasses import replace

import torch

from aihpc.base.checks import integer
from aihpc.base.errors import MorphError
from aihpc.nas.moments import (
    Growth,
    Moment,
    ParamState,
    ParamStates,
    copy_states,
    growing,
    map_param,
    padded,
)
from aihpc.nas.plans import StateDict, clone_state
from aihpc.tasks.language.growth import (
    STREAM_READS,
    STREAM_WRITES,
    LMPlan,
    block_index,
    check_lm_state,
    child_spec,
    filled,
    new_weights,
)
from aihpc.tasks.language.net import lm_state_shapes
from aihpc.tasks.language.spec import LMSpec

__all__ = [
    "add_heads",
    "grow_context",
    "plan_add_heads",
    "plan_grow_context",
    "plan_widen_mlp",
    "plan_widen_stream",
    "widen_mlp",
    "widen_stream",
]


# --------------------------------------------------------------------------------- widen_mlp
def plan_widen_mlp(spec: LMSpec, block: int, new_hidden: int, rng: random.Random) -> LMPlan:
    """Plan :func:`widen_mlp` without touching weights (draws the weights' seed from ``rng``)."""
    i = block_index(spec, block, "widen_mlp")
    old = spec.blocks[i].mlp_hidden
    integer(
        "widen_mlp: new_hidden", new_hidden, old + 1, error=MorphError, what=f"an integer > {old}"
    )
    blocks = list(spec.blocks)
    blocks[i] = replace(blocks[i], mlp_hidden=new_hidden)
    child = child_spec(spec, "widen_mlp", blocks=tuple(blocks))
    weights = new_weights(rng.getrandbits(63))
    up, down, d, extra = (
        f"blocks.{i}.mlp.up.weight",
        f"blocks.{i}.mlp.down.weight",
        spec.width,
        new_hidden - old,
    )

    def apply(state: Mapping[str, torch.Tensor]) -> StateDict:
        out = clone_state(state)
        out[up] = torch.cat((state[up].detach(), weights(state)(extra, d)), dim=0)
        out[down] = torch.cat((state[down].detach(), filled(state, 0.0, d, extra)), dim=1)
        return out

    growth = Growth(apply, growing({up: padded(0, extra), down: padded(1, extra)}))
    return child, growth, f"widen mlp of block {i} to {new_hidden}"


def widen_mlp(
    spec: LMSpec, state: Mapping[str, torch.Tensor], block: int, new_hidden: int, rng: random.Random
) -> tuple[LMSpec, StateDict]:
    """Widen block ``block``'s MLP to ``new_hidden`` units (more than it has): new units read
    the stream through random weights and write it through zero ones.  Exact: see the module
    docstring."""
    check_lm_state(spec, state)
    child, growth, _ = plan_widen_mlp(spec, block, new_hidden, rng)
    return child, growth.weights(state)


# --------------------------------------------------------------------------------- add_heads
def plan_add_heads(spec: LMSpec, block: int, count: int, rng: random.Random) -> LMPlan:
    """Plan :func:`add_heads` without touching weights (draws the weights' seed from ``rng``)."""
    i = block_index(spec, block, "add_heads")
    integer("add_heads: count", count, error=MorphError)
    blocks = list(spec.blocks)
    heads = blocks[i].heads + count
    blocks[i] = replace(blocks[i], heads=heads)
    child = child_spec(spec, "add_heads", blocks=tuple(blocks))
    weights = new_weights(rng.getrandbits(63))
    p, d, extra = f"blocks.{i}.attn.", spec.width, count * spec.head_dim

    def apply(state: Mapping[str, torch.Tensor]) -> StateDict:
        out = clone_state(state)
        randn = weights(state)
        for name in ("q", "k", "v"):
            key = f"{p}{name}.weight"
            out[key] = torch.cat((state[key].detach(), randn(extra, d)), dim=0)
        key = f"{p}out.weight"
        out[key] = torch.cat((state[key].detach(), filled(state, 0.0, d, extra)), dim=1)
        return out

    grown = {f"{p}{name}.weight": padded(0, extra) for name in ("q", "k", "v")}
    growth = Growth(apply, growing({**grown, f"{p}out.weight": padded(1, extra)}))
    return child, growth, f"add {count} heads to block {i} ({heads} in all)"


def add_heads(
    spec: LMSpec, state: Mapping[str, torch.Tensor], block: int, count: int, rng: random.Random
) -> tuple[LMSpec, StateDict]:
    """Add ``count`` heads (of the spec's ``head_dim``) to block ``block``: random q, k, v,
    zero output projection.  Exact: see the module docstring."""
    check_lm_state(spec, state)
    child, growth, _ = plan_add_heads(spec, block, count, rng)
    return child, growth.weights(state)


# ------------------------------------------------------------------------------ widen_stream
def plan_widen_stream(spec: LMSpec, new_width: int, rng: random.Random) -> LMPlan:
    """Plan :func:`widen_stream` without touching weights (draws the weights' seed from ``rng``)."""
    d = spec.width
    integer("widen_stream: new_width", new_width, d + 1, error=MorphError, what=f"an integer > {d}")
    # exact factors (module docstring): mean of squares * d/d', so eps * d/d', gains * sqrt(d/d')
    child = child_spec(
        spec, "widen_stream", width=new_width, norm_eps=spec.norm_eps * d / new_width
    )
    gain = math.sqrt(d / new_width)
    weights = new_weights(rng.getrandbits(63))
    extra, order = new_width - d, tuple(lm_state_shapes(spec))

    def apply(state: Mapping[str, torch.Tensor]) -> StateDict:
        randn = weights(state)
        out: StateDict = {}
        for key in order:  # LMNet's key order, not the caller's: the draws replay
            value = state[key].detach()
            if key.endswith("norm.weight"):
                new = torch.cat((value * gain, filled(state, gain, extra)))
            elif key == "embed.weight":
                new = torch.cat((value, filled(state, 0.0, value.shape[0], extra)), dim=1)
            elif key.endswith(STREAM_READS):
                new = torch.cat((value, randn(value.shape[0], extra)), dim=1)
            elif key.endswith(STREAM_WRITES):
                new = torch.cat((value, filled(state, 0.0, extra, value.shape[1])), dim=0)
            else:
                raise AssertionError(f"widen_stream: no rule for state key {key!r}")
            out[key] = new
        return out

    def moments(states: Mapping[str, ParamState]) -> ParamStates:
        return {k: map_param(v, _stream_moment(k, extra, gain)) for k, v in states.items()}

    return child, Growth(apply, moments), f"widen stream to {new_width}"


def _stream_moment(key: str, extra: int, gain: float) -> Moment:
    """The gradient map of :func:`widen_stream` for tensor ``key`` (the module docstring): a
    gain's old entries times ``1/gain`` (to the moment's power), every other old entry
    unchanged, the new ones zero."""
    if key.endswith("norm.weight"):
        pad = padded(0, extra)
        return lambda moment, power: pad(moment * gain**-power, power)
    if key == "embed.weight" or key.endswith(STREAM_READS):
        return padded(1, extra)
    if key.endswith(STREAM_WRITES):
        return padded(0, extra)
    raise AssertionError(f"widen_stream: no rule for state key {key!r}")


def widen_stream(
    spec: LMSpec, state: Mapping[str, torch.Tensor], new_width: int, rng: random.Random
) -> tuple[LMSpec, StateDict]:
    """Widen the residual stream to ``new_width``; ``norm_eps`` times ``d/d'`` and every
    RMSNorm gain times ``sqrt(d/d')``.  Exact: see the module docstring."""
    check_lm_state(spec, state)
    child, growth, _ = plan_widen_stream(spec, new_width, rng)
    return child, growth.weights(state)


# ------------------------------------------------------------------------------ grow_context
def plan_grow_context(spec: LMSpec, new_context: int) -> LMPlan:
    """Plan :func:`grow_context` (no weights change)."""
    c = spec.context
    integer(
        "grow_context: new_context", new_context, c + 1, error=MorphError, what=f"an integer > {c}"
    )
    child = child_spec(spec, "grow_context", context=new_context)
    return child, Growth(clone_state, copy_states), f"grow context to {new_context}"


def grow_context(
    spec: LMSpec, state: Mapping[str, torch.Tensor], new_context: int
) -> tuple[LMSpec, StateDict]:
    """Raise the longest sequence to ``new_context``; the weights are copied unchanged."""
    check_lm_state(spec, state)
    child, growth, _ = plan_grow_context(spec, new_context)
    return child, growth.weights(state)
