"""Errors by kind, each with its exit code.

The CLI turns any :class:`AihpcError` into a single line on stderr and the
error's :attr:`~AihpcError.exit_code`; anything else is a bug and keeps its
traceback (Python's exit code 1).  Messages name the rule and the offending
value, e.g. ``"batch must be >= 1, got 0"``, or what failed.

Three kinds (docs/reference/exit-codes.md lists the exit codes):

* **a user's mistake**, exit 2: a configuration value or argument
  (:class:`ConfigError`), a model or architecture (:class:`ModelError`,
  :class:`SpecError`, :class:`MorphError`), a missing or corrupt input
  (:class:`DataError`, :class:`StorageError`).  Fix the input and run again.
* **a failure of the machine**, exit 3 (:class:`RunFailure`): workers that
  never joined or died (:class:`WorkersLost`), an allocation that failed
  (:class:`OutOfMemory`), a task that raised inside a worker
  (:class:`WorkerFailed`).  The input was fine; the machine was not.
* **a measurement that fails its check**, exit 4 (:class:`CheckFailed`):
  a quality target not reached within the budget (:class:`TargetNotReached`),
  a result that does not verify (:class:`VerificationFailed`).  The run
  completed and wrote its results; they say no.
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_BUG = 1  # Python's own exit code for an uncaught exception: its traceback is printed
EXIT_USER = 2
EXIT_MACHINE = 3
EXIT_CHECK = 4
EXIT_INTERRUPTED = 130  # 128 + SIGINT
EXIT_PIPE = 141  # 128 + SIGPIPE: the reader of stdout left


class AihpcError(Exception):
    """Base class: an error the CLI reports in one line.

    A user's mistake (exit 2), unless a subclass says otherwise.
    """

    exit_code = EXIT_USER


class ConfigError(AihpcError, ValueError):
    """A configuration value or command-line argument is invalid."""


class ModelError(AihpcError, ValueError):
    """An unknown model name or invalid model arguments."""


class SpecError(AihpcError, ValueError):
    """An architecture spec is malformed or its shapes do not fit."""


class MorphError(AihpcError, ValueError):
    """A morphism was asked for that cannot be applied."""


class DataError(AihpcError):
    """A data set is missing, empty or corrupt."""


class StorageError(AihpcError):
    """The run directory or its store cannot be written or read."""


class RunFailure(AihpcError):
    """The machine failed while running: not the user's input."""

    exit_code = EXIT_MACHINE


class WorkersLost(RunFailure):
    """Workers that never joined or died, a scheduler that cannot be reached."""


class OutOfMemory(RunFailure):
    """An allocation failed on the device or the host."""


class WorkerFailed(RunFailure):
    """A task raised inside a worker (not an aihpc error); its traceback is in a log."""


class CheckFailed(AihpcError):
    """The measurement ran to the end and its result fails a check; the results say so."""

    exit_code = EXIT_CHECK


class TargetNotReached(CheckFailed):
    """A quality target was not reached within the budget."""


class VerificationFailed(CheckFailed):
    """A result does not verify: recounted, recomputed or validated, it disagrees."""


def kind_of_exit(code: int) -> type[AihpcError]:
    """The kind of error a child ``aihpc`` process reported by its exit code.

    A child's bug (exit 1) is a failure of the run here: the parent's input was fine.
    """
    return {EXIT_USER: AihpcError, EXIT_CHECK: CheckFailed}.get(code, RunFailure)
