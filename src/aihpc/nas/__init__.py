"""Neural architecture search building blocks.

* :mod:`aihpc.nas.layer` -- :class:`Layer`, one node of a spec: the layer
  types, their fields and defaults;
* :mod:`aihpc.nas.spec` -- :class:`ArchSpec`, a JSON-serialisable CNN DAG
  (validation, shape inference, parameter count, content hash);
* :mod:`aihpc.nas.build` -- :class:`SpecNet`, the ``nn.Module`` of a spec;
* :mod:`aihpc.nas.seeds` -- ResNet-style seed specs sized to the input;
* :mod:`aihpc.nas.morphism` -- function-preserving morphisms (deepen, widen,
  add_skip, random_morph) that carry a parent's weights to its child;
* :mod:`aihpc.nas.moments` -- what a growth step does to the optimizer's
  state: each step's gradient map, beside its weight map;
* :mod:`aihpc.nas.search` -- the strategies that choose a parent;
  :mod:`aihpc.nas.hpo` -- hyperparameters from TPE (:mod:`aihpc.nas.tpe_study`)
  in child processes (:mod:`aihpc.nas.hpo_process`), restarted when they die
  (:mod:`aihpc.nas.helper_restart`).

The names below are imported lazily, so ``import aihpc.nas.<module>`` of a
torch-free module (spec, seeds, ...) does not import torch.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "ArchSpec": "aihpc.nas.spec",
    "Layer": "aihpc.nas.layer",
    "BN_EPS": "aihpc.nas.layer",
    "FORMAT_VERSION": "aihpc.nas.spec",
    "INPUT": "aihpc.nas.layer",
    "LAYER_TYPES": "aihpc.nas.layer",
    "SpecNet": "aihpc.nas.build",
    "state_shapes": "aihpc.nas.build",
    "seed_spec": "aihpc.nas.seeds",
    "add_skip": "aihpc.nas.morphism",
    "deepen": "aihpc.nas.morphism",
    "random_morph": "aihpc.nas.morphism",
    "widen": "aihpc.nas.morphism",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'aihpc.nas' has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)
