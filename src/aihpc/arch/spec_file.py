"""An architecture spec file of either kind: a CNN (:class:`~aihpc.tasks.image.spec.ArchSpec`) or a
language model (:class:`~aihpc.tasks.language.spec.LMSpec`, ``"kind": "lm"``), read and built.

What ``aihpc count --spec`` and ``aihpc export --spec`` take: a spec as a search
wrote it (results.json's ``arch`` of a trial, or a trial's architecture rebuilt
from its ``arch_diff``), whichever task it came from.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from aihpc.base.errors import SpecError
from aihpc.tasks.image.spec import ArchSpec
from aihpc.tasks.language.spec import LMSpec, is_lm_arch


def load_spec(path: str | Path) -> ArchSpec | LMSpec:
    """The spec in the JSON file ``path``; SpecError naming the file if it is missing or
    invalid."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise SpecError(f"cannot read spec file {str(path)!r}: {reason}") from None
    except ValueError as exc:
        raise SpecError(f"spec file {str(path)!r} is not JSON: {exc}") from None
    try:
        return LMSpec.from_dict(data) if is_lm_arch(data) else ArchSpec.from_dict(data)
    except SpecError as exc:
        raise SpecError(f"spec file {str(path)!r}: {exc}") from None


def build_net(spec: ArchSpec | LMSpec) -> Any:
    """The network of ``spec`` (on torch's current default device)."""
    if isinstance(spec, LMSpec):
        from aihpc.tasks.language.net import LMNet

        return LMNet(spec)
    from aihpc.tasks.image.build import SpecNet

    return SpecNet(spec)


def input_shape(spec: ArchSpec | LMSpec) -> tuple[int, ...]:
    """One sample's input: (C, H, W) images, or (T,) the tokens of a language model's context."""
    return (spec.context,) if isinstance(spec, LMSpec) else tuple(spec.input_shape)
