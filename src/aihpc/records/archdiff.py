"""A child's architecture written as its parent's plus what the morphisms changed.

A morphism deepens, widens or adds a skip connection: the child keeps almost
every layer of its parent unchanged.  results.json (schema 3) therefore
writes a child's architecture as a diff against its parent's,
``{"layers": [...], ...}``: each item of ``layers`` is either ``[start, stop]``,
the parent's layers ``start`` to ``stop - 1`` as they are, or a layer written
out in full (new or changed); any other field of the architecture appears
only where it differs from the parent's, and ``"removed"`` lists the fields
the child lacks.  A seed network's 36 layers take ~3.6 KB; a child's diff
~0.2 KB.  :func:`patch` rebuilds the architecture exactly (same dict, same
order of layers), so its content hash is the logged one.

An architecture without ``layers`` (a language model's: a handful of
fields and a short list of blocks) is written as its changed fields only.

Decoding a trial needs its parent's architecture, so readers walk the trials
in id order (a parent always has a lower id than its children) and keep a
parent only until its last child (:class:`ArchBook`).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from aihpc.base.errors import DataError


def diff(arch: dict[str, Any], base: dict[str, Any]) -> dict[str, Any]:
    """``arch`` as the edits of ``base`` (see the module docstring)."""
    out: dict[str, Any] = {k: v for k, v in arch.items() if k != "layers" and base.get(k) != v}
    removed = sorted(k for k in base if k not in arch)
    if removed:
        out["removed"] = removed
    if "layers" in arch and "layers" in base:
        out["layers"] = _layer_edits(arch["layers"], base["layers"])
    return out


def _layer_edits(arch_layers: list[Any], base_layers: list[Any]) -> list[Any]:
    """``arch_layers`` as runs of ``base_layers`` kept as they are and layers written in full."""
    # layer names are unique within an architecture: find each layer's namesake, then compare
    where = {layer.get("name"): i for i, layer in enumerate(base_layers)}
    layers: list[Any] = []
    for layer in arch_layers:
        i = where.get(layer.get("name"))
        if i is None or base_layers[i] != layer:
            i = None
        if i is None:
            layers.append(layer)
        elif layers and isinstance(layers[-1], list) and layers[-1][1] == i:
            layers[-1][1] = i + 1  # the run of unchanged layers goes on
        else:
            layers.append([i, i + 1])
    return layers


def patch(delta: dict[str, Any], base: dict[str, Any]) -> dict[str, Any]:
    """The architecture that :func:`diff` wrote as ``delta`` against ``base``.

    DataError when ``delta`` is not a diff of ``base`` (a range outside its layers).
    """
    layers = []
    for item in delta.get("layers", ()):
        if isinstance(item, dict):
            layers.append(item)
            continue
        if not (
            isinstance(item, list)
            and len(item) == 2
            and all(isinstance(i, int) for i in item)
            and 0 <= item[0] < item[1] <= len(base["layers"])
        ):
            raise DataError(
                f"architecture diff item {item!r} is not a range of the parent's layers"
            )
        layers.extend(base["layers"][item[0] : item[1]])
    removed = set(delta.get("removed", ()))
    arch = {k: v for k, v in base.items() if k not in removed}
    arch.update({k: v for k, v in delta.items() if k not in ("layers", "removed")})
    if "layers" in base:
        arch["layers"] = layers
    return {k: arch[k] for k in sorted(arch)}


class ArchBook:
    """Architectures by trial id while trials are read in id order, each kept until its last child.

    ``last_child``: each parent's highest child id (one pass over the
    parents first); a trial no later trial descends from is not kept at all.
    """

    def __init__(self, parents: Iterable[tuple[int, int | None]]) -> None:
        self._last_child: dict[int, int] = {}
        for trial_id, parent in parents:
            if parent is not None:
                self._last_child[parent] = max(trial_id, self._last_child.get(parent, -1))
        self._archs: dict[int, dict[str, Any]] = {}

    def parent_arch(self, parent: int | None) -> dict[str, Any] | None:
        """The architecture of ``parent`` (None for no parent, or one not read)."""
        return None if parent is None else self._archs.get(parent)

    def read(self, trial_id: int, parent: int | None, arch: dict[str, Any]) -> None:
        """Trial ``trial_id`` has been read with ``arch``: keep it while a child may need it, and
        forget ``parent`` after its last child."""
        if trial_id in self._last_child:
            self._archs[trial_id] = arch
        if parent is not None and self._last_child.get(parent) == trial_id:
            self._archs.pop(parent, None)

    def __len__(self) -> int:
        return len(self._archs)
