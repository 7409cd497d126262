"""Net2WiderNet on specs: grow a conv's or dense's width, preserving the function.

Channel spaces.  Widening replicates units: new channel ``j`` of a tensor is
old channel ``g(j)`` (``g`` is the identity on the old channels, random for the
new ones).  Layers that act per channel (bn, relu, maxpool, avgpool, dropout,
global_avgpool) pass ``g`` through; an ``add`` requires all its inputs to use
the *same* ``g``.  So tensors fall into "channel spaces": union-find classes
joined by per-channel layers and by adds.  Widening a layer widens every conv /
dense *producing* a tensor of its space, all with the same ``g`` -- in a
ResNet, widening the last conv of a block widens the whole residual stream of
its stage (every block's last conv, the projection shortcut, the stem if it
feeds the stream).  BN parameters and running statistics of the space are
replicated with ``g``.

Consumers.  A conv or dense that reads a widened space gets incoming weights
``W'[:, j] = W[:, g(j)] * s(j)``, where the shares ``s`` of one unit's copies
are positive and sum to one, so it computes exactly what it did.  Net2WiderNet
divides equally (``s(j) = 1/count(g(j))``); then the copies of a unit stay
equal forever (the same activation, the same outgoing weights, so the same
gradients): the child has no more capacity than its parent.  Unequal shares
give the copies different gradients from the first step on, as Net2Net's
noise does, without changing the function.  The shares are drawn from the
replication map (the same map, the same shares: master and worker agree).
A concat of widened inputs gets the composed map and shares (other inputs
unchanged) and the same rules apply downstream of it.

Gradients (the optimizer's moments, :mod:`aihpc.nas.moments`).  At the
morph point, new channel ``j``'s activation is old channel ``g(j)``'s and
every consumer multiplies it by ``s(j)``, so the loss's gradient with
respect to it is old ``g(j)``'s times ``s(j)``.  Hence the
factors: a producer's row ``j`` (and its bias), and a batch norm's weight and
bias ``j``, get old ``g(j)``'s gradient times ``s(j)``; a consumer's
column ``j`` gets old column ``g(j)``'s gradient unchanged (its input is the
same value; the share was of the weight).  A weight both read and written
in widened spaces gets the product: its row's factor.  Every child entry
derives from a parent entry; none is new.  This holds in training mode too:
a copy's batch statistics are its original's.

Refused with MorphError: widening a space that contains the network input or
the network output, that involves a grouped conv (producer or consumer), or
that is tied through an add to a concat whose channels would not follow the
same map.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import replace
from functools import partial

import torch

from aihpc.base.checks import integer
from aihpc.base.errors import MorphError
from aihpc.nas.moments import Growth, ParamStates, copy_states, map_param
from aihpc.nas.plans import StateDict, clone_state
from aihpc.tasks.image.graph import Plan, check_state, child_spec, get_layer
from aihpc.tasks.image.layer import INPUT, Layer
from aihpc.tasks.image.spec import ArchSpec

_PER_CHANNEL = ("bn", "relu", "maxpool", "avgpool", "dropout", "global_avgpool")
# a copy's raw weight before its unit's copies are normalised to sum to one: uniform in 1 +- this,
# so two copies split a unit between about 1:3 and 3:1
SHARE_SPREAD = 0.5


def channel_spaces(spec: ArchSpec) -> dict[str, str]:
    """Tensor name (layers and ``"input"``) -> representative of its channel space."""
    parent = {INPUT: INPUT, **{x.name: x.name for x in spec.layers}}

    def find(n: str) -> str:
        while parent[n] != n:
            parent[n] = parent[parent[n]]
            n = parent[n]
        return n

    for x in spec.layers:
        if x.type in _PER_CHANNEL or x.type == "add":
            for src in x.inputs:
                parent[find(src)] = find(x.name)
    return {n: find(n) for n in parent}


def _concat_map(
    layer: Layer,
    maps: dict[str, list[int]],
    rep: dict[str, str],
    shapes: dict[str, tuple[int, ...]],
) -> list[int]:
    """The replication map of a concat's output given its inputs' maps."""
    out: list[int] = []
    offset = 0
    for src in layer.inputs:
        width = shapes[src][0]
        out.extend(offset + c for c in maps.get(rep[src], range(width)))
        offset += width
    return out


def plan_widen(spec: ArchSpec, name: str, new_width: int, rng: random.Random) -> Plan:
    """Plan :func:`widen` without touching weights (draws the map from ``rng``)."""
    target = get_layer(spec, name, "widen")
    if target.type not in ("conv", "dense"):
        raise MorphError(
            f"widen: layer {name!r} is a {target.type}; only conv and dense layers can be widened"
        )
    old = int(target.out_channels if target.type == "conv" else target.out_features)  # type: ignore[arg-type]
    integer(
        "widen: new_width",
        new_width,
        old + 1,
        error=MorphError,
        what=f"> the current width {old} of layer {name!r}",
    )
    rep = channel_spaces(spec)
    units = list(range(old)) + [rng.randrange(old) for _ in range(new_width - old)]
    maps, shares = _channel_maps(spec, rep, name, units)
    layers = []
    widened = []
    for layer in spec.layers:
        r = rep[layer.name]
        if layer.type == "conv" and r in maps:
            layer = replace(layer, out_channels=len(maps[r]))
            widened.append(layer.name)
        elif layer.type == "dense" and r in maps:
            layer = replace(layer, out_features=len(maps[r]))
            widened.append(layer.name)
        layers.append(layer)
    child = child_spec(spec, layers, spec.output, "widen")
    others = [x for x in widened if x != name]
    tied = f" (tied: {', '.join(others)})" if others else ""
    growth = Growth(
        partial(_replicate_units, spec, rep, maps, shares),
        partial(_replicate_moments, spec, rep, maps, shares),
    )
    return child, growth, f"widen {name} {old}->{new_width}{tied}"


def _channel_maps(
    spec: ArchSpec, rep: dict[str, str], name: str, units: list[int]
) -> tuple[dict[str, list[int]], dict[str, list[float]]]:
    """For each channel space that widening ``name`` reaches: new unit -> old unit it copies,
    and each new unit's share of its old unit's outgoing weights (:func:`_shares`).

    ``name``'s space gets ``units`` and shares drawn for them; concats fed by
    a widened space get the map and the shares of their parts (1.0 for a part
    not widened), so that every consumer of a copy gives it the same share.
    MorphError where the widening would reach the input, the output, a
    grouped conv, or a concat tied through an add that cannot replicate the
    same way.
    """
    shapes = spec.shapes()
    maps: dict[str, list[int]] = {rep[name]: units}
    shares: dict[str, list[float]] = {rep[name]: _shares(units)}
    concats = [x for x in spec.layers if x.type == "concat"]
    changed = True
    while changed:  # propagate through concats until nothing new is reached
        changed = False
        for c in concats:
            if rep[c.name] not in maps and any(rep[i] in maps for i in c.inputs):
                maps[rep[c.name]] = _concat_map(c, maps, rep, shapes)
                shares[rep[c.name]] = [
                    share for i in c.inputs for share in shares.get(rep[i], [1.0] * shapes[i][0])
                ]
                changed = True
    _check_reach(spec, rep, name, maps, shapes)
    return maps, shares


def _check_reach(
    spec: ArchSpec,
    rep: dict[str, str],
    name: str,
    maps: dict[str, list[int]],
    shapes: dict[str, tuple[int, ...]],
) -> None:
    """MorphError where widening ``name`` (its channel spaces ``maps``; ``shapes``: the spec's)
    reaches what cannot be widened (:func:`_channel_maps`)."""
    for tensor, r in rep.items():
        if r not in maps:
            continue
        if tensor == INPUT:
            raise MorphError(
                f"widen: cannot widen {name!r}: its channels are tied through "
                f"an add to the network input"
            )
        if tensor == spec.output:
            raise MorphError(
                f"widen: cannot widen {name!r}: it would change the width of "
                f"the network output {spec.output!r}"
            )
        layer = spec.layer(tensor)
        if layer.type == "concat" and _concat_map(layer, maps, rep, shapes) != maps[r]:
            raise MorphError(
                f"widen: cannot widen {name!r}: its channels are tied through an "
                f"add to concat {tensor!r}, which cannot replicate them the same way"
            )
    for layer in spec.layers:
        if (
            layer.type == "conv"
            and layer.groups != 1
            and (rep[layer.name] in maps or rep[layer.inputs[0]] in maps)
        ):
            raise MorphError(
                f"widen: cannot widen {name!r}: grouped conv {layer.name!r} "
                f"(groups={layer.groups}) would be affected"
            )


def _shares(units: list[int]) -> list[float]:
    """Each new unit's share of the outgoing weights of the old unit it copies (``units``: new
    unit -> old unit): positive, summing to one over one unit's copies (exactly 1.0 for a unit
    with one copy), each copy's raw weight uniform in 1 +- :data:`SHARE_SPREAD`.  Drawn from a
    generator seeded with the map, so the same map gives the same shares."""
    draw = random.Random(",".join(map(str, units)))
    raw = [draw.uniform(1 - SHARE_SPREAD, 1 + SHARE_SPREAD) for _ in units]
    totals: dict[int, float] = {}
    for unit, weight in zip(units, raw, strict=True):
        totals[unit] = totals.get(unit, 0.0) + weight
    return [weight / totals[unit] for unit, weight in zip(units, raw, strict=True)]


def _replicate_units(
    spec: ArchSpec,
    rep: dict[str, str],
    maps: dict[str, list[int]],
    shares: dict[str, list[float]],
    state: Mapping[str, torch.Tensor],
) -> StateDict:
    """The parent's ``state`` with every widened unit copied and each copy's outgoing weights
    multiplied by its share (:func:`_shares`), so the child computes the same function."""
    new = clone_state(state)
    for layer in spec.layers:
        n, kind = layer.name, layer.type
        out_map = maps.get(rep[n])
        if kind == "bn" and out_map is not None:
            idx = torch.tensor(out_map, dtype=torch.long, device=new[f"{n}.weight"].device)
            for key in ("weight", "bias", "running_mean", "running_var"):
                new[f"{n}.{key}"] = new[f"{n}.{key}"][idx]
        if kind not in ("conv", "dense"):
            continue
        w = new[f"{n}.weight"]
        if out_map is not None:
            idx = torch.tensor(out_map, dtype=torch.long, device=w.device)
            w = w[idx]
            if f"{n}.bias" in new:
                new[f"{n}.bias"] = new[f"{n}.bias"][idx]
        read = rep[layer.inputs[0]]
        if read in maps:
            idx = torch.tensor(maps[read], dtype=torch.long, device=w.device)
            share = torch.tensor(shares[read], dtype=w.dtype, device=w.device)
            w = w[:, idx] * share.reshape(1, -1, *([1] * (w.dim() - 2)))
        new[f"{n}.weight"] = w.contiguous()
    return new


def _replicate_moments(
    spec: ArchSpec,
    rep: dict[str, str],
    maps: dict[str, list[int]],
    shares: dict[str, list[float]],
    states: Mapping[str, Mapping[str, object]],
) -> ParamStates:
    """The optimizer's ``states`` (by parameter name) carried as :func:`_replicate_units` carries
    the weights, with the gradient's factors (the module docstring): every copy of a unit gets
    its moments, times its share (squared for second moments) for the copy's incoming
    weights, bias and batch-norm parameters, unchanged for its outgoing weights."""
    out = copy_states(states)
    for layer in spec.layers:
        n, kind = layer.name, layer.type
        if kind not in ("bn", "conv", "dense"):
            continue
        rows = (maps[rep[n]], shares[rep[n]]) if rep[n] in maps else None
        in_map = maps.get(rep[layer.inputs[0]]) if kind != "bn" else None
        for key, reads in (("weight", in_map), ("bias", None)):
            name = f"{n}.{key}"
            if name in states and (rows is not None or reads is not None):
                out[name] = map_param(states[name], partial(_replicated, rows, reads))
    return out


def _replicated(
    rows: tuple[list[int], list[float]] | None,
    in_map: list[int] | None,
    moment: torch.Tensor,
    power: int,
) -> torch.Tensor:
    """One tensor's moments with its rows copied by ``rows``' map (each times its share to the
    ``power``) and its columns by ``in_map`` (unchanged)."""
    if rows is not None:
        idx = torch.tensor(rows[0], dtype=torch.long, device=moment.device)
        share = torch.tensor(rows[1], dtype=moment.dtype, device=moment.device)
        moment = moment[idx] * share.reshape(-1, *([1] * (moment.dim() - 1))) ** power
    if in_map is not None:
        moment = moment[:, torch.tensor(in_map, dtype=torch.long, device=moment.device)]
    return moment.contiguous()


def widen(
    spec: ArchSpec,
    state: Mapping[str, torch.Tensor],
    layer: str,
    new_width: int,
    rng: random.Random,
) -> tuple[ArchSpec, StateDict]:
    """Net2WiderNet: give conv/dense ``layer`` ``new_width`` output units by
    replicating randomly chosen existing ones (drawn from ``rng``); see the
    module docstring for how the change propagates through the DAG and what
    is refused.  ``state`` is the parent's ``state_dict()`` (BN buffers
    included); returns ``(child_spec, child_state)`` such that the child, in
    eval mode, computes the parent's function (up to rounding).  Raises
    MorphError for an unknown or non-widenable layer, ``new_width <=`` the
    current width, or a state dict that does not match ``spec``."""
    check_state(spec, state)
    child, growth, _ = plan_widen(spec, layer, new_width, rng)
    return child, growth.weights(state)
