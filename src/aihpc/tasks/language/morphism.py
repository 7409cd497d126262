"""Function-preserving growth of decoder-only transformers, on (spec, weights) pairs.

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
new entries zero, new tensors no state).  Each paragraph below ends with
its operator's gradient map.

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
from collections.abc import Callable, Mapping
from dataclasses import replace

import torch

from aihpc.base.checks import integer
from aihpc.base.errors import MorphError, SpecError
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
from aihpc.nas.plans import ATTEMPTS, StateDict, clone_state, first_within, float_kind
from aihpc.tasks.language.net import INIT_STD, lm_state_shapes
from aihpc.tasks.language.spec import Block, LMSpec

__all__ = [
    "LMPlan",
    "add_block",
    "add_heads",
    "check_lm_state",
    "grow_context",
    "plan_add_block",
    "plan_add_heads",
    "plan_grow_context",
    "plan_widen_mlp",
    "plan_widen_stream",
    "random_lm_morph",
    "random_lm_plan",
    "widen_mlp",
    "widen_stream",
]

#: A planned operator: child spec, its maps of the parent's weights and optimizer state
#: (:class:`~aihpc.nas.moments.Growth`), description.
LMPlan = tuple[LMSpec, Growth, str]

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
# the projections that read the residual stream (new input columns random when it widens) and
# those that write it (new output rows zero); every "...norm.weight" is a gain
_READS = ("attn.q.weight", "attn.k.weight", "attn.v.weight", "mlp.up.weight", "unembed.weight")
_WRITES = ("attn.out.weight", "mlp.down.weight")


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


def _child(spec: LMSpec, op: str, **changes: object) -> LMSpec:
    """``spec`` with ``changes``; an invalid result is reported as MorphError."""
    try:
        return replace(spec, **changes)  # type: ignore[arg-type]
    except SpecError as exc:
        raise MorphError(f"{op}: the grown spec is invalid: {exc}") from None


def _block_index(spec: LMSpec, block: object, op: str) -> int:
    last = spec.layers - 1
    return integer(f"{op}: block", block, 0, last, error=MorphError, what=f"in 0..{last}")


def _new_weights(seed: int) -> Callable[[Mapping[str, torch.Tensor]], Callable[..., torch.Tensor]]:
    """A factory, per parent state, of normal(0, INIT_STD) tensors in the state's dtype and on
    its device, drawn in order from a CPU generator seeded with ``seed`` (replayable anywhere)."""

    def bind(state: Mapping[str, torch.Tensor]) -> Callable[..., torch.Tensor]:
        dtype, device = float_kind(state)
        gen = torch.Generator().manual_seed(seed)

        def randn(*shape: int) -> torch.Tensor:
            return (torch.randn(shape, generator=gen, dtype=dtype) * INIT_STD).to(device)

        return randn

    return bind


def _full(state: Mapping[str, torch.Tensor], fill: float, *shape: int) -> torch.Tensor:
    """A new tensor of ``shape`` filled with ``fill``, in the state's float dtype and device."""
    dtype, device = float_kind(state)
    return torch.full(shape, fill, dtype=dtype, device=device)


# --------------------------------------------------------------------------------- add_block
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
    child = _child(spec, "add_block", blocks=blocks)
    weights = _new_weights(rng.getrandbits(63))
    prefix = f"blocks.{index}."
    new_shapes = {k: s for k, s in lm_state_shapes(child).items() if k.startswith(prefix)}

    def apply(state: Mapping[str, torch.Tensor]) -> StateDict:
        out = {_shift_block(k, index): v.detach().clone() for k, v in state.items()}
        randn = weights(state)
        for key, shape in new_shapes.items():
            if key.endswith("norm.weight"):
                out[key] = _full(state, 1.0, *shape)
            elif key.endswith(_WRITES):
                out[key] = _full(state, 0.0, *shape)
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


# --------------------------------------------------------------------------------- widen_mlp
def plan_widen_mlp(spec: LMSpec, block: int, new_hidden: int, rng: random.Random) -> LMPlan:
    """Plan :func:`widen_mlp` without touching weights (draws the weights' seed from ``rng``)."""
    i = _block_index(spec, block, "widen_mlp")
    old = spec.blocks[i].mlp_hidden
    integer(
        "widen_mlp: new_hidden", new_hidden, old + 1, error=MorphError, what=f"an integer > {old}"
    )
    blocks = list(spec.blocks)
    blocks[i] = replace(blocks[i], mlp_hidden=new_hidden)
    child = _child(spec, "widen_mlp", blocks=tuple(blocks))
    weights = _new_weights(rng.getrandbits(63))
    up, down, d, extra = (
        f"blocks.{i}.mlp.up.weight",
        f"blocks.{i}.mlp.down.weight",
        spec.width,
        new_hidden - old,
    )

    def apply(state: Mapping[str, torch.Tensor]) -> StateDict:
        out = clone_state(state)
        out[up] = torch.cat((state[up].detach(), weights(state)(extra, d)), dim=0)
        out[down] = torch.cat((state[down].detach(), _full(state, 0.0, d, extra)), dim=1)
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
    i = _block_index(spec, block, "add_heads")
    integer("add_heads: count", count, error=MorphError)
    blocks = list(spec.blocks)
    heads = blocks[i].heads + count
    blocks[i] = replace(blocks[i], heads=heads)
    child = _child(spec, "add_heads", blocks=tuple(blocks))
    weights = _new_weights(rng.getrandbits(63))
    p, d, extra = f"blocks.{i}.attn.", spec.width, count * spec.head_dim

    def apply(state: Mapping[str, torch.Tensor]) -> StateDict:
        out = clone_state(state)
        randn = weights(state)
        for name in ("q", "k", "v"):
            key = f"{p}{name}.weight"
            out[key] = torch.cat((state[key].detach(), randn(extra, d)), dim=0)
        key = f"{p}out.weight"
        out[key] = torch.cat((state[key].detach(), _full(state, 0.0, d, extra)), dim=1)
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
    child = _child(spec, "widen_stream", width=new_width, norm_eps=spec.norm_eps * d / new_width)
    gain = math.sqrt(d / new_width)
    weights = _new_weights(rng.getrandbits(63))
    extra, order = new_width - d, tuple(lm_state_shapes(spec))

    def apply(state: Mapping[str, torch.Tensor]) -> StateDict:
        randn = weights(state)
        out: StateDict = {}
        for key in order:  # LMNet's key order, not the caller's: the draws replay
            value = state[key].detach()
            if key.endswith("norm.weight"):
                new = torch.cat((value * gain, _full(state, gain, extra)))
            elif key == "embed.weight":
                new = torch.cat((value, _full(state, 0.0, value.shape[0], extra)), dim=1)
            elif key.endswith(_READS):
                new = torch.cat((value, randn(value.shape[0], extra)), dim=1)
            elif key.endswith(_WRITES):
                new = torch.cat((value, _full(state, 0.0, extra, value.shape[1])), dim=0)
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
    if key == "embed.weight" or key.endswith(_READS):
        return padded(1, extra)
    if key.endswith(_WRITES):
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
    child = _child(spec, "grow_context", context=new_context)
    return child, Growth(clone_state, copy_states), f"grow context to {new_context}"


def grow_context(
    spec: LMSpec, state: Mapping[str, torch.Tensor], new_context: int
) -> tuple[LMSpec, StateDict]:
    """Raise the longest sequence to ``new_context``; the weights are copied unchanged."""
    check_lm_state(spec, state)
    child, growth, _ = plan_grow_context(spec, new_context)
    return child, growth.weights(state)


# ------------------------------------------------------------------------------- random plans
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
