"""Candidate networks for a task: built-in sets, zoo models, spec files and a spec's children.

``--candidates`` takes one of:

* ``small``   -- 10 plain CNNs of widely differing size (:mod:`aihpc.recommend.archs`);
* ``matched`` -- 10 plain CNNs of different shapes and about the same size;
* ``zoo``     -- the CPU-sized image models of :mod:`aihpc.models` (input side < 96)
  that run at the task's input;
* a JSON file: a list (or ``{"candidates": [...]}``) of entries, each one of::

      {"zoo": "resnet20"}
      {"spec": "net.json", "name": "mine"}              # name optional
      {"children_of": "net.json" | "seed", "count": 4, "seed": 0}

  ``children_of`` makes ``count`` children of the spec (``"seed"``: the NAS
  seed for the task's input) by :func:`aihpc.tasks.image.morphism.random_plan`, as
  the search does.  Relative paths are read from the file's folder.

Every candidate is checked against the task: a spec must have the data's
input shape and class count, a zoo model must run on it; otherwise a
ConfigError names the candidate and the shapes.
"""

from __future__ import annotations

import functools
import json
import random
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aihpc.base.checks import integer
from aihpc.base.errors import AihpcError, ConfigError

if TYPE_CHECKING:  # pragma: no cover
    from torch import nn

    from aihpc.tasks.image.spec import ArchSpec

#: An input shape (C, H, W).
Shape = tuple[int, int, int]

BUILTIN = ("small", "matched", "zoo")
#: Zoo image models whose default input side is below this are in the ``zoo`` set.
ZOO_MAX_SIDE = 96


@dataclass(frozen=True)
class Candidate:
    """One network to rank: a name, where it came from, and how to build it fresh."""

    name: str
    source: str  # "spec", "zoo" or "child"
    factory: Callable[[], Any]
    detail: str = ""

    def build(self, seed: int) -> nn.Module:
        """A freshly initialised model (torch's RNG seeded with ``seed``)."""
        import torch

        torch.manual_seed(seed)
        model: nn.Module = self.factory()
        return model


def _spec_candidate(name: str, spec: ArchSpec, source: str = "spec", detail: str = "") -> Candidate:
    from aihpc.tasks.image.build import SpecNet

    return Candidate(
        name, source, functools.partial(SpecNet, spec), detail or f"{spec.num_params()} params"
    )


def _zoo_candidate(name: str, shape: tuple[int, int, int], classes: int) -> Candidate:
    from aihpc import models

    info = models.info(name)
    if info.input_kind != "image":
        raise ConfigError(f"candidate zoo model {name!r} takes token ids, not images")
    return Candidate(
        name,
        "zoo",
        lambda: models.create(name, num_classes=classes, in_channels=shape[0]),
        info.description,
    )


def builtin(kind: str, shape: tuple[int, int, int], classes: int) -> list[Candidate]:
    """The built-in set ``kind`` (one of :data:`BUILTIN`) for this input and class count."""
    from aihpc.recommend.archs import matched_specs, wide_range_specs

    if kind == "small":
        return [_spec_candidate(n, s) for n, s in wide_range_specs(shape, classes)]
    if kind == "matched":
        return [_spec_candidate(n, s) for n, s in matched_specs(shape, classes)]
    from aihpc import models

    return [
        _zoo_candidate(n, shape, classes)
        for n in models.names()
        if models.info(n).input_kind == "image"
        and min(models.info(n).input_shape[1:]) < ZOO_MAX_SIDE
    ]


def _load_spec(path: Path, shape: Shape, classes: int) -> ArchSpec:
    from aihpc.tasks.image.spec import ArchSpec

    spec = ArchSpec.load(path)
    if tuple(spec.input_shape) != tuple(shape) or spec.num_classes != classes:
        raise ConfigError(
            f"candidate spec {str(path)!r} takes input {_fmt(spec.input_shape)} with "
            f"{spec.num_classes} classes; the data set gives {_fmt(shape)} with "
            f"{classes} classes"
        )
    return spec


def _children(entry: dict[str, Any], base: Path, shape: Shape, classes: int) -> list[Candidate]:
    from aihpc.tasks.image.morphism import random_plan
    from aihpc.tasks.image.seeds import seed_spec

    parent_ref = entry["children_of"]
    parent = (
        seed_spec(shape, classes)
        if parent_ref == "seed"
        else _load_spec(base / str(parent_ref), shape, classes)
    )
    count, seed = entry.get("count", 4), entry.get("seed", 0)
    for key, value in (("count", count), ("seed", seed)):
        integer(f"candidates file: children_of {key}", value, 1 if key == "count" else 0)
    rng = random.Random(seed)
    out = []
    for i in range(count):
        child, _, description = random_plan(parent, rng)
        out.append(_spec_candidate(f"child{i}", child, "child", description))
    return out


def _entry(entry: Any, base: Path, shape: Shape, classes: int) -> list[Candidate]:
    if not isinstance(entry, dict) or len(set(entry) & {"zoo", "spec", "children_of"}) != 1:
        raise ConfigError(
            f"candidates file: each entry must be an object with exactly one of "
            f"'zoo', 'spec', 'children_of', got {json.dumps(entry)[:80]}"
        )
    known = {
        "zoo": {"zoo"},
        "spec": {"spec", "name"},
        "children_of": {"children_of", "count", "seed"},
    }
    kind = next(k for k in known if k in entry)
    unknown = sorted(set(entry) - known[kind])
    if unknown:
        raise ConfigError(
            f"candidates file: unknown key(s) {', '.join(unknown)} in a {kind!r} entry; "
            f"valid: {', '.join(sorted(known[kind]))}"
        )
    if kind == "zoo":
        return [_zoo_candidate(str(entry["zoo"]), shape, classes)]
    if kind == "spec":
        path = base / str(entry["spec"])
        return [
            _spec_candidate(str(entry.get("name", path.stem)), _load_spec(path, shape, classes))
        ]
    return _children(entry, base, shape, classes)


def from_file(path: Path, shape: Shape, classes: int) -> list[Candidate]:
    """Candidates listed in a JSON file (see the module docstring)."""
    from aihpc.base.fileio import read_json

    doc = read_json(Path(path), "candidates file", ConfigError)
    entries = doc.get("candidates") if isinstance(doc, dict) else doc
    if not isinstance(entries, list) or not entries:
        raise ConfigError(
            f"candidates file {str(path)!r} must hold a non-empty list of entries "
            f'(or {{"candidates": [...]}})'
        )
    out = [c for e in entries for c in _entry(e, Path(path).parent, shape, classes)]
    names = [c.name for c in out]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise ConfigError(
            f"candidates file {str(path)!r}: duplicate candidate name(s) {', '.join(dup)}"
        )
    return out


def resolve(choice: str, shape: tuple[int, int, int], classes: int) -> list[Candidate]:
    """The candidates named by ``--candidates`` (a built-in set or a file), each checked to fit."""
    if choice == "zoo":  # the zoo models that run at this input; none: say why the first fails
        found = builtin(choice, shape, classes)
        fitting = [c for c in found if _fits(c, shape, classes)]
        if not fitting:
            check_fits(found[0], shape, classes)
        return fitting
    if choice in BUILTIN:
        found = builtin(choice, shape, classes)
    elif Path(choice).suffix.lower() == ".json" or Path(choice).exists():
        found = from_file(Path(choice), shape, classes)
    else:
        raise ConfigError(
            f"--candidates must be one of {', '.join(BUILTIN)} or a JSON file, got {choice!r}"
        )
    for c in found:
        check_fits(c, shape, classes)
    return found


def check_fits(candidate: Candidate, shape: tuple[int, int, int], classes: int) -> None:
    """ConfigError unless the candidate maps (2, C, H, W) to (2, classes) logits."""
    import torch

    try:
        with torch.device("meta"):
            out = candidate.factory()(torch.empty((2, *shape)))
    except (RuntimeError, ValueError, IndexError, AihpcError) as exc:
        reason = str(exc).strip().splitlines()[0][:120] if str(exc).strip() else type(exc).__name__
        raise ConfigError(
            f"candidate {candidate.name!r} does not fit input {_fmt(shape)}: {reason}"
        ) from None
    if tuple(out.shape) != (2, classes):
        raise ConfigError(
            f"candidate {candidate.name!r} gives output {tuple(out.shape[1:])} for input "
            f"{_fmt(shape)}, not ({classes},) logits"
        )


def _fits(candidate: Candidate, shape: Shape, classes: int) -> bool:
    try:
        check_fits(candidate, shape, classes)
    except ConfigError:
        return False
    return True


def _fmt(shape: Shape) -> str:
    return "x".join(str(int(s)) for s in shape)
