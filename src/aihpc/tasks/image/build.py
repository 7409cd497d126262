"""Turn an :class:`~aihpc.tasks.image.spec.ArchSpec` into a runnable ``nn.Module``.

:class:`SpecNet` is an ``nn.ModuleDict`` keyed by layer name, so its
``state_dict`` keys are ``"<layer>.<param>"`` (e.g. ``"conv1.weight"``,
``"bn1.running_var"``).  Its forward pass walks a plan fixed at construction
(topological order, no data-dependent control flow), so it can be traced with
``torch.jit.trace`` and exported to ONNX.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from aihpc.base.errors import SpecError
from aihpc.tasks.image.layer import BN_EPS, INPUT, Layer, filled
from aihpc.tasks.image.spec import ArchSpec, Shape

#: The layer types without a module, computed by :func:`stateless_step`.
STATELESS = frozenset(("add", "concat", "global_avgpool"))


def make_module(layer: Layer, in_shape: Shape) -> nn.Module | None:
    """The torch module of one layer reading a value of shape ``in_shape`` (per sample), or
    None for the layers :func:`stateless_step` computes (add, concat, global_avgpool)."""
    lt = layer.type
    if lt == "conv":
        return nn.Conv2d(
            in_shape[0],
            filled(layer.out_channels),
            filled(layer.kernel_size),
            stride=filled(layer.stride),
            padding=filled(layer.padding),
            groups=filled(layer.groups),
            bias=filled(layer.bias),
        )
    if lt == "bn":
        return nn.BatchNorm2d(in_shape[0], eps=BN_EPS, momentum=0.1)
    if lt == "relu":
        return nn.ReLU()  # never in place: the input may feed other layers too
    if lt == "maxpool":
        return nn.MaxPool2d(filled(layer.kernel_size), filled(layer.stride), filled(layer.padding))
    if lt == "avgpool":
        return nn.AvgPool2d(filled(layer.kernel_size), filled(layer.stride), filled(layer.padding))
    if lt == "dense":
        return nn.Linear(in_shape[0], filled(layer.out_features), bias=filled(layer.bias))
    if lt == "dropout":
        return nn.Dropout(filled(layer.p))
    return None  # add, concat, global_avgpool


def stateless_step(kind: str, inputs: Sequence[torch.Tensor]) -> torch.Tensor:
    """What :class:`SpecNet` computes for a layer without a module: ``add`` sums its inputs
    left to right, ``concat`` joins them along the channels, ``global_avgpool`` averages H, W."""
    if kind == "add":
        out = inputs[0]
        for value in inputs[1:]:
            out = out + value
        return out
    if kind == "concat":
        return torch.cat(list(inputs), dim=1)
    if kind == "global_avgpool":
        return inputs[0].mean(dim=(2, 3))
    raise AssertionError(f"layer type {kind!r} has a module")


class SpecNet(nn.ModuleDict):
    """The network of ``spec``: ``forward(x)`` maps ``(N, *spec.input_shape)``
    to ``(N, spec.num_classes)`` logits.  Weights use PyTorch's default
    initialisation.  The input shape is not checked in ``forward`` (to keep it
    trace-friendly); a wrong one fails inside the first mismatching layer.

    A layer name that clashes with an attribute of the module (``spec``,
    ``forward``, ``keys``, ``training``, ...) raises SpecError.
    """

    def __init__(self, spec: ArchSpec) -> None:
        super().__init__()
        spec.validate()
        self.spec = spec
        shapes = spec.shapes()
        order = spec.topological_order()
        for name in order:
            layer = spec.layer(name)
            if hasattr(self, name):
                raise SpecError(
                    f"layer name {name!r} clashes with an attribute of the built "
                    f"module; rename the layer"
                )
            module = make_module(layer, shapes[layer.inputs[0]])
            if module is not None:
                self.add_module(name, module)
        # Plan: (name, type, inputs, names whose last use is this step).
        last_use: dict[str, int] = {}
        for step, name in enumerate(order):
            for src in spec.layer(name).inputs:
                last_use[src] = step
        plan = []
        for step, name in enumerate(order):
            layer = spec.layer(name)
            free = tuple(
                sorted({s for s in layer.inputs if last_use[s] == step and s != spec.output})
            )
            plan.append((name, layer.type, layer.inputs, free))
        self._plan: tuple[tuple[str, str, tuple[str, ...], tuple[str, ...]], ...] = tuple(plan)
        self._output = spec.output

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        values: dict[str, torch.Tensor] = {INPUT: x}
        for name, kind, inputs, free in self._plan:
            if kind in STATELESS:
                out = stateless_step(kind, [values[src] for src in inputs])
            else:
                out = self[name](values[inputs[0]])
            values[name] = out
            for src in free:  # drop intermediates as soon as nothing needs them
                del values[src]
        return values[self._output]


def state_shapes(spec: ArchSpec) -> dict[str, tuple[int, ...]]:
    """The keys and tensor shapes of ``SpecNet(spec).state_dict()``, computed
    without building (BN buffers included; ``num_batches_tracked`` is ``()``)."""
    shapes = spec.shapes()
    out: dict[str, tuple[int, ...]] = {}
    for layer in spec.layers:
        c_in = shapes[layer.inputs[0]][0]
        n = layer.name
        if layer.type == "conv":
            out_c, k = filled(layer.out_channels), filled(layer.kernel_size)
            out[f"{n}.weight"] = (out_c, c_in // filled(layer.groups), k, k)
            if layer.bias:
                out[f"{n}.bias"] = (out_c,)
        elif layer.type == "bn":
            for key in ("weight", "bias", "running_mean", "running_var"):
                out[f"{n}.{key}"] = (c_in,)
            out[f"{n}.num_batches_tracked"] = ()
        elif layer.type == "dense":
            out_f = filled(layer.out_features)
            out[f"{n}.weight"] = (out_f, c_in)
            if layer.bias:
                out[f"{n}.bias"] = (out_f,)
    return out
