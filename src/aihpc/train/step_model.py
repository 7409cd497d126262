"""What a trial's training steps call: the model itself, or a faster way of computing it.

:func:`step_model_for` chooses, from the model's kind, the device and whether
the run compiles (:attr:`aihpc.tasks.base.Task.compile_auto`, ``--compile``):

* a CNN (:class:`~aihpc.tasks.image.build.SpecNet`) compiled runs region by region
  (:class:`aihpc.train.regions.RegionNet`), under bfloat16 autocast on a GPU;
* a language model (:class:`~aihpc.tasks.language.net.LMNet`) runs through an
  :class:`aihpc.tasks.language.regions.LMStep`: its blocks compiled one by one
  where compiled, its passes on bfloat16 compute weights with the float32
  parameters as master where :data:`aihpc.tasks.language.regions.COMPUTE_DTYPE`
  says so for the device (then without autocast: the logits come back in
  float32 for the loss), in one process only (data-parallel ranks keep
  float32 weights under autocast);
* anything else is called as it is, under bfloat16 autocast on a GPU.

The weights the optimizer steps, the weight files hold and the morphisms
read are always the model's own.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from aihpc.tasks import Arch
    from aihpc.train.regions import RegionCache

#: An autocast context, or nothing.
Autocast = contextlib.AbstractContextManager[object]


@dataclass(frozen=True)
class StepModel:
    """What the steps call (``module``), under ``autocast``; the passes (``"train"``,
    ``"eval"``) whose first run compiles, and the compiled regions those first runs call."""

    module: torch.nn.Module
    autocast: Autocast
    compiled_modes: tuple[str, ...] = ()
    regions_needed: int = 0


def step_model_for(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    device: torch.device,
    world: int,
    compiled: bool,
) -> StepModel:
    """The step model of ``model`` (see the module docstring), trained by ``optimizer`` on
    ``device`` in ``world`` data-parallel processes; ``compiled`` through the process's
    :func:`aihpc.train.regions.default_cache`."""
    from aihpc.tasks.image.build import SpecNet
    from aihpc.tasks.image.regions import RegionNet
    from aihpc.tasks.language.net import LMNet
    from aihpc.train.regions import default_cache

    autocast: Autocast = (
        torch.autocast("cuda", dtype=torch.bfloat16)
        if device.type == "cuda"
        else contextlib.nullcontext()
    )
    if isinstance(model, LMNet):
        from aihpc.tasks.language.regions import COMPUTE_DTYPE, LMStep

        dtype = COMPUTE_DTYPE.get(device.type) if world == 1 else None
        if dtype is None and not compiled:
            return StepModel(model, autocast)
        step = LMStep(model, compute_dtype=dtype, cache=default_cache() if compiled else None)
        step.follow(optimizer)
        low: Autocast = contextlib.nullcontext()
        return StepModel(
            step, autocast if dtype is None else low, step.compiled_modes, step.regions_needed()
        )
    if compiled:
        if not isinstance(model, SpecNet):
            raise TypeError(f"no regional compilation for a {type(model).__name__}")
        net = RegionNet(model, default_cache())
        # both passes compile: training's and evaluation's
        return StepModel(net, autocast, ("train", "eval"), 2 * len(net.regions))
    return StepModel(model, autocast)


#: A compilation cannot be interrupted, and one that runs past the epoch's deadline holds its
#: worker from the run's end (the energy and the peak after the run wait for it): an epoch whose
#: model has regions not compiled yet compiles only where the time to its deadline is at least
#: this many times what they should take (each as long as the longest this process compiled) ...
COMPILE_ROOM = 2.0
#: ... and at least this many seconds, whatever this process has compiled before (its first
#: compilation included).
MIN_COMPILE_ROOM_S = 60.0


def region_signatures(spec: Arch) -> frozenset[str]:
    """The signatures of the regions a compiled model of ``spec`` runs."""
    from aihpc.tasks.image.spec import ArchSpec
    from aihpc.tasks.language.spec import LMSpec

    if isinstance(spec, LMSpec):
        from aihpc.tasks.language.regions import block_regions

        return frozenset(r.signature for r in block_regions(spec))
    if isinstance(spec, ArchSpec):
        from aihpc.tasks.image.regions import partition

        return frozenset(r.signature for r in partition(spec))
    raise TypeError(f"no compiled regions for a {type(spec).__name__}")


def room_to_compile(spec: Arch, cache: RegionCache, seconds_left: float) -> bool:
    """Whether a model of ``spec`` may compile with ``seconds_left`` to its epoch's deadline:
    yes where ``cache`` holds every region it runs, else where :data:`COMPILE_ROOM` times the
    compilations still to make fits (at least :data:`MIN_COMPILE_ROOM_S`)."""
    missing = region_signatures(spec) - cache.signatures()
    if not missing:
        return True
    needed = COMPILE_ROOM * len(missing) * cache.longest_seconds()
    return seconds_left >= max(needed, MIN_COMPILE_ROOM_S)


_COMPILE_CACHE: Path | None = None


def use_compile_cache(stage_dir: str | None) -> Path:
    """Point inductor's on-disk caches at one folder per node, once per worker process:
    ``TORCHINDUCTOR_CACHE_DIR`` where set, else ``aihpc-inductor`` in the data's staging
    folder ``stage_dir`` (node-local storage) or the temporary folder, shared by the node's
    workers (:func:`aihpc.train.regions.use_cache_dir`)."""
    global _COMPILE_CACHE
    if _COMPILE_CACHE is None:
        from aihpc.train.regions import use_cache_dir

        root = stage_dir or tempfile.gettempdir()
        folder = os.environ.get("TORCHINDUCTOR_CACHE_DIR") or Path(root) / "aihpc-inductor"
        _COMPILE_CACHE = use_cache_dir(folder)
    return _COMPILE_CACHE
