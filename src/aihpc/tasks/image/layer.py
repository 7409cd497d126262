"""One layer of an architecture spec: the layer types, their fields and defaults.

A :class:`Layer` is a frozen, validated value: a unique name (letters, digits,
underscore), a type, a tuple of input names (``"input"`` is the network input)
and the fields of its type.  Layer types and their fields (defaults in
brackets):

============== ============================================================
conv           out_channels, kernel_size, stride [1], padding [0],
               groups [1], bias [true]        (nn.Conv2d, 4-D in and out)
bn             --    batch norm 2d, eps 1e-5, momentum 0.1 (4-D)
relu           --
add            --    elementwise sum of >= 2 inputs of identical shape
concat         --    channel concatenation of >= 2 inputs (same H, W)
maxpool        kernel_size, stride [kernel_size], padding [0] (4-D)
avgpool        kernel_size, stride [kernel_size], padding [0] (4-D; padded
               zeros are counted, as in nn.AvgPool2d)
global_avgpool --    mean over H, W: (C, H, W) -> (C,)
dense          out_features, bias [true]      (nn.Linear, needs 1-D input)
dropout        p [0.5], 0 <= p < 1
============== ============================================================

A layer is checked on its own here; how layers fit together (references,
cycles, shapes) is :class:`aihpc.tasks.image.spec.ArchSpec`'s.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from aihpc.base.checks import integer, number
from aihpc.base.errors import SpecError
from aihpc.tasks.base import canonical

#: The name by which layers refer to the network input.
INPUT = "input"
#: Batch-norm epsilon used by every ``bn`` layer (fixed by the format).
BN_EPS = 1e-5

# type -> ordered {field: default}; a default of _REQUIRED means "must be given".
_REQUIRED = object()
_TYPE_FIELDS: dict[str, dict[str, Any]] = {
    "conv": {
        "out_channels": _REQUIRED,
        "kernel_size": _REQUIRED,
        "stride": 1,
        "padding": 0,
        "groups": 1,
        "bias": True,
    },
    "bn": {},
    "relu": {},
    "add": {},
    "concat": {},
    "maxpool": {"kernel_size": _REQUIRED, "stride": None, "padding": 0},
    "avgpool": {"kernel_size": _REQUIRED, "stride": None, "padding": 0},
    "global_avgpool": {},
    "dense": {"out_features": _REQUIRED, "bias": True},
    "dropout": {"p": 0.5},
}
#: The layer types a spec may use.
LAYER_TYPES: tuple[str, ...] = tuple(_TYPE_FIELDS)
_MULTI_INPUT = ("add", "concat")
_OPTIONAL_FIELDS = (
    "out_channels",
    "kernel_size",
    "stride",
    "padding",
    "groups",
    "bias",
    "out_features",
    "p",
)
_NAME_RE = re.compile(r"[A-Za-z0-9_]+\Z")

_T = TypeVar("_T")


def filled(value: _T | None) -> _T:
    """A field of a layer whose type uses it: ``Layer.__post_init__`` has filled it with its
    value or its default, so it is never None (an AssertionError if it is: a bug)."""
    if value is None:
        raise AssertionError("read a field that the layer's type does not use")
    return value


@dataclass(frozen=True)
class Layer:
    """One node of the DAG.  Fields not used by ``type`` must stay ``None``;
    omitted optional fields get their defaults (see the module docstring), so
    two layers that mean the same thing compare equal."""

    name: str
    type: str
    inputs: tuple[str, ...]
    out_channels: int | None = None
    kernel_size: int | None = None
    stride: int | None = None
    padding: int | None = None
    groups: int | None = None
    bias: bool | None = None
    out_features: int | None = None
    p: float | None = None

    def __post_init__(self) -> None:
        name = self.name
        if not isinstance(name, str) or not _NAME_RE.match(name):
            raise SpecError(f"layer name must be letters, digits and underscores, got {name!r}")
        if name == INPUT:
            raise SpecError(f"layer name {INPUT!r} is reserved for the network input")
        if self.type not in _TYPE_FIELDS:
            raise SpecError(
                f"layer {name!r}: unknown type {self.type!r} (known: {', '.join(LAYER_TYPES)})"
            )
        if not isinstance(self.inputs, (list, tuple)) or not all(
            isinstance(i, str) for i in self.inputs
        ):
            raise SpecError(
                f"layer {name!r}: inputs must be a list of layer names, got {self.inputs!r}"
            )
        object.__setattr__(self, "inputs", tuple(self.inputs))
        n_in = len(self.inputs)
        if self.type in _MULTI_INPUT and n_in < 2:
            raise SpecError(f"layer {name!r} ({self.type}) needs >= 2 inputs, got {n_in}")
        if self.type not in _MULTI_INPUT and n_in != 1:
            raise SpecError(f"layer {name!r} ({self.type}) needs exactly 1 input, got {n_in}")
        allowed = _TYPE_FIELDS[self.type]
        for key in _OPTIONAL_FIELDS:
            value = getattr(self, key)
            if key not in allowed:
                if value is not None:
                    raise SpecError(f"layer {name!r} ({self.type}) takes no field {key!r}")
                continue
            if value is None:
                default = allowed[key]
                if default is _REQUIRED:
                    raise SpecError(f"layer {name!r} ({self.type}) needs field {key!r}")
                value = self.kernel_size if (key == "stride" and default is None) else default
            object.__setattr__(self, key, self._checked(key, value))
        if self.type in ("maxpool", "avgpool") and 2 * filled(self.padding) > filled(
            self.kernel_size
        ):
            raise SpecError(
                f"layer {name!r} ({self.type}): padding must be <= kernel_size/2, "
                f"got padding {self.padding} with kernel_size {self.kernel_size}"
            )
        if self.type == "conv" and filled(self.out_channels) % filled(self.groups):
            raise SpecError(
                f"layer {name!r} (conv): out_channels {self.out_channels} "
                f"is not divisible by groups {self.groups}"
            )

    def _checked(self, key: str, value: Any) -> Any:
        where = f"layer {self.name!r} ({self.type}): {key}"
        if key == "bias":
            if not isinstance(value, bool):
                raise SpecError(f"{where} must be true or false, got {value!r}")
            return value
        if key == "p":
            return number(where, value, 0, 1, high_open=True, finite=False, error=SpecError)
        minimum = 0 if key == "padding" else 1
        return integer(where, value, minimum, error=SpecError)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict: name, type, inputs, then the type's fields in a fixed order.

        A new dict each call (callers may change it), copied from one made once:
        the master turns every proposed spec into a dict.
        """
        if "_dict" not in self.__dict__:
            out: dict[str, Any] = {"name": self.name, "type": self.type, "inputs": None}
            for key in _TYPE_FIELDS[self.type]:
                out[key] = getattr(self, key)
            object.__setattr__(self, "_dict", out)
        return {**self.__dict__["_dict"], "inputs": list(self.inputs)}

    def canonical_json(self) -> str:
        """:meth:`to_dict` as canonical JSON (keys sorted, no whitespace, ASCII): this layer's
        part of :meth:`ArchSpec.content_hash`, made once (a layer never changes)."""
        if "_canonical_json" not in self.__dict__:
            object.__setattr__(self, "_canonical_json", canonical(self.to_dict()))
        result: str = self.__dict__["_canonical_json"]
        return result

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Layer:
        """Inverse of :meth:`to_dict`; unknown keys raise SpecError."""
        if not isinstance(data, Mapping):
            raise SpecError(f"each layer must be a JSON object, got {type(data).__name__}")
        name = data.get("name", "<unnamed>")
        for key in ("name", "type", "inputs"):
            if key not in data:
                raise SpecError(f"layer {name!r}: missing field {key!r}")
        kind = data["type"]
        known = set(_TYPE_FIELDS.get(kind, {})) | {"name", "type", "inputs"}
        unknown = sorted(set(data) - known)
        if kind in _TYPE_FIELDS and unknown:
            raise SpecError(f"layer {name!r} ({kind}): unknown field(s) {', '.join(unknown)}")
        inputs = data["inputs"]
        if not isinstance(inputs, list):
            raise SpecError(f"layer {name!r}: inputs must be a list of names, got {inputs!r}")
        extra = {k: data[k] for k in _TYPE_FIELDS.get(kind, {}) if k in data}
        return cls(name=name, type=kind, inputs=tuple(inputs), **extra)
