"""The local cluster's worker processes, which share the run's stderr."""

from __future__ import annotations

import logging
import os

from aihpc.launch.executor import local_executor, local_layout


def _worker_log_level() -> int:
    return logging.getLogger("distributed.worker").getEffectiveLevel()


def test_a_worker_logs_only_what_is_critical_on_the_run_s_stderr() -> None:
    """A worker's ERROR log (a heartbeat to a scheduler that closed first: a traceback) would break
    the run's one-line errors; the nanny's silence_logs does not reach the worker's logger."""
    environ = dict(os.environ)  # Dask's nanny sets OMP_NUM_THREADS=1 & co. in this very process
    executor = local_executor(local_layout(1, 1, "cpu"))
    try:
        levels = executor.client.run(_worker_log_level)
    finally:
        executor.close()
        os.environ.clear()
        os.environ.update(environ)
    assert list(levels.values()) == [logging.CRITICAL]
