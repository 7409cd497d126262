"""What the image task's morphisms share: state-dict checks, graph queries, naming (the parts
every task's operators share are :mod:`aihpc.nas.plans`)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace

import torch

from aihpc.base.errors import MorphError, SpecError
from aihpc.nas.moments import Growth
from aihpc.tasks.image.build import state_shapes
from aihpc.tasks.image.layer import INPUT, Layer
from aihpc.tasks.image.spec import ArchSpec

#: A planned morphism: child spec, its maps of the parent's weights and optimizer state
#: (:class:`~aihpc.nas.moments.Growth`), description.
Plan = tuple[ArchSpec, Growth, str]


def check_state(spec: ArchSpec, state: Mapping[str, torch.Tensor]) -> None:
    """MorphError unless ``state`` has exactly the keys and shapes of
    ``SpecNet(spec).state_dict()``."""
    if not isinstance(state, Mapping):
        raise MorphError(f"state must be a state dict (mapping), got {type(state).__name__}")
    expected = state_shapes(spec)
    missing = sorted(set(expected) - set(state))
    unexpected = sorted(set(state) - set(expected))
    if missing or unexpected:
        raise MorphError(
            "state dict does not match the spec: "
            f"missing keys {missing[:5]}{' ...' if len(missing) > 5 else ''}, "
            f"unexpected keys {unexpected[:5]}{' ...' if len(unexpected) > 5 else ''}"
        )
    for key, shape in expected.items():
        value = state[key]
        if not isinstance(value, torch.Tensor):
            raise MorphError(
                f"state dict does not match the spec: {key!r} is a "
                f"{type(value).__name__}, not a tensor"
            )
        if tuple(value.shape) != shape:
            raise MorphError(
                f"state dict does not match the spec: {key!r} has shape "
                f"{tuple(value.shape)}, the spec needs {shape}"
            )


def get_layer(spec: ArchSpec, name: str, op: str) -> Layer:
    """The layer ``name``; MorphError naming the morphism if it does not exist."""
    try:
        return spec.layer(name)
    except SpecError:
        raise MorphError(f"{op}: no layer named {name!r} in the spec") from None


def fresh_prefix(spec: ArchSpec, stem: str) -> str:
    """``<stem><i>`` for the smallest i >= 1 such that no layer name starts with
    ``<stem><i>_``: deterministic, and unique within the spec."""
    taken = set()  # the "<i>" of every name "<stem><i>_...": one pass, not one per candidate i
    for x in spec.layers:
        if x.name.startswith(stem):
            head, underscore, _ = x.name[len(stem) :].partition("_")
            if underscore:
                taken.add(head)
    i = 1
    while str(i) in taken:
        i += 1
    return f"{stem}{i}"


def consumers_map(spec: ArchSpec) -> dict[str, list[str]]:
    """name (and ``"input"``) -> layers reading it."""
    users: dict[str, list[str]] = {INPUT: [], **{x.name: [] for x in spec.layers}}
    for x in spec.layers:
        for src in dict.fromkeys(x.inputs):
            users[src].append(x.name)
    return users


def descendants(spec: ArchSpec, name: str) -> set[str]:
    """Layers whose value depends on ``name`` (``name`` itself excluded)."""
    users = consumers_map(spec)
    seen: set[str] = set()
    todo = list(users[name])
    while todo:
        n = todo.pop()
        if n not in seen:
            seen.add(n)
            todo.extend(users[n])
    return seen


def nonnegative(spec: ArchSpec, name: str) -> bool:
    """True if the output of ``name`` is >= 0 for every input, by construction:
    a relu, or maxpool/avgpool/global_avgpool/dropout of such a value, or an
    add/concat of such values.  Anything else (including the network input)
    counts as possibly negative."""
    if name == INPUT:
        return False
    layer = spec.layer(name)
    if layer.type == "relu":
        return True
    if layer.type in ("maxpool", "avgpool", "global_avgpool", "dropout", "add", "concat"):
        return all(nonnegative(spec, src) for src in layer.inputs)
    return False


def rewired(layers: Iterable[Layer], old: str, new: str) -> list[Layer]:
    """``layers`` with every input ``old`` replaced by ``new``."""
    out = []
    for x in layers:
        if old in x.inputs:
            x = replace(x, inputs=tuple(new if i == old else i for i in x.inputs))
        out.append(x)
    return out


def child_spec(parent: ArchSpec, layers: list[Layer], output: str, op: str) -> ArchSpec:
    """A new spec like ``parent``; an invalid result is reported as MorphError."""
    try:
        return ArchSpec(
            input_shape=parent.input_shape,
            num_classes=parent.num_classes,
            layers=tuple(layers),
            output=output,
        )
    except SpecError as exc:
        raise MorphError(f"{op}: the morphed spec is invalid: {exc}") from None


def insert_after(layers: list[Layer], anchors: Iterable[str], new: list[Layer]) -> list[Layer]:
    """``new`` placed right after the last of ``anchors`` in file order (at the
    front if every anchor is the network input)."""
    position = {x.name: k for k, x in enumerate(layers)}
    at = max((position[a] for a in anchors if a != INPUT), default=-1) + 1
    return layers[:at] + new + layers[at:]
