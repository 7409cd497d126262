"""Function-preserving network morphisms on (spec, weights) pairs.

Every morphism takes a parent spec and its ``state_dict()`` (as returned by
the built :class:`~aihpc.tasks.image.build.SpecNet`, BN running statistics included)
and returns ``(child_spec, child_state)``: ``SpecNet(child_spec)`` loaded with
``child_state`` (``strict=True``) computes, in eval mode, the same function as
the parent, up to floating-point rounding.  (In training mode BN uses batch
statistics, so only eval mode is preserved.)  The child state never aliases
the parent's tensors; new tensors take the parent's dtype and device.

Each ``plan_*`` function plans a morphism without weights; its
:class:`~aihpc.nas.moments.Growth` maps the weights and, beside them, the
optimizer's state (the gradient map, :mod:`aihpc.nas.moments`).  The
gradient maps: :func:`deepen` and :func:`add_skip` keep every parent tensor
unchanged (factor 1: the new block is the identity, the new branch adds
zero and passes no gradient back) and add whole new tensors (no state);
:func:`widen` is Net2WiderNet's (:mod:`aihpc.tasks.image.widening`).

* :func:`deepen` -- insert an identity conv-BN-ReLU (or dense-ReLU) block;
* :func:`widen` -- Net2WiderNet (see :mod:`aihpc.tasks.image.widening`);
* :func:`add_skip` -- a zero-initialised connection added to a layer's output;
* :func:`random_morph` -- one random applicable morphism, within a budget
  (:func:`random_plan` plans it without weights).

New layers are named ``deep<i>_*`` / ``skip<i>_*`` with the smallest free
``i``, so names are deterministic and unique and every child has a distinct
content hash.  Invalid requests raise :class:`~aihpc.base.errors.MorphError`.
"""

from __future__ import annotations

import random
from collections.abc import Mapping

import torch

from aihpc.base.checks import integer
from aihpc.base.errors import MorphError
from aihpc.nas.moments import Growth, copy_states
from aihpc.nas.plans import ATTEMPTS, StateDict, clone_state, first_within, float_kind
from aihpc.tasks.image.graph import (
    Plan,
    check_state,
    child_spec,
    descendants,
    fresh_prefix,
    get_layer,
    insert_after,
    nonnegative,
    rewired,
)
from aihpc.tasks.image.layer import BN_EPS, INPUT, Layer
from aihpc.tasks.image.spec import ArchSpec
from aihpc.tasks.image.widening import plan_widen, widen

__all__ = ["add_skip", "deepen", "plan_deepen", "plan_skip", "random_morph", "random_plan", "widen"]

# Widened layers get a multiple of 16 channels: vector units hold 16 float32
# values and tensor cores want multiples of 8 in bfloat16; convolutions of other
# widths ran slower (docs/measurements/2026-11-29-figures-from-code-comments.md).
WIDTH_MULTIPLE = 16


def plan_deepen(spec: ArchSpec, after: str, kernel_size: int = 3) -> Plan:
    """Plan :func:`deepen` without touching weights."""
    if after == INPUT:
        raise MorphError(
            f"deepen: cannot deepen after {INPUT!r}: the network input may be negative"
        )
    layer = get_layer(spec, after, "deepen")
    k = kernel_size
    if isinstance(k, bool) or not isinstance(k, int) or k < 1 or k % 2 == 0:
        raise MorphError(f"deepen: kernel_size must be an odd integer >= 1, got {k!r}")
    if not nonnegative(spec, after):
        raise MorphError(
            f"deepen: the output of layer {after!r} ({layer.type}) may be negative, "
            f"so a ReLU after it is not the identity; deepen after a relu (or "
            f"pooling, dropout, add or concat of relu outputs)"
        )
    shape = spec.shapes()[after]
    p = fresh_prefix(spec, "deep")
    new, what = _identity_block(p, after, shape, k)
    last = new[-1].name
    layers = insert_after(rewired(spec.layers, after, last), [after], new)
    child = child_spec(spec, layers, last if spec.output == after else spec.output, "deepen")

    def weights(state: Mapping[str, torch.Tensor]) -> StateDict:
        out = clone_state(state)
        out.update(_identity_weights(p, shape, k, state))
        return out

    return child, Growth(weights, copy_states), f"deepen after {after} ({what})"


def _identity_block(p: str, after: str, shape: tuple[int, ...], k: int) -> tuple[list[Layer], str]:
    """The layers (named ``p``_...) of an identity block reading ``after`` of ``shape``, ending
    in the relu ``p``_relu: conv-bn-relu for a (C, H, W) value, dense-relu for a flat one."""
    width = shape[0]
    last = f"{p}_relu"
    if len(shape) == 3:
        conv = Layer(
            f"{p}_conv",
            "conv",
            (after,),
            out_channels=width,
            kernel_size=k,
            stride=1,
            padding=k // 2,
            bias=False,
        )
        new = [conv, Layer(f"{p}_bn", "bn", (f"{p}_conv",)), Layer(last, "relu", (f"{p}_bn",))]
        return new, f"conv{k}x{k}-bn-relu"
    new = [
        Layer(f"{p}_dense", "dense", (after,), out_features=width),
        Layer(last, "relu", (f"{p}_dense",)),
    ]
    return new, "dense-relu"


def _identity_weights(
    p: str, shape: tuple[int, ...], k: int, state: Mapping[str, torch.Tensor]
) -> StateDict:
    """The state of :func:`_identity_block`'s layers that makes the block the identity, in the
    float dtype and on the device of ``state``."""
    width = shape[0]
    dtype, device = float_kind(state)
    out: StateDict = {}
    if len(shape) == 3:
        eye = torch.arange(width, device=device)
        w = torch.zeros(width, width, k, k, dtype=dtype, device=device)
        w[eye, eye, k // 2, k // 2] = 1.0
        out[f"{p}_conv.weight"] = w
        # Eval-mode BN: (x - mean) / sqrt(var + eps) * weight + bias == x.
        out[f"{p}_bn.weight"] = torch.ones(width, dtype=dtype, device=device)
        out[f"{p}_bn.bias"] = torch.zeros(width, dtype=dtype, device=device)
        out[f"{p}_bn.running_mean"] = torch.zeros(width, dtype=dtype, device=device)
        out[f"{p}_bn.running_var"] = torch.full((width,), 1.0 - BN_EPS, dtype=dtype, device=device)
        out[f"{p}_bn.num_batches_tracked"] = torch.tensor(0, dtype=torch.long, device=device)
    else:
        out[f"{p}_dense.weight"] = torch.eye(width, dtype=dtype, device=device)
        out[f"{p}_dense.bias"] = torch.zeros(width, dtype=dtype, device=device)
    return out


def deepen(
    spec: ArchSpec, state: Mapping[str, torch.Tensor], after: str, kernel_size: int = 3
) -> tuple[ArchSpec, StateDict]:
    """Net2DeeperNet: insert an identity block after layer ``after``; every
    former consumer of ``after`` (and the output, if it was ``after``) now
    reads the block's relu.

    For a ``(C, H, W)`` value the block is conv(k x k, stride 1, padding k//2,
    no bias; weight 1 at the centre tap of the diagonal, 0 elsewhere) -> bn
    (weight 1, bias 0, running_mean 0, running_var ``1 - eps`` so that
    ``sqrt(var + eps) == 1`` and eval-mode BN is the identity up to rounding)
    -> relu.  For a flat ``(F,)`` value it is dense (identity matrix, zero
    bias) -> relu, and ``kernel_size`` is not used.

    The final relu is the identity only on non-negative values, so ``after``
    must be a point that is >= 0 by construction: a relu, or a pooling,
    dropout, add or concat of such points.  MorphError otherwise, for an
    unknown layer, an even or non-positive ``kernel_size``, or a state dict
    that does not match ``spec``.
    """
    check_state(spec, state)
    child, growth, _ = plan_deepen(spec, after, kernel_size)
    return child, growth.weights(state)


def _match_stride(src_hw: tuple[int, ...], dst_hw: tuple[int, ...]) -> int | None:
    """The smallest stride s with which a 1x1 conv maps src_hw to dst_hw, or None."""
    for s in range(1, max(src_hw) + 1):
        if all((a - 1) // s + 1 == b for a, b in zip(src_hw, dst_hw, strict=True)):
            return s
    return None


def _skip_compatible(src_shape: tuple[int, ...], dst_shape: tuple[int, ...]) -> bool:
    if len(dst_shape) == 1:
        return True
    return len(src_shape) == 3 and _match_stride(src_shape[1:], dst_shape[1:]) is not None


def plan_skip(spec: ArchSpec, src: str, dst: str) -> Plan:
    """Plan :func:`add_skip` without touching weights."""
    if src != INPUT:
        get_layer(spec, src, "add_skip")
    if dst == INPUT:
        raise MorphError(f"add_skip: dst must be a layer, not {INPUT!r}")
    get_layer(spec, dst, "add_skip")
    if src in descendants(spec, dst):
        raise MorphError(
            f"add_skip: layer {src!r} depends on {dst!r}; a connection from it "
            f"to {dst!r} would create a cycle"
        )
    shapes = spec.shapes()
    ss, ds = shapes[src], shapes[dst]
    if not _skip_compatible(ss, ds):
        raise MorphError(
            f"add_skip: cannot connect {src!r} {ss} to {dst!r} {ds}: no strided "
            f"1x1 conv maps one shape onto the other"
        )
    p = fresh_prefix(spec, "skip")
    new: list[Layer] = []
    if len(ds) == 3:
        stride = _match_stride(ss[1:], ds[1:])
        new.append(
            Layer(
                f"{p}_conv",
                "conv",
                (src,),
                out_channels=ds[0],
                kernel_size=1,
                stride=stride,
                padding=0,
                bias=False,
            )
        )
        what = f"zero conv1x1 stride {stride}"
    else:
        x = src
        if len(ss) == 3:
            new.append(Layer(f"{p}_pool", "global_avgpool", (src,)))
            x = f"{p}_pool"
        new.append(Layer(f"{p}_dense", "dense", (x,), out_features=ds[0], bias=False))
        what = "zero dense"
    branch = new[-1].name
    new.append(Layer(f"{p}_add", "add", (dst, branch)))
    layers = insert_after(rewired(spec.layers, dst, f"{p}_add"), [src, dst], new)
    output = f"{p}_add" if spec.output == dst else spec.output
    child = child_spec(spec, layers, output, "add_skip")

    def weights(state: Mapping[str, torch.Tensor]) -> StateDict:
        out = clone_state(state)
        dtype, device = float_kind(state)
        if len(ds) == 3:
            out[f"{branch}.weight"] = torch.zeros(ds[0], ss[0], 1, 1, dtype=dtype, device=device)
        else:
            out[f"{branch}.weight"] = torch.zeros(ds[0], ss[0], dtype=dtype, device=device)
        return out

    return child, Growth(weights, copy_states), f"skip {src} -> {dst} ({what})"


def add_skip(
    spec: ArchSpec, state: Mapping[str, torch.Tensor], src: str, dst: str
) -> tuple[ArchSpec, StateDict]:
    """Add a connection from ``src`` (a layer or ``"input"``) to the output of
    layer ``dst``: ``dst``'s consumers (and the output, if it was ``dst``) now
    read ``add(dst, branch(src))``, where the branch is zero-initialised, so
    the function is unchanged while the branch can learn.

    Branch: for a ``(C, H, W)`` destination, a 1x1 conv without bias and with
    the smallest stride that maps src's H, W onto dst's (MorphError if none
    does); for a flat destination, a bias-free dense, preceded by a
    global_avgpool when src is ``(C, H, W)``.  ``src == dst`` is allowed (a
    residual 1x1 branch).  MorphError for unknown layers, ``dst == "input"``,
    a ``src`` that depends on ``dst`` (cycle), incompatible shapes, or a state
    dict that does not match ``spec``.
    """
    check_state(spec, state)
    child, growth, _ = plan_skip(spec, src, dst)
    return child, growth.weights(state)


def _propose(kind: str, spec: ArchSpec, rng: random.Random) -> Plan:
    """One random plan of the given kind; MorphError if it does not apply."""
    if kind == "widen":
        name = rng.choice([x.name for x in spec.layers if x.type in ("conv", "dense")])
        layer = spec.layer(name)
        old = int(layer.out_channels or layer.out_features or 0)
        grow = rng.choice([old, max(1, old // 2), max(1, old // 4)])
        return plan_widen(spec, name, -(-(old + grow) // WIDTH_MULTIPLE) * WIDTH_MULTIPLE, rng)
    if kind == "deepen":
        relus = [x.name for x in spec.layers if x.type == "relu"]
        if not relus:
            raise MorphError("deepen: the spec has no relu")
        return plan_deepen(spec, rng.choice(relus), rng.choice([1, 3]))
    dst = rng.choice([x.name for x in spec.layers])
    shapes = spec.shapes()
    later = descendants(spec, dst)
    sources = [
        n
        for n in (INPUT, *(x.name for x in spec.layers))
        if n not in later and _skip_compatible(shapes[n], shapes[dst])
    ]
    if not sources:
        raise MorphError(f"add_skip: no compatible source for {dst!r}")
    return plan_skip(spec, rng.choice(sources), dst)


def random_morph(
    spec: ArchSpec,
    state: Mapping[str, torch.Tensor],
    rng: random.Random,
    max_params: int | None = None,
) -> tuple[ArchSpec, StateDict, str]:
    """Apply one random function-preserving morphism drawn from ``rng``.

    The morphism is :func:`random_plan`'s; returns ``(child_spec,
    child_state, description)``.  The same spec, state and rng state give
    the same child.  MorphError as :func:`random_plan`, or if ``state`` does
    not match ``spec``.
    """
    check_state(spec, state)
    child, growth, description = random_plan(spec, rng, max_params)
    return child, growth.weights(state), description


def random_plan(spec: ArchSpec, rng: random.Random, max_params: int | None = None) -> Plan:
    """Plan one random function-preserving morphism, drawn from ``rng``, without touching weights.

    Kinds are equally likely: widen a random conv/dense by 1/4, 1/2 or 1x
    its width, rounded up to a multiple of ``WIDTH_MULTIPLE``; deepen after
    a random relu with kernel 1 or 3; or add a skip between a random layer
    and a random compatible source.  Inapplicable candidates, and children
    with more than ``max_params`` parameters, are skipped; up to 50
    candidates are tried.  Every draw comes from ``rng``, so the same spec
    and rng state give the same plan: a plan made where no weights are
    (the master) is made again, and applied, where they are (a worker).

    Raises MorphError if the parent already exceeds ``max_params``, or if
    no candidate fits (the message names ``max_params`` and the smallest
    child's parameter count).
    """
    if max_params is not None:
        integer("random_morph: max_params", max_params, error=MorphError)
    n_parent = spec.num_params()
    if max_params is not None and n_parent > max_params:
        raise MorphError(
            f"random_morph: the parent has {n_parent} parameters, more than max_params={max_params}"
        )
    plan, smallest = first_within(
        lambda: _propose(rng.choice(("widen", "deepen", "skip")), spec, rng), max_params
    )
    if plan is not None:
        return plan
    if smallest is not None:
        raise MorphError(
            f"random_morph: no morphism keeps the network within "
            f"max_params={max_params}: the smallest child tried has {smallest} "
            f"parameters (parent: {n_parent})"
        )
    raise MorphError(f"random_morph: no applicable morphism found in {ATTEMPTS} attempts")
