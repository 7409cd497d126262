"""A task's failure inside a Dask worker, brought back to the master as one line and a log.

An exception raised by a task makes Dask log it on the worker ("Compute
Failed", the task, ``Exception: "DataError(...)"`` and a quoted
``Traceback:``), and that log reaches the terminal before aihpc's own one
line.  A task run through :func:`contained` raises nothing on the worker:
its exception comes back as a :class:`Failed` value, naming the worker, with
the remote traceback as text.  :func:`gather` then writes that traceback to
:data:`LOG_FILE` in the run's folder and raises one line naming the worker:
an aihpc error keeps its kind (a worker's :class:`~aihpc.base.errors.DataError`
is still the user's mistake, exit 2), any other exception is a
:class:`~aihpc.base.errors.WorkerFailed` (exit 3).  A worker that died running the
task is :class:`~aihpc.base.errors.WorkersLost`.
"""

from __future__ import annotations

import traceback
from collections.abc import Callable, Collection
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aihpc.base.errors import AihpcError, WorkerFailed, WorkersLost

if TYPE_CHECKING:  # for the types only: Dask is imported when a run starts its workers
    from distributed import Client, Worker

LOG_FILE = "worker-errors.log"


@dataclass(frozen=True)
class Failed:
    """An exception raised by a task on a worker, as a value."""

    worker: str
    error: AihpcError | None  # aihpc's own errors travel as they are; others as text
    summary: str  # "TypeName: message", the first line
    traceback: str


def contained(fn: Callable[..., Any], *args: Any) -> Any:
    """Runs on a worker: ``fn(*args)``, or a :class:`Failed` for the exception it raised."""
    from aihpc.machine.devices import worker_name

    try:
        return fn(*args)
    except Exception as exc:  # every kind: it is reported on the master, with its traceback
        message = (str(exc).strip().splitlines() or [""])[0]
        return Failed(
            worker=worker_name(),
            error=exc if isinstance(exc, AihpcError) else None,
            summary=f"{type(exc).__name__}: {message}" if message else type(exc).__name__,
            traceback="".join(traceback.format_exception(exc)),
        )


def named(fn: Callable[..., Any], *args: Any, dask_worker: Worker) -> tuple[str, Any]:
    """Runs on a worker, out of band (``Client.run``, beside its task): the worker's name and
    ``fn(*args)`` or its :class:`Failed` (``Client.run`` passes ``dask_worker``; a task's way of
    knowing its worker does not reach here)."""
    answer = contained(fn, *args)
    name = str(dask_worker.name)
    if isinstance(answer, Failed):
        answer = replace(answer, worker=name)
    return name, answer


def ask(
    client: Client,
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    log_dir: Path,
    workers: Collection[str] | None = None,
) -> dict[str, Any]:
    """``fn(*args)`` on every worker alive now (or those of ``workers``, by address), out of band:
    the answers by worker name.

    :func:`named` raises nothing, so an exception among the replies is a worker that left while
    it was asked: it is left out.  The first failure of ``fn`` is logged and raised as
    :func:`unwrap` raises it.
    """
    chosen = None if workers is None else list(workers)
    replies = client.run(named, fn, *args, workers=chosen, on_error="return")
    answers = dict(r for r in replies.values() if not isinstance(r, BaseException))
    unwrap(list(answers.values()), log_dir)
    return answers


def gather(client: Client, futures: list[Any], log_dir: Path) -> list[Any]:
    """The futures' results, in order; the first :class:`Failed` among them is logged and raised."""
    from distributed import KilledWorker

    try:
        values: list[Any] = client.gather(futures)  # type: ignore[no-untyped-call]  # unannotated
    except KilledWorker as exc:
        raise WorkersLost(f"a worker died running a task: {exc}") from None
    return unwrap(values, log_dir)


def unwrap(values: list[Any], log_dir: Path) -> list[Any]:
    """``values``, unless one is a :class:`Failed`: then every failure's traceback goes to
    ``log_dir/LOG_FILE`` and the first is raised as one line of its kind."""
    failed = [v for v in values if isinstance(v, Failed)]
    if not failed:
        return values
    log = Path(log_dir) / LOG_FILE
    with log.open("a", encoding="utf-8") as f:
        for failure in failed:
            f.write(f"worker {failure.worker}: {failure.summary}\n{failure.traceback}\n")
    first = failed[0]
    if first.error is not None:
        kind = type(first.error)
        raise kind(f"worker {first.worker}: {first.error} (its traceback: {log})")
    raise WorkerFailed(f"worker {first.worker}: {first.summary} (its traceback: {log})")
