"""Architecture specs: a CNN described as a JSON-serialisable DAG of layers.

An :class:`ArchSpec` is a frozen value: ``input_shape`` ``(C, H, W)``,
``num_classes``, a tuple of :class:`~aihpc.tasks.image.layer.Layer` and the name of the
``output`` layer.  Each layer has a unique name and a tuple of input names;
``"input"`` is the network input.  The layer types and their fields are listed
in :mod:`aihpc.tasks.image.layer`.

Shapes are per sample (no batch dimension).  Constructing an ArchSpec
validates it completely (names, references, cycles, shapes, and that the
output has shape ``(num_classes,)`` and every layer reaches it), raising
:class:`~aihpc.base.errors.SpecError` that names the layer at fault.  The layer
order in the file is free (the graph is sorted topologically) but it is part
of the spec's identity: it is kept by the JSON round trip and covered by
:meth:`ArchSpec.content_hash`.

This module does not import torch; :class:`aihpc.tasks.image.build.SpecNet` builds a spec's network.
"""

from __future__ import annotations

import hashlib
import heapq
import json
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from aihpc.base.checks import integer, is_integer
from aihpc.base.errors import SpecError
from aihpc.tasks.base import canonical
from aihpc.tasks.image.layer import INPUT, Layer, filled

#: Version of the JSON format; bump it when the meaning of a spec changes.
FORMAT_VERSION = 1

Shape = tuple[int, ...]

# single-input layers whose output has their input's shape (bn: if it is (C, H, W))
_SAME_SHAPE = frozenset(("bn", "relu", "dropout"))


@dataclass(frozen=True)
class ArchSpec:
    """A whole network; see the module docstring.  Validated on construction."""

    input_shape: tuple[int, int, int]
    num_classes: int
    layers: tuple[Layer, ...]
    output: str
    version: int = FORMAT_VERSION
    # made by validate(): the layers by name, the execution order, every layer's output shape
    _by_name: dict[str, Layer] = field(init=False, repr=False, compare=False)
    _order: tuple[str, ...] = field(init=False, repr=False, compare=False)
    _shapes: dict[str, Shape] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        shape = tuple(self.input_shape) if isinstance(self.input_shape, (list, tuple)) else ()
        if len(shape) != 3 or not all(is_integer(v, 1) for v in shape):
            raise SpecError(
                f"input_shape must be 3 positive integers (C, H, W), got {self.input_shape!r}"
            )
        object.__setattr__(self, "input_shape", shape)
        integer("num_classes", self.num_classes, error=SpecError)
        if self.version != FORMAT_VERSION:
            raise SpecError(
                f"unsupported spec format version {self.version!r} "
                f"(this aihpc reads version {FORMAT_VERSION})"
            )
        if (
            not isinstance(self.layers, (list, tuple))
            or not self.layers
            or not all(isinstance(x, Layer) for x in self.layers)
        ):
            raise SpecError("layers must be a non-empty list of Layer objects")
        object.__setattr__(self, "layers", tuple(self.layers))
        if not isinstance(self.output, str):
            raise SpecError(f"output must be a layer name, got {self.output!r}")
        self.validate()

    # ------------------------------------------------------------- validation
    def validate(self) -> None:
        """Check the graph and infer every shape; raises SpecError naming the layer."""
        by_name: dict[str, Layer] = {}
        for layer in self.layers:
            if layer.name in by_name:
                raise SpecError(f"duplicate layer name {layer.name!r}")
            by_name[layer.name] = layer
        for layer in self.layers:
            for src in layer.inputs:
                if src != INPUT and src not in by_name:
                    raise SpecError(f"layer {layer.name!r}: unknown input {src!r}")
        order = _topological_order(self.layers, by_name)
        shapes: dict[str, Shape] = {INPUT: self.input_shape}
        for name in order:
            layer = by_name[name]
            inputs = layer.inputs
            # most layers: no checks but the rank
            if len(inputs) == 1 and layer.type in _SAME_SHAPE:
                shape = shapes[inputs[0]]
                if len(shape) == 3 or layer.type != "bn":
                    shapes[name] = shape
                    continue
            shapes[name] = _infer_shape(layer, [shapes[i] for i in inputs], inputs)
        if self.output not in by_name:
            raise SpecError(f"output {self.output!r} is not a layer of the spec")
        if shapes[self.output] != (self.num_classes,):
            raise SpecError(
                f"output layer {self.output!r} has shape {shapes[self.output]}, "
                f"expected ({self.num_classes},) for num_classes={self.num_classes}"
            )
        live = {self.output}
        for name in reversed(order):
            if name in live:
                live.update(by_name[name].inputs)
        for layer in self.layers:
            if layer.name not in live:
                raise SpecError(f"layer {layer.name!r} does not reach the output {self.output!r}")
        object.__setattr__(self, "_by_name", by_name)
        object.__setattr__(self, "_order", tuple(order))
        object.__setattr__(self, "_shapes", shapes)

    def shapes(self) -> dict[str, Shape]:
        """Per-sample output shape of every layer (and of ``"input"``), e.g.
        ``(C, H, W)`` for 4-D tensors and ``(F,)`` after global pooling."""
        return dict(self._shapes)

    def topological_order(self) -> tuple[str, ...]:
        """Layer names in execution order (stable: file order where free)."""
        return self._order

    def layer(self, name: str) -> Layer:
        """The layer called ``name``; SpecError if there is none."""
        try:
            return self._by_name[name]
        except KeyError:
            raise SpecError(f"no layer named {name!r} in the spec") from None

    def consumers(self, name: str) -> tuple[str, ...]:
        """Names of the layers that take ``name`` as an input (file order, no repeats)."""
        return tuple(x.name for x in self.layers if name in x.inputs)

    def num_params(self) -> int:
        """Number of trainable parameters, computed analytically (BN running
        statistics are buffers, not parameters)."""
        if "_num_params" not in self.__dict__:  # a spec never changes
            object.__setattr__(self, "_num_params", self._count_params())
        result: int = self.__dict__["_num_params"]
        return result

    def _count_params(self) -> int:
        total = 0
        for layer in self.layers:
            in_shape = self._shapes[layer.inputs[0]]
            if layer.type == "conv":
                out_c, k = filled(layer.out_channels), filled(layer.kernel_size)
                total += out_c * (in_shape[0] // filled(layer.groups)) * k * k
                total += out_c if layer.bias else 0
            elif layer.type == "bn":
                total += 2 * in_shape[0]
            elif layer.type == "dense":
                out_f = filled(layer.out_features)
                total += out_f * in_shape[0] + (out_f if layer.bias else 0)
        return total

    # ----------------------------------------------------------- serialisation
    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict with a fixed key order."""
        return {
            "version": self.version,
            "input_shape": list(self.input_shape),
            "num_classes": self.num_classes,
            "output": self.output,
            "layers": [x.to_dict() for x in self.layers],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], memo: LayerMemo | None = None) -> ArchSpec:
        """Inverse of :meth:`to_dict`; validates; unknown keys raise SpecError.  With ``memo``, a
        layer dict already read (the same object: a child's architecture patched from its
        parent's shares the unchanged ones) gives the same Layer, read once."""
        if not isinstance(data, Mapping):
            raise SpecError(f"a spec must be a JSON object, got {type(data).__name__}")
        expected = {f.name for f in fields(cls) if f.init}
        missing = sorted(expected - set(data))
        unknown = sorted(set(data) - expected)
        if missing:
            raise SpecError(f"spec is missing field(s) {', '.join(missing)}")
        if unknown:
            raise SpecError(f"spec has unknown field(s) {', '.join(unknown)}")
        if not isinstance(data["layers"], list):
            raise SpecError(
                f"spec field 'layers' must be a list, got {type(data['layers']).__name__}"
            )
        if not isinstance(data["input_shape"], list):
            raise SpecError(
                f"input_shape must be a list of 3 integers, got {data['input_shape']!r}"
            )
        return cls(
            input_shape=tuple(data["input_shape"]),
            num_classes=data["num_classes"],
            layers=tuple(
                memo.layer(x) if memo is not None else Layer.from_dict(x) for x in data["layers"]
            ),
            output=data["output"],
            version=data["version"],
        )

    def to_json(self) -> str:
        """Readable JSON, one layer per line; ``from_json(to_json(s)) == s`` and
        re-serialising gives identical text."""
        d = self.to_dict()
        head = [f"  {json.dumps(k)}: {json.dumps(v)}" for k, v in d.items() if k != "layers"]
        body = ",\n".join(f"    {json.dumps(x)}" for x in d["layers"])
        return "{\n" + ",\n".join(head) + ',\n  "layers": [\n' + body + "\n  ]\n}"

    @classmethod
    def from_json(cls, text: str) -> ArchSpec:
        """Parse and validate JSON text; SpecError on invalid JSON or spec."""
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise SpecError(f"invalid JSON: {exc}") from None
        return cls.from_dict(data)

    def save(self, path: str | Path) -> None:
        """Write :meth:`to_json` (plus a final newline) to ``path``."""
        Path(path).write_text(self.to_json() + "\n", encoding="utf-8")

    @classmethod
    def load(cls, path: str | Path) -> ArchSpec:
        """Read a spec file; SpecError naming the file if it is missing or invalid."""
        try:
            text = Path(path).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            raise SpecError(f"cannot read spec file {str(path)!r}: {reason}") from None
        try:
            return cls.from_json(text)
        except SpecError as exc:
            raise SpecError(f"spec file {str(path)!r}: {exc}") from None

    def content_hash(self) -> str:
        """SHA-256 (hex) of the canonical JSON of :meth:`to_dict`: keys sorted,
        no whitespace, ASCII only.  It covers the format version, input_shape,
        num_classes, the output name and every layer's name, type, inputs (in
        order) and fields, in file order -- i.e. exactly what the JSON file
        holds, and nothing else (no weights).  It does not depend on the key
        order of a dict the spec was read from, and is stable across processes
        and Python versions; it changes only when the spec or the format
        version changes."""
        if "_content_hash" not in self.__dict__:  # a spec never changes, so neither does its hash
            # the canonical JSON of to_dict() put together from its sorted keys, each layer's part
            # made once: a child shares most of its Layer objects with its parent
            layers = ",".join(layer.canonical_json() for layer in self.layers)
            text = (
                f'{{"input_shape":{canonical(list(self.input_shape))},"layers":[{layers}],'
                f'"num_classes":{canonical(self.num_classes)},"output":{canonical(self.output)},'
                f'"version":{canonical(self.version)}}}'
            )
            object.__setattr__(
                self, "_content_hash", hashlib.sha256(text.encode("ascii")).hexdigest()
            )
        result: str = self.__dict__["_content_hash"]
        return result


def _topological_order(layers: tuple[Layer, ...], by_name: dict[str, Layer]) -> list[str]:
    """Kahn's algorithm, taking the ready layer that comes first in file order; SpecError on a
    cycle.

    The ready layers are a heap of file positions: the master validates every
    child it plans, so this runs thousands of times a second.
    """
    position = {x.name: k for k, x in enumerate(layers)}
    if all(i == INPUT or position[i] < k for k, x in enumerate(layers) for i in x.inputs):
        return list(position)  # file order is topological, so Kahn's algorithm would keep it
    pending = [0] * len(layers)
    users: list[list[int]] = [[] for _ in layers]
    for k, x in enumerate(layers):
        sources = set(x.inputs)
        sources.discard(INPUT)
        pending[k] = len(sources)
        for src in sources:
            users[position[src]].append(k)
    ready = [k for k, count in enumerate(pending) if count == 0]  # ascending: already a heap
    order: list[str] = []
    while ready:
        k = heapq.heappop(ready)
        order.append(layers[k].name)
        for user in users[k]:
            pending[user] -= 1
            if pending[user] == 0:
                heapq.heappush(ready, user)
    if len(order) < len(layers):
        stuck = {layers[k].name for k, c in enumerate(pending) if c > 0}
        path = [next(x.name for x in layers if x.name in stuck)]
        while True:  # walk backwards through stuck inputs until a name repeats
            nxt = next(i for i in by_name[path[-1]].inputs if i in stuck)
            if nxt in path:
                cycle = path[path.index(nxt) :] + [nxt]
                break
            path.append(nxt)
        raise SpecError(
            f"layer {cycle[0]!r} is part of a cycle: " + " <- ".join(repr(n) for n in cycle)
        )
    return order


def _where(layer: Layer) -> str:
    """How an error message names a layer (made only when there is an error)."""
    return f"layer {layer.name!r} ({layer.type})"


def _infer_shape(layer: Layer, in_shapes: list[Shape], names: tuple[str, ...]) -> Shape:
    """Output shape of ``layer`` given its input shapes; SpecError on a mismatch."""
    kind = layer.type
    first = in_shapes[0]
    if kind in ("conv", "bn", "maxpool", "avgpool", "global_avgpool") and len(first) != 3:
        raise SpecError(f"{_where(layer)} needs a (C, H, W) input, got {first} from {names[0]!r}")
    if kind == "dense" and len(first) != 1:
        raise SpecError(
            f"{_where(layer)} needs a flat (F,) input, got {first} from {names[0]!r}; "
            f"add a global_avgpool before it"
        )
    if kind in _SAME_SHAPE:
        return first
    if kind == "global_avgpool":
        return (first[0],)
    if kind == "dense":
        return (filled(layer.out_features),)
    if kind == "add":
        for shape, name in zip(in_shapes[1:], names[1:], strict=True):
            if shape != first:
                raise SpecError(
                    f"{_where(layer)}: input shapes differ: {names[0]!r} {first} "
                    f"vs {name!r} {shape}"
                )
        return first
    if kind == "concat":
        for shape, name in zip(in_shapes[1:], names[1:], strict=True):
            if len(shape) != len(first) or shape[1:] != first[1:]:
                raise SpecError(
                    f"{_where(layer)}: inputs must agree in all but the channel dimension: "
                    f"{names[0]!r} {first} vs {name!r} {shape}"
                )
        return (sum(s[0] for s in in_shapes),) + first[1:]
    # conv, maxpool, avgpool
    c, h, w = first
    k, s, pad = filled(layer.kernel_size), filled(layer.stride), filled(layer.padding)
    out_c = c
    if kind == "conv":
        if c % filled(layer.groups):
            raise SpecError(
                f"{_where(layer)}: input channels {c} from {names[0]!r} are not divisible "
                f"by groups {layer.groups}"
            )
        out_c = filled(layer.out_channels)
    out_h = (h + 2 * pad - k) // s + 1
    out_w = (w + 2 * pad - k) // s + 1
    if out_h < 1 or out_w < 1:
        raise SpecError(
            f"{_where(layer)}: spatial size shrinks to {max(out_h, 0)}x{max(out_w, 0)} "
            f"(input {h}x{w}, kernel {k}, stride {s}, padding {pad})"
        )
    return (out_c, out_h, out_w)


class LayerMemo:
    """Layer objects by the dict each was read from, the ``size`` most recent.

    Keyed by the dict's identity: a dict held here cannot be freed, so its
    identity cannot pass to another object while its entry lives, and a
    lookup also checks that the dict is the one stored.  Reading a child's
    architecture patched from its parent's (:mod:`aihpc.records.archdiff`)
    then reads only its new layers, and its content hash and shapes reuse
    what the parent's Layer objects already hold.
    """

    def __init__(self, size: int = 200_000) -> None:
        self.size = size
        self._layers: OrderedDict[int, tuple[Any, Layer]] = OrderedDict()

    def layer(self, data: Any) -> Layer:
        entry = self._layers.get(id(data))
        if entry is not None and entry[0] is data:
            self._layers.move_to_end(id(data))
            return entry[1]
        layer = Layer.from_dict(data)
        self._layers[id(data)] = (data, layer)
        if len(self._layers) > self.size:
            self._layers.popitem(last=False)
        return layer
