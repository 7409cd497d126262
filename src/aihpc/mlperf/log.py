"""MLPerf-style logging of an aihpc AutoML run, and its compliance check.

:class:`MLPerfLog` writes one ``:::MLLOG {json}`` line per event to its own
file, in the layout of mlperf-logging's ``mllog`` (its keys, in its order,
encoded as it encodes them) with its constants;
:func:`aihpc.mlperf.check.check_compliance` runs the MLPerf compliance checker (HPC ruleset
3.0.0) on such a file with our rules
(``rules/aihpc_automl.yaml``, which chains to a copy of the HPC 3.0.0
``common.yaml``; see that file's header).

How an AutoML run maps onto an MLPerf log
-----------------------------------------
An aihpc run trains many trials concurrently on Dask workers, but the log
describes the *search as a whole*, as one MLPerf run:

* ``submission_info`` (org, platform, division, status, benchmark
  ``aihpc_automl``, number_of_nodes, accelerators_per_node), ``cache_clear``,
  then ``init_start`` ... ``init_stop`` around the master's set-up (data set,
  worker pool; optionally ``staging_start``/``staging_stop`` inside it), then
  ``train_samples``/``eval_samples`` (the sizes of the train and eval sets).
* ``run_start`` when the search starts; ``run_stop(status)`` once, at the end
  (``"success"``, or ``"aborted"``; leaving a ``with`` block by an exception
  logs ``aborted`` automatically).
* **Epochs are the master's progression.**  Each time a worker reports a
  finished trial-epoch (one epoch of one trial, trained and evaluated), the
  master numbers it ``k = 1, 2, 3, ...`` in order of arrival and logs one
  block, most simply with :meth:`MLPerfLog.trial_epoch`::

      epoch_start(k)  epoch_stop(k)  eval_start(k)  eval_stop(k)
      eval_accuracy(best accuracy so far, epoch_num=k)

  with metadata such as ``trial_id`` and ``trial_epoch`` on each event.  The
  epoch interval may carry the worker's own start/stop times (``start_ms``,
  ``stop_ms``), so intervals of different k may overlap in time; the checker
  only requires the numbering, and run time is ``run_stop - run_start``.
  The eval_accuracy value is the best accuracy found so far, so it never
  decreases: the log is the quality curve of the search.

Rules the class enforces itself (a :class:`ValueError` means a bug in the
caller, not bad user input): epoch numbers are integers >= 1 and strictly
increase; an epoch is stopped before the next starts; evals refer to an epoch
already started; eval_accuracy epochs strictly increase and its value lies in
[0, 1] and never decreases; epoch/eval events lie between run_start and
run_stop; once-only keys (submission keys, init_stop, run_start, run_stop,
train_samples, eval_samples) are logged once.  Everything else (e.g. init
before run) is left to the checker.  Values and metadata must be JSON values
(numpy/torch scalars and arrays are converted with ``.tolist()``).

Each instance writes its own file, not through the :mod:`logging` module, so
instances do not share output and nothing reaches any logger; each call's
lines are flushed when it returns (:meth:`MLPerfLog.trial_epoch`'s five at
once); :meth:`MLPerfLog.close` closes the file.  Each event's metadata also
records the ``file``/``lineno`` of the calling code (mllog's convention),
pointing at the caller of this class.  Lines are made here: ``mllog``'s
logger reads source files to find the caller of every event (a tenth of the
master's time at 4,096 workers, benchmarks/scale_rehearsal.py), and a
logging record and a flush per line were a tenth more.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from types import FrameType, TracebackType
from typing import Any, TextIO

from mlperf_logging.mllog import constants

from aihpc.base.checks import integer
from aihpc.base.errors import ConfigError, StorageError
from aihpc.mlperf.line import mllog_line, plain_json

BENCHMARK = "aihpc_automl"
"""The benchmark name our rules accept for ``submission_benchmark``."""

DIVISIONS = ("closed", "open")
STATUSES = ("cloud", "onprem", "preview", "research")
RUN_STATUSES = (constants.SUCCESS, constants.ABORTED)

_ONCE = frozenset(
    {
        constants.SUBMISSION_BENCHMARK,
        constants.SUBMISSION_ORG,
        constants.SUBMISSION_PLATFORM,
        constants.SUBMISSION_DIVISION,
        constants.SUBMISSION_STATUS,
        "number_of_nodes",
        "accelerators_per_node",
        constants.INIT_STOP,
        constants.RUN_START,
        constants.RUN_STOP,
        constants.TRAIN_SAMPLES,
        constants.EVAL_SAMPLES,
    }
)
_THIS_FILE = __file__


class MLPerfLog:
    """An MLPerf log file for one aihpc run; see the module docstring for the layout.

    ``path`` is created (parents too) and truncated unless ``append``.  Use as
    a context manager or call :meth:`close`.  Methods are thread-safe.
    Timestamps are milliseconds since the Unix epoch; methods that take
    ``time_ms`` default to now.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        benchmark: str = BENCHMARK,
        *,
        namespace: str = "",
        append: bool = False,
        higher_is_better: bool = True,
    ) -> None:
        if not isinstance(benchmark, str) or not benchmark:
            raise ConfigError(f"benchmark must be a non-empty string, got {benchmark!r}")
        self.path = Path(path)
        self.benchmark = benchmark
        # eval_accuracy: an accuracy in [0, 1] that never falls, or (False) a loss >= 0 that never
        # rises, as MLPerf Training logs a language model's log-perplexity under that key
        self.higher_is_better = higher_is_better
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._file: TextIO | None = open(  # closed by close()
                self.path, "a" if append else "w", encoding="utf-8"
            )
        except OSError as exc:
            raise StorageError(
                f"cannot open MLPerf log {str(self.path)!r}: {exc.strerror}"
            ) from None
        self._namespace = namespace
        self._lock = threading.RLock()
        self._holding = 0  # calls under way that flush their lines when they return
        self._seen: set[str] = set()
        self._last_epoch = 0
        self._open_epoch: int | None = None
        self._open_eval: int | None = None
        self._last_eval_epoch = 0
        self._best_accuracy: float | None = None

    # ----------------------------------------------------------------- setup
    def submission_info(
        self,
        org: str,
        platform: str,
        *,
        division: str = "open",
        status: str = "onprem",
        number_of_nodes: int = 1,
        accelerators_per_node: int = 0,
    ) -> None:
        """Log the submission keys, the benchmark name and the scale of the run.

        ``division`` is "closed" or "open"; ``status`` one of "cloud", "onprem",
        "preview", "research"; ``number_of_nodes`` >= 1 (Dask worker hosts),
        ``accelerators_per_node`` >= 0 (GPUs per node; 0 for CPU-only).
        """
        for name, text in (("org", org), ("platform", platform)):
            if not isinstance(text, str) or not text.strip():
                raise ConfigError(f"submission {name} must be a non-empty string, got {text!r}")
        if division not in DIVISIONS:
            raise ConfigError(f"division must be one of {list(DIVISIONS)}, got {division!r}")
        if status not in STATUSES:
            raise ConfigError(f"status must be one of {list(STATUSES)}, got {status!r}")
        integer("number_of_nodes", number_of_nodes, 1, error=ConfigError)
        integer("accelerators_per_node", accelerators_per_node, 0, error=ConfigError)
        with self._lock:
            self._emit("event", constants.SUBMISSION_BENCHMARK, self.benchmark)
            self._emit("event", constants.SUBMISSION_ORG, org)
            self._emit("event", constants.SUBMISSION_DIVISION, division)
            self._emit("event", constants.SUBMISSION_STATUS, status)
            self._emit("event", constants.SUBMISSION_PLATFORM, platform)
            self._emit("event", "number_of_nodes", number_of_nodes)
            self._emit("event", "accelerators_per_node", accelerators_per_node)

    def cache_clear(self, value: bool = True) -> None:
        """Log that file-system caches were cleared before the run (value: whether they were)."""
        self._emit("event", constants.CACHE_CLEAR, bool(value))

    def init_start(self, **metadata: Any) -> None:
        """Start of the master's initialisation (may be logged more than once)."""
        self._emit("start", constants.INIT_START, None, metadata)

    def init_stop(self, **metadata: Any) -> None:
        """End of initialisation; logged exactly once, before :meth:`run_start`."""
        self._emit("end", constants.INIT_STOP, None, metadata)

    def staging_start(self, **metadata: Any) -> None:
        """Start of data staging (copying the data set to the workers); optional."""
        self._emit("start", constants.STAGING_START, None, metadata)

    def staging_stop(self, staged_bytes: int | None = None, **metadata: Any) -> None:
        """End of data staging; ``staged_bytes`` (if given) goes into the metadata."""
        if staged_bytes is not None:
            integer("staged_bytes", staged_bytes, 0, error=ValueError)
            metadata["staged_bytes"] = staged_bytes
        self._emit("end", constants.STAGING_STOP, None, metadata)

    def train_samples(self, n: int) -> None:
        """Number of samples in the training set (logged once)."""
        integer("train_samples", n, 1, error=ValueError)
        self._emit("event", constants.TRAIN_SAMPLES, n)

    def eval_samples(self, n: int) -> None:
        """Number of samples in the evaluation set (logged once)."""
        integer("eval_samples", n, 1, error=ValueError)
        self._emit("event", constants.EVAL_SAMPLES, n)

    # ------------------------------------------------------------------- run
    def run_start(self, *, time_ms: int | None = None, **metadata: Any) -> None:
        """Start of the timed run (the search); exactly once."""
        self._emit("start", constants.RUN_START, None, metadata, time_ms)

    def run_stop(
        self, status: str = "success", *, time_ms: int | None = None, **metadata: Any
    ) -> None:
        """End of the timed run; ``status`` is "success" or "aborted"; exactly once."""
        if status not in RUN_STATUSES:
            raise ValueError(f"run status must be one of {list(RUN_STATUSES)}, got {status!r}")
        with self._lock:
            if constants.RUN_START not in self._seen:
                raise ValueError("run_stop before run_start")
            self._emit("end", constants.RUN_STOP, None, {"status": status, **metadata}, time_ms)

    def epoch_start(self, epoch: int, *, time_ms: int | None = None, **metadata: Any) -> None:
        """Start of master epoch ``epoch`` (> every earlier epoch; the previous one stopped)."""
        with self._lock:
            self._in_run("epoch_start")
            integer("epoch", epoch, 1, error=ValueError)
            if epoch <= self._last_epoch:
                raise ValueError(
                    f"epoch must be > {self._last_epoch} (the last epoch), got {epoch}"
                )
            if self._open_epoch is not None:
                raise ValueError(f"epoch {self._open_epoch} must be stopped before epoch {epoch}")
            self._emit("start", constants.EPOCH_START, None, _with_epoch(metadata, epoch), time_ms)
            self._open_epoch = self._last_epoch = epoch

    def epoch_stop(self, epoch: int, *, time_ms: int | None = None, **metadata: Any) -> None:
        """End of master epoch ``epoch`` (the one started last)."""
        with self._lock:
            self._in_run("epoch_stop")
            if epoch != self._open_epoch or isinstance(epoch, bool):
                raise ValueError(
                    f"epoch_stop must name the open epoch {self._open_epoch}, got {epoch!r}"
                )
            self._emit("end", constants.EPOCH_STOP, None, _with_epoch(metadata, epoch), time_ms)
            self._open_epoch = None

    def eval_start(self, epoch: int, *, time_ms: int | None = None, **metadata: Any) -> None:
        """Start of the evaluation belonging to (already started) epoch ``epoch``."""
        with self._lock:
            self._in_run("eval_start")
            self._check_eval_epoch(epoch)
            if self._open_eval is not None:
                raise ValueError(f"eval of epoch {self._open_eval} must be stopped first")
            self._emit("start", constants.EVAL_START, None, _with_epoch(metadata, epoch), time_ms)
            self._open_eval = epoch

    def eval_stop(self, epoch: int, *, time_ms: int | None = None, **metadata: Any) -> None:
        """End of the evaluation of epoch ``epoch`` (the one started last)."""
        with self._lock:
            self._in_run("eval_stop")
            if epoch != self._open_eval or isinstance(epoch, bool):
                raise ValueError(
                    f"eval_stop must name the open eval's epoch {self._open_eval}, got {epoch!r}"
                )
            self._emit("end", constants.EVAL_STOP, None, _with_epoch(metadata, epoch), time_ms)
            self._open_eval = None

    def eval_accuracy(
        self, value: float, epoch: int, *, time_ms: int | None = None, **metadata: Any
    ) -> None:
        """The best quality found so far at ``epoch``: an accuracy (a fraction in [0, 1], never
        decreasing), or with ``higher_is_better`` False a loss (>= 0, never increasing)."""
        with self._lock:
            self._in_run("eval_accuracy")
            self._check_eval_epoch(epoch)
            if epoch <= self._last_eval_epoch:
                raise ValueError(
                    f"eval_accuracy epoch must be > {self._last_eval_epoch}, got {epoch}"
                )
            value = self._quality_value(plain_json(value, "eval_accuracy"), "eval_accuracy")
            best = self._best_accuracy
            if best is not None and (value < best if self.higher_is_better else value > best):
                raise ValueError(
                    f"eval_accuracy is the best so far and must be "
                    f"{'>=' if self.higher_is_better else '<='} {best}, got {value}"
                )
            self._emit(
                "event",
                constants.EVAL_ACCURACY,
                float(value),
                _with_epoch(metadata, epoch),
                time_ms,
            )
            self._last_eval_epoch, self._best_accuracy = epoch, float(value)

    def _quality_value(self, value: Any, name: str) -> float:
        """``value`` checked: a number in [0, 1] (an accuracy) or >= 0 (a loss)."""
        number = not isinstance(value, bool) and isinstance(value, (int, float))
        if self.higher_is_better and not (number and 0.0 <= value <= 1.0):
            raise ValueError(f"{name} must be a number in [0, 1], got {value!r}")
        if not self.higher_is_better and not (number and 0.0 <= value < float("inf")):
            raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
        return float(value)

    def trial_epoch(
        self,
        epoch: int,
        accuracy: float,
        *,
        start_ms: int | None = None,
        stop_ms: int | None = None,
        **metadata: Any,
    ) -> float:
        """Log one finished trial-epoch as master epoch ``epoch``; return the best quality.

        Writes epoch_start (at ``start_ms``), epoch_stop, eval_start, eval_stop
        (at ``stop_ms``) and eval_accuracy = the better of ``accuracy`` (an
        accuracy, or a loss: ``higher_is_better``) and the best so far,
        with ``metadata`` (e.g. ``trial_id=..., trial_epoch=...``) and
        ``trial_accuracy=accuracy`` on the eval_accuracy line.
        """
        if start_ms is not None and stop_ms is not None and stop_ms < start_ms:
            raise ValueError(f"stop_ms must be >= start_ms ({start_ms}), got {stop_ms}")
        accuracy = self._quality_value(plain_json(accuracy, "accuracy"), "accuracy")
        with self._lock, self._flushed_at_end():
            best = accuracy
            if self._best_accuracy is not None:
                pick = max if self.higher_is_better else min
                best = pick(accuracy, self._best_accuracy)
            self.epoch_start(epoch, time_ms=start_ms, **metadata)
            self.epoch_stop(epoch, time_ms=stop_ms, **metadata)
            self.eval_start(epoch, time_ms=stop_ms, **metadata)
            self.eval_stop(epoch, time_ms=stop_ms, **metadata)
            self.eval_accuracy(
                best, epoch, time_ms=stop_ms, trial_accuracy=float(accuracy), **metadata
            )
        return best

    def resumed(self, last_epoch: int, best_accuracy: float | None) -> None:
        """Continue the log of a run whose master was killed (open it with ``append=True``).

        The earlier part of the file already holds the submission keys, init
        and run_start; epochs go on after ``last_epoch`` and eval_accuracy
        stays at or above ``best_accuracy``, so the file remains one run.
        """
        integer("last_epoch", last_epoch, 0, error=ValueError)
        with self._lock:
            self._seen.update(_ONCE - {constants.RUN_STOP})
            self._last_epoch = self._last_eval_epoch = last_epoch
            self._best_accuracy = best_accuracy

    @property
    def best_accuracy(self) -> float | None:
        """The last eval_accuracy logged (the best so far), or None."""
        return self._best_accuracy

    # --------------------------------------------------------------- generic
    def event(
        self,
        key: str,
        value: Any = None,
        metadata: Mapping[str, Any] | None = None,
        *,
        time_ms: int | None = None,
    ) -> None:
        """Log any point-in-time event (no rule checks beyond JSON-ability)."""
        if not isinstance(key, str) or not key:
            raise ValueError(f"event key must be a non-empty string, got {key!r}")
        self._emit("event", key, value, dict(metadata or {}), time_ms, check_once=False)

    def close(self) -> None:
        """Flush and close the file; idempotent."""
        with self._lock:
            if self._file is None:
                return
            file, self._file = self._file, None
            try:
                file.close()  # closed also where the last flush fails
            except OSError as exc:
                raise self._cannot_write(exc) from None

    @property
    def closed(self) -> bool:
        return self._file is None

    def __enter__(self) -> MLPerfLog:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Close; if an exception leaves a started run unstopped, log run_stop "aborted" first."""
        try:
            if (
                exc_type is not None
                and not self.closed
                and constants.RUN_START in self._seen
                and constants.RUN_STOP not in self._seen
            ):
                self.run_stop(constants.ABORTED, error=exc_type.__name__)
        finally:
            self.close()

    # -------------------------------------------------------------- internal
    @contextmanager
    def _flushed_at_end(self) -> Iterator[None]:
        """The lines written inside are flushed once, when the block is left (the lock held)."""
        self._holding += 1
        try:
            yield
        finally:
            self._holding -= 1
            if not self._holding:
                self._flush()

    def _flush(self) -> None:
        if self._file is None:
            return
        try:
            self._file.flush()
        except OSError as exc:
            raise self._cannot_write(exc) from None

    def _cannot_write(self, exc: OSError) -> StorageError:
        return StorageError(f"cannot write MLPerf log {str(self.path)!r}: {exc}")

    def _in_run(self, what: str) -> None:
        if constants.RUN_START not in self._seen or constants.RUN_STOP in self._seen:
            raise ValueError(f"{what} must come between run_start and run_stop")

    def _check_eval_epoch(self, epoch: int) -> None:
        integer("epoch", epoch, 1, error=ValueError)
        if epoch > self._last_epoch:
            raise ValueError(
                f"eval epoch must be <= {self._last_epoch} (the last epoch started), got {epoch}"
            )

    def _emit(
        self,
        kind: str,
        key: str,
        value: Any = None,
        metadata: Mapping[str, Any] | None = None,
        time_ms: int | None = None,
        *,
        check_once: bool = True,
    ) -> None:
        """Write one MLLOG line; ``kind`` is "start", "end" or "event"."""
        value = plain_json(value, key)
        meta = {str(k): plain_json(v, f"{key} metadata {k}") for k, v in (metadata or {}).items()}
        if time_ms is not None:
            integer("time_ms", time_ms, 0, error=ValueError)
        # the file/line of the calling code: the first frame outside this module
        frame: FrameType | None = sys._getframe(0)
        while frame is not None and frame.f_code.co_filename == _THIS_FILE:
            frame = frame.f_back
        caller = {"file": frame.f_code.co_filename, "lineno": frame.f_lineno} if frame else {}
        with self._lock:
            if self._file is None:
                raise ValueError(f"MLPerf log {str(self.path)!r} is closed")
            if check_once and key in _ONCE and key in self._seen:
                raise ValueError(f"{key} may be logged only once")
            now = time_ms if time_ms is not None else int(time.time() * 1e3)
            line = mllog_line(self._namespace, now, kind, key, value, {**caller, **meta})
            try:
                self._file.write(line)
            except OSError as exc:
                raise self._cannot_write(exc) from None
            if not self._holding:
                self._flush()
            if check_once:  # raw event() calls do not count towards the run's lifecycle
                self._seen.add(key)


# ------------------------------------------------------------------- helpers


def _with_epoch(metadata: dict[str, Any], epoch: int) -> dict[str, Any]:
    return {constants.EPOCH_NUM: epoch, **metadata}
