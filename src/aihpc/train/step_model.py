"""What a trial's training steps call: the model itself, or a faster way of computing it.

:func:`step_model_for` asks the run's task (:meth:`aihpc.tasks.base.Task.step_model`),
giving it the process's region cache (:func:`aihpc.train.regions.default_cache`)
where the run compiles (:attr:`aihpc.tasks.base.Task.compile_auto`,
``--compile``): a CNN runs region by region, a language model block by block
and on bfloat16 compute weights, each as its task says.  The weights the
optimizer steps, the weight files hold and the growth steps read are always
the model's own.  :func:`room_to_compile` decides whether an epoch has the time
to compile what its model needs.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from aihpc.tasks import Arch, Task
from aihpc.tasks.base import StepModel

if TYPE_CHECKING:
    from aihpc.train.regions import RegionCache


def step_model_for(
    task: Task,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    device: torch.device,
    world: int,
    compiled: bool,
) -> StepModel:
    """The step model of ``model``, ``task``'s, trained by ``optimizer`` on ``device`` in
    ``world`` data-parallel processes; ``compiled`` through the process's
    :func:`aihpc.train.regions.default_cache`."""
    from aihpc.train.regions import default_cache

    return task.step_model(model, optimizer, device, world, default_cache() if compiled else None)


#: A compilation cannot be interrupted, and one that runs past the epoch's deadline holds its
#: worker from the run's end (the energy and the peak after the run wait for it): an epoch whose
#: model has regions not compiled yet compiles only where the time to its deadline is at least
#: this many times what they should take (each as long as the longest this process compiled) ...
COMPILE_ROOM = 2.0
#: ... and at least this many seconds, whatever this process has compiled before (its first
#: compilation included).
MIN_COMPILE_ROOM_S = 60.0


def room_to_compile(task: Task, spec: Arch, cache: RegionCache, seconds_left: float) -> bool:
    """Whether a model of ``spec`` (``task``'s) may compile with ``seconds_left`` to its epoch's
    deadline: yes where ``cache`` holds every region it runs, else where :data:`COMPILE_ROOM`
    times the compilations still to make fits (at least :data:`MIN_COMPILE_ROOM_S`)."""
    missing = task.region_signatures(spec) - cache.signatures()
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
