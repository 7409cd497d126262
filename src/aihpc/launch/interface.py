"""What the run and its master submit work through: the executor's interface, as Protocols.

:class:`aihpc.launch.executor.DaskExecutor` is the executor ``aihpc run``
uses; the tests' in-process executor (``tests/runner/runner_helpers.py``) and
the scale rehearsal's simulated workers (``benchmarks/rehearsal_executor.py``,
``benchmarks/master_capacity.py``) stand where it stands.  The master needs
only :class:`TaskExecutor` (slots, submit, wait); the run around it
(placement, the peak, staging, energy) needs all of :class:`Executor`.

Nothing here imports Dask: a module that takes an executor imports these
types only.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

if TYPE_CHECKING:  # for the types only: Dask is imported when a run starts its workers
    from distributed.diagnostics.plugin import WorkerPlugin

T = TypeVar("T")
R = TypeVar("R")
R_co = TypeVar("R_co", covariant=True)


class TaskFuture(Protocol[R_co]):
    """A task submitted to a worker (a Dask ``Future``, or a stand-in for one)."""

    def result(self) -> R_co:
        """What the task returned; raises what it raised, or the loss of its worker."""
        ...

    def cancel(self) -> object:
        """Give up on the task (at the deadline's grace); what it returns is not used."""
        ...


# A future of any result: what wait() hands back is what it was given.
F = TypeVar("F", bound=TaskFuture[object])


class TaskExecutor(Protocol):
    """What the master (:class:`aihpc.runner.search.master.Master`) submits its tasks through."""

    def slots(self) -> int:
        """Task slots of the workers alive now."""
        ...

    def submit(self, fn: Callable[[T], R], task: T, key: str) -> TaskFuture[R]:
        """``fn(task)`` on a worker, under the task's name ``key``."""
        ...

    def wait(self, futures: Collection[F], timeout: float) -> set[F]:
        """Those of ``futures`` done within ``timeout`` seconds (none if none is)."""
        ...


class Executor(TaskExecutor, Protocol):
    """The run's whole view of its workers: the master's tasks, and what runs on every worker."""

    # where a failure on a worker is logged (aihpc.launch.remote); None: the temporary folder
    log_dir: Path | None

    def wait_for_workers(self, n: int, timeout: float) -> None:
        """Return once ``n`` workers are alive; :class:`~aihpc.base.errors.WorkersLost` if not
        within ``timeout`` seconds."""
        ...

    def run_on_each(self, fn: Callable[..., Any], *args: Any) -> list[Any]:
        """``fn(*args)`` on every worker alive now, at once; their answers in worker order."""
        ...

    def alive(self) -> dict[str, int]:
        """The workers alive now, by address, with their threads."""
        ...

    def ask_each(
        self, fn: Callable[..., Any], *args: Any, workers: Collection[str] | None = None
    ) -> dict[str, Any]:
        """``fn(*args)`` on every worker alive now (or those of ``workers``, by address), beside
        the task it runs (not queued after it): the answers by worker name, short, for questions
        that take no time (a worker that leaves meanwhile is left out)."""
        ...

    def workers_per_host(self) -> dict[str, int]:
        """For each worker alive now (by address), how many workers share its host."""
        ...

    def register_plugin(self, plugin: WorkerPlugin) -> None:
        """Install a Dask worker plugin on every worker, now and on any that joins later."""
        ...

    def memory_limits(self) -> dict[str, int | None]:
        """Each worker's memory limit in bytes (None: none), by worker name."""
        ...

    def memory_kill(self, exc: BaseException) -> str | None:
        """Why the worker of a task that failed with ``exc`` died, if its nanny killed it for
        memory: its memory against its limit, in words; None otherwise."""
        ...

    def close(self) -> None:
        """Let the workers go (those the executor started, it stops)."""
        ...
