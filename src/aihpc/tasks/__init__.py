"""The tasks of the AutoML benchmark, behind one interface (:class:`aihpc.tasks.base.Task`), and
the one place they are registered.

``image`` (the default): image classification, CNNs grown by network morphism
(:mod:`aihpc.tasks.image`).  ``lm``: language modelling, decoder-only
transformers grown by exact operators (:mod:`aihpc.tasks.language`).  Each is a
package holding everything that is its own: its architecture value, network,
growth operators, counting, data, quality measure, the words a report uses
for it, and its settings (:attr:`~aihpc.tasks.base.Task.options_type`).

A run's task is resolved once, where the run starts (:func:`task_of` of
``RunConfig.run.task``), and handed on as an object: to the master, to the
workers with each piece of work, to what reads a finished run
(:func:`of_run`).  Nothing outside ``tasks/`` asks which task it is
(``tests/tasks/test_task_branching.py``).

Adding a task: a package with a class of the :class:`~aihpc.tasks.base.Task`
methods, and one call of :func:`register` (the built-in tasks' are at the end
of this module; another tool's, or a test's, in its own code).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any

from aihpc.base.config import RunConfig, RunSection, task_name
from aihpc.base.errors import ConfigError
from aihpc.scoring.quality import Quality
from aihpc.tasks.base import Arch, DataInfo, Plan, Split, StateDict, Task

__all__ = [
    "BUILT_IN",
    "DEFAULT_TASK",
    "Arch",
    "DataInfo",
    "Plan",
    "Split",
    "StateDict",
    "Task",
    "arch_task",
    "load_task",
    "names",
    "of_run",
    "read_config",
    "recorded_task",
    "register",
    "serving",
    "task_of",
    "task_path",
]

#: The task of a run that names none (every run from before there were tasks).
DEFAULT_TASK: str = RunSection.task

_LOADERS: dict[str, Callable[[], Task]] = {}
_TASKS: dict[str, Task] = {}


def register(name: str, load: Callable[[], Task]) -> None:
    """Make the task ``name`` known to every command: ``load()`` makes it, once, when it is first
    asked for (so that registering imports nothing heavy).  A name registered twice is a bug
    (ValueError)."""
    if name in _LOADERS:
        raise ValueError(f"a task named {name!r} is registered already")
    _LOADERS[name] = load


def names() -> tuple[str, ...]:
    """The registered tasks' names, the default first."""
    return tuple(sorted(_LOADERS, key=lambda n: (n != DEFAULT_TASK, n)))


def task_of(name: str) -> Task:
    """The task called ``name`` (ConfigError naming the registered ones for any other)."""
    if name not in _TASKS:
        if name not in _LOADERS:
            raise ConfigError(f"task must be one of {', '.join(names())}, got {name!r}")
        task = _LOADERS[name]()
        if task.name != name:
            raise ValueError(f"task {name!r} was registered with a task called {task.name!r}")
        _TASKS[name] = task
    return _TASKS[name]


def arch_task(data: Mapping[str, Any]) -> Task:
    """The task a saved architecture (its ``to_dict()``) belongs to: the one its ``"kind"`` names,
    or the default task's where it names none (a CNN spec, as the image task has always written
    them)."""
    kind = data.get("kind", DEFAULT_TASK) if isinstance(data, Mapping) else DEFAULT_TASK
    if not isinstance(kind, str) or kind not in _LOADERS:
        raise ConfigError(f"architecture kind must be one of {', '.join(names())}, got {kind!r}")
    return task_of(kind)


def recorded_task(config: Mapping[str, Any] | None) -> Task:
    """The task a run's recorded configuration (results.json's or its store's ``config``) names:
    the default task where it names none (a run from before there were tasks)."""
    name = (config or {}).get("task") or DEFAULT_TASK
    return task_of(str(name))


def serving(input_kind: str) -> Task:
    """The task whose models read inputs of the zoo's ``input_kind`` (``"image"``,
    ``"tokens"``: :data:`aihpc.models.INPUT_KINDS`): how ``aihpc infer`` serves a zoo model."""
    for name in names():
        if task_of(name).input_kind == input_kind:
            return task_of(name)
    raise ConfigError(f"no task serves models of input kind {input_kind!r}")


def task_path(task: Task) -> str:
    """``module:class`` of a task, what :func:`load_task` makes it again from: how a task
    crosses the data-parallel ranks' JSON channel (:mod:`aihpc.train.rank_channel`)."""
    kind = type(task)
    return f"{kind.__module__}:{kind.__qualname__}"


def load_task(path: str) -> Task:
    """The task :func:`task_path` wrote (a task is stateless: its class makes it)."""
    module, _, qualname = path.partition(":")
    made: Task = getattr(importlib.import_module(module), qualname)()
    return made


def read_config(values: Mapping[str, Any], source: str = "config") -> RunConfig:
    """The run's settings from a TOML file's, the flags', a store's or results.json's mapping,
    flat or in sections: its task's own settings read by its task's
    :attr:`~aihpc.tasks.base.Task.options_type` (ConfigError naming the key and the value, or
    the registered tasks for a task that is not one)."""
    task = task_of(task_name(values))
    return RunConfig.from_dict(values, task.options_type, source=source)


def of_run(config: dict[str, Any] | None, data: dict[str, Any] | None) -> tuple[Task, Quality]:
    """The task of a run, and how it judged models, from the configuration and the data it
    recorded (its store's meta, or results.json's sections): image for runs from before tasks."""
    run = read_config(config or {}, source="the run's recorded configuration")
    task = task_of(run.run.task)
    return task, task.quality(run, data or {})


def _image() -> Task:
    from aihpc.tasks.image.task import ImageTask

    return ImageTask()


def _language() -> Task:
    from aihpc.tasks.language.task import LanguageTask

    return LanguageTask()


register("image", _image)
register("lm", _language)

#: The tasks aihpc ships (another tool's or a test's are registered after them): the ones whose
#: results.json has a published schema (:mod:`aihpc.results.schema`).
BUILT_IN: tuple[str, ...] = names()
