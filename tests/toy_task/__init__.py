"""A toy third task, ``blobs``, in one package: what adding a task to aihpc takes.

Points in ``dim`` dimensions drawn around ``classes`` random centres are
classified by multi-layer perceptrons grown by one function-preserving step
(a new hidden layer that is the identity).  Everything the task is lives
here: its architecture (:mod:`toy_task.spec`), network and growth
(:mod:`toy_task.net`), data (:mod:`toy_task.data`), quality and settings
(:mod:`toy_task.quality`), and the :class:`~aihpc.tasks.base.Task` that joins
them (:mod:`toy_task.task`).  :func:`register_blobs` makes it known to every
command through :func:`aihpc.tasks.register`, the one call adding a task takes
outside its package (``tests/tasks/test_toy_task.py``).
"""

from __future__ import annotations

from aihpc.tasks import Task, names, register

NAME = "blobs"


def _load() -> Task:
    from toy_task.task import BlobsTask

    return BlobsTask()


def register_blobs() -> None:
    """Register the toy task (once per process: a second call leaves it as it is)."""
    if NAME not in names():
        register(NAME, _load)
