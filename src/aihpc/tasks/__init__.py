"""The tasks of the AutoML benchmark, behind one interface (:class:`aihpc.tasks.base.Task`).

``image`` (the default): image classification, CNNs grown by network morphism
(:mod:`aihpc.tasks.image.task`).  ``lm``: language modelling, decoder-only
transformers grown by exact operators (:mod:`aihpc.tasks.language.task`).  The
runner, trainer, counter and records ask the run's task (``RunConfig.task``,
``DataRef.task``) through :func:`task_of`.

Adding a task: a class with the :class:`~aihpc.tasks.base.Task` methods, a
line in :data:`TASKS`' map below, and its name in :data:`aihpc.base.config.TASKS`.
"""

from __future__ import annotations

from typing import Any

from aihpc.base.config import TASKS, RunConfig
from aihpc.base.errors import ConfigError
from aihpc.scoring.quality import Quality
from aihpc.tasks.base import Arch, DataInfo, Plan, Split, StateDict, Task

__all__ = ["TASKS", "Arch", "DataInfo", "Plan", "Split", "StateDict", "Task", "of_run", "task_of"]

_CACHE: dict[str, Task] = {}


def task_of(name: str) -> Task:
    """The task called ``name`` (ConfigError naming the valid ones for any other)."""
    if name not in _CACHE:
        if name == "image":
            from aihpc.tasks.image.task import ImageTask

            _CACHE[name] = ImageTask()
        elif name == "lm":
            from aihpc.tasks.language.task import LanguageTask

            _CACHE[name] = LanguageTask()
        else:
            raise ConfigError(f"task must be one of {', '.join(TASKS)}, got {name!r}")
    return _CACHE[name]


def of_run(config: dict[str, Any] | None, data: dict[str, Any] | None) -> tuple[Task, Quality]:
    """The task of a run, and how it judged models, from the configuration and the data it
    recorded (its store's meta, or results.json's sections): image for runs from before tasks."""
    run = RunConfig.from_dict(config or {}, source="the run's recorded configuration")
    task = task_of(run.task)
    return task, task.quality(run, data or {})
