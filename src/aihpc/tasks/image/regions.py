"""The image task's regions: a CNN cut into stem, residual blocks and head, compiled one by one.

:func:`partition` cuts the plan of a :class:`~aihpc.tasks.image.build.SpecNet`
into a chain of :class:`Region` s, each a :class:`~aihpc.tasks.base.Compilable`
whose signature ignores layer names, so equal blocks share compiled code;
:class:`RegionNet` runs the network region by region through a
:class:`~aihpc.tasks.base.RegionRunner` (the trainer's
:class:`aihpc.train.regions.RegionCache`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import nn

from aihpc.tasks.base import RegionRunner, canonical, signature
from aihpc.tasks.image.build import STATELESS, SpecNet, make_module, stateless_step
from aihpc.tasks.image.layer import INPUT, Layer
from aihpc.tasks.image.spec import ArchSpec, Shape


@dataclass(frozen=True)
class Region:
    """A run of consecutive layers of a spec's plan that reads one value and leaves one.

    ``names`` are the spec's layer names in execution order, ``input`` the
    value read (a layer name or ``"input"``), ``output`` the last layer.
    ``local`` are the same layers renamed ``l0``, ``l1``, ... with the input
    called ``"input"``, and ``shapes`` their per-sample output shapes; the
    ``signature`` hashes ``in_shape`` and ``local``, so equal blocks in two
    networks, or twice in one, share it.
    """

    names: tuple[str, ...]
    input: str
    output: str
    in_shape: Shape
    local: tuple[Layer, ...]
    shapes: tuple[Shape, ...]
    signature: str

    def template(self) -> nn.Module:
        """The region as a module of its own (:class:`RegionModule`), on torch's current device."""
        return RegionModule(self)


def partition(spec: ArchSpec) -> tuple[Region, ...]:
    """Cut the plan of ``SpecNet(spec)`` into a chain of regions.

    A cut may fall after a layer only where its output is the one value
    still live (every later layer reads it or values made after it).  Of
    those points, a cut is made where the value is read by several layers
    (a residual block starts: its body and its shortcut) and where a
    feature map is about to be pooled flat (the head starts), so a ResNet
    gives stem, blocks and head, and a plain chain of layers stays one
    region (each region is a compiled graph; fewer, larger graphs fuse
    more).  A network whose skips span everything is one region.

    Where that value is a relu's output and the relu alone reads its input,
    the cut goes before the relu, which then opens the next region: a
    graph that ends in a relu saves its mask for the backward pass (the
    partitioner does not count the output it keeps anyway), and inductor's
    CPU code stores such boolean masks far slower than eager does, which made
    regional training steps slower than whole-model ones
    (docs/measurements/2026-11-29-figures-from-code-comments.md).
    A block's region thus runs from the relu before it to its sum.
    """
    order = spec.topological_order()
    shapes = spec.shapes()
    last_use: dict[str, int] = {}
    readers: dict[str, int] = {}
    for step, name in enumerate(order):
        for src in set(spec.layer(name).inputs):
            last_use[src] = step
            readers[src] = readers.get(src, 0) + 1
    last_use[spec.output] = len(order)  # the output stays live to the end
    live = 1  # the network input
    cuts: list[int] = []  # the last step of each region
    for step, name in enumerate(order[:-1]):
        live += 1
        live -= sum(1 for src in set(spec.layer(name).inputs) if last_use[src] == step)
        starts_head = len(shapes[name]) == 3 and len(shapes[order[step + 1]]) == 1
        if live == 1 and (readers[name] > 1 or starts_head):
            layer = spec.layer(name)
            before = step - 1  # the relu's input, if the relu alone reads it
            if (
                layer.type == "relu"
                and before >= 0
                and layer.inputs[0] == order[before]
                and readers[order[before]] == 1
                and before > (cuts[-1] if cuts else -1)
            ):
                step = before
            cuts.append(step)
    cuts.append(len(order) - 1)
    regions: list[Region] = []
    start, source = 0, INPUT
    for step in cuts:
        regions.append(_region(spec, order[start : step + 1], source))
        start, source = step + 1, order[step]
    return tuple(regions)


def _region(spec: ArchSpec, names: Sequence[str], source: str) -> Region:
    """The region of layers ``names`` reading ``source``, renamed and hashed."""
    local_name = {source: INPUT, **{name: f"l{k}" for k, name in enumerate(names)}}
    shapes = spec.shapes()
    local: list[Layer] = []
    for name in names:
        data = spec.layer(name).to_dict()
        data.update(name=local_name[name], inputs=[local_name[i] for i in data["inputs"]])
        local.append(Layer.from_dict(data))
    in_shape = shapes[source]
    text = canonical({"in_shape": list(in_shape), "layers": [x.to_dict() for x in local]})
    return Region(
        names=tuple(names),
        input=source,
        output=names[-1],
        in_shape=in_shape,
        local=tuple(local),
        shapes=tuple(shapes[n] for n in names),
        signature=signature(text),
    )


class RegionModule(nn.ModuleDict):
    """A region as a module of its own, layers keyed by local name (``l0``, ``l1``, ...).

    Its forward pass is :class:`SpecNet`'s, step for step (same modules, same
    order of additions), so it computes exactly what those layers of the
    network compute.  Built on the meta device it is the parameter-free
    template that the cache compiles.
    """

    def __init__(self, region: Region) -> None:
        super().__init__()
        shape_of = {INPUT: region.in_shape}
        shape_of.update((x.name, s) for x, s in zip(region.local, region.shapes, strict=True))
        for layer in region.local:
            module = make_module(layer, shape_of[layer.inputs[0]])
            if module is not None:
                self.add_module(layer.name, module)
        self._plan = tuple((x.name, x.type, x.inputs) for x in region.local)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        values: dict[str, torch.Tensor] = {INPUT: x}
        for name, kind, inputs in self._plan:
            if kind in STATELESS:
                values[name] = stateless_step(kind, [values[src] for src in inputs])
            else:
                values[name] = self[name](values[inputs[0]])
        return values[self._plan[-1][0]]


class RegionNet(nn.Module):
    """Computes what ``net`` computes, region by region through ``cache``'s compiled code.

    It holds ``net`` as its one submodule and uses ``net``'s parameters and
    buffers themselves: its ``state_dict`` (keys prefixed ``net.``), the
    optimizer built on ``net`` and the weight files are those of ``net``.
    ``train()``/``eval()`` reach ``net``, whose mode each call reads.
    Do not call ``torch._dynamo.reset()`` while it is used: that drops the
    compiled code behind the cache's back (:class:`aihpc.train.regions.RegionStats` ``eager``).
    """

    def __init__(self, net: SpecNet, cache: RegionRunner) -> None:
        super().__init__()
        self.net = net
        self.cache = cache
        self.regions = partition(net.spec)
        self._bindings = tuple(_binding(net, region) for region in self.regions)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        training = self.net.training
        for region, (slots, dropouts) in zip(self.regions, self._bindings, strict=True):
            tensors = {key: getattr(module, attr) for key, module, attr in slots}
            rates = tuple(float(m.p) for m in dropouts)
            x = self.cache.run(region, tensors, (x,), training, rates)
        return x


def _binding(
    net: SpecNet, region: Region
) -> tuple[tuple[tuple[str, nn.Module, str], ...], tuple[nn.Dropout, ...]]:
    """Where a region's tensors live in ``net``: (template key, module, attribute) for every
    parameter and buffer, read at each call (``.to()`` replaces buffers), and its dropout
    modules, whose rate the trainer sets after building."""
    slots: list[tuple[str, nn.Module, str]] = []
    dropouts: list[nn.Dropout] = []
    for name, layer in zip(region.names, region.local, strict=True):
        if name not in net:
            continue
        module = net[name]
        for attr, _ in module.named_parameters(recurse=False):
            slots.append((f"{layer.name}.{attr}", module, attr))
        for attr, _ in module.named_buffers(recurse=False):
            slots.append((f"{layer.name}.{attr}", module, attr))
        if isinstance(module, nn.Dropout):
            dropouts.append(module)
    return tuple(slots), tuple(dropouts)
