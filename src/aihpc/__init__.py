"""aihpc: an AI-HPC benchmark suite on PyTorch.

The public API is re-exported here and imported lazily, so ``import aihpc``
(and ``aihpc --help``) does not pay for torch until something needs it.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

# public name -> "module:attribute" (attribute empty for a whole module)
_LAZY: dict[str, str] = {
    "count_ops": "aihpc.counting:count_ops",
    "OpCount": "aihpc.counting:OpCount",
    "models": "aihpc.models:",
    "ArchSpec": "aihpc.tasks.image.spec:ArchSpec",
    "load_dataset": "aihpc.tasks.image.data:load_dataset",
    "export_onnx": "aihpc.arch.export:export_onnx",
}

__all__ = ["__version__", *_LAZY]


def __getattr__(name: str) -> Any:
    try:
        target = _LAZY[name]
    except KeyError:
        raise AttributeError(f"module 'aihpc' has no attribute {name!r}") from None
    module_name, _, attr = target.partition(":")
    module = importlib.import_module(module_name)
    value = getattr(module, attr) if attr else module
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
