"""Fan the master's progress out to what watches it: the console and the MLPerf log."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from aihpc.records.messages import EpochResult, EpochStatus, ScreenStatus
from aihpc.records.rows import EpochRow, ScreeningRow
from aihpc.records.store import RunStore
from aihpc.scoring.quality import Quality

if TYPE_CHECKING:  # for the types only: mlperf_logging is imported when a run opens its log
    from aihpc.mlperf.log import MLPerfLog
    from aihpc.runner.display.console import Console


class Observers:
    """The master calls these; each is cheap and never raises for a healthy run.

    The master's :class:`~aihpc.runner.search.observer.Observer`.
    """

    def __init__(self, console: Console, mlperf: MLPerfLog, quality: Quality) -> None:
        self.console = console
        self.mlperf = mlperf
        self.quality = quality  # how the run judges models: its metric, and how it prints

    def update(self, status: dict[str, Any]) -> None:
        self.console.update(self._shown(status))

    def report(self, status: dict[str, Any]) -> None:
        self.console.report(self._shown(status))

    def _shown(self, status: dict[str, Any]) -> dict[str, Any]:
        """The master's status with its best quality as text (``best_text``) for the console."""
        return {**status, "best_text": self.quality.text(status.get(self.quality.best_key))}

    def event(self, text: str) -> None:
        self.console.event(text)

    def epoch(self, number: int, result: EpochResult, best: float | None) -> None:
        """A trial-epoch finished with an evaluation: master epoch ``number`` in the MLPerf log."""
        log_epoch(self.mlperf, number, result, self.quality.metric)

    def screening(self, record: ScreeningRow) -> None:
        """A proxy screening was recorded: one ``aihpc_screening`` event in the MLPerf log (and a
        console line
        if it failed)."""
        log_screening(self.mlperf, record)
        if record.status != ScreenStatus.OK:
            self.console.event(
                f"screening {record.id} failed ({record.reason}); its first candidate "
                "is trained unscreened"
            )


def log_epoch(mlperf: MLPerfLog, number: int, result: EpochResult | EpochRow, metric: str) -> None:
    """Master epoch ``number`` in the MLPerf log: a finished epoch (an EpochResult, or the store's
    EpochRow of one), its validation ``metric`` as the quality."""
    mlperf.trial_epoch(
        number,
        result.metrics[metric],
        start_ms=int(result.t_start * 1000),
        stop_ms=int(result.t_end * 1000),
        trial_id=result.trial_id,
        trial_epoch=result.epoch,
        worker=result.worker,
    )


def log_screening(mlperf: MLPerfLog, record: ScreeningRow) -> None:
    """A proxy screening's ``aihpc_screening`` event in the MLPerf log."""
    from aihpc.runner.search.screening import event

    key, value, metadata = event(record)
    mlperf.event(key, value, metadata)


def resume_log(mlperf: MLPerfLog, store: RunStore, path: Path, metric: str) -> None:
    """Continue the MLPerf log of a run whose master was killed.

    The master logs an epoch (and a screening) just after committing it to
    the store, so one committed in the moment before the kill can be missing
    from the log.  Those are logged now, in the order they finished, after
    the ones the log holds; the new epochs follow them, so the log again
    holds every finished epoch once.
    """
    from aihpc.mlperf.check import iter_events
    from aihpc.runner.search.screening import MLPERF_KEY

    logged: set[tuple[object, object]] = set()  # (trial_id, trial_epoch) in the log's metadata
    screened: set[object] = set()
    for _, e in iter_events(path):  # a line at a time: the log of a long run is large
        if e is None:
            continue
        meta = e.get("metadata") or {}
        if e.get("key") == "eval_accuracy":
            logged.add((meta.get("trial_id"), meta.get("trial_epoch")))
        elif e.get("key") == MLPERF_KEY:
            screened.add(meta.get("screening_id"))
    have, best, missing = 0, None, []
    pick = max if mlperf.higher_is_better else min
    for row in store.iter_epochs():
        if row.status != EpochStatus.OK:
            continue
        if (row.trial_id, row.epoch) in logged:
            have += 1
            value = row.metrics[metric]
            best = value if best is None else pick(best, value)
        else:
            missing.append(row)
    mlperf.resumed(last_epoch=have, best_accuracy=best)
    for number, epoch in enumerate(missing, start=have + 1):
        log_epoch(mlperf, number, epoch, metric)
    for record in store.screenings():
        if record.id not in screened:
            log_screening(mlperf, record)
