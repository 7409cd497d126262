"""Fan the master's progress out to what watches it: the console and the MLPerf log."""

from __future__ import annotations

from pathlib import Path
from typing import Any


class Observers:
    """The master calls these; each is cheap and never raises for a healthy run."""

    def __init__(self, console, mlperf) -> None:
        self.console = console
        self.mlperf = mlperf

    def update(self, status: dict[str, Any]) -> None:
        self.console.update(status)

    def report(self, status: dict[str, Any]) -> None:
        self.console.report(status)

    def event(self, text: str) -> None:
        self.console.event(text)

    def epoch(self, number: int, result, best: float | None) -> None:
        """A trial-epoch finished with an evaluation: master epoch ``number`` in the MLPerf log."""
        log_epoch(self.mlperf, number, result)

    def screening(self, record: dict[str, Any]) -> None:
        """A proxy screening was recorded: one ``aihpc_screening`` event in the MLPerf log (and a
        console line
        if it failed)."""
        log_screening(self.mlperf, record)
        if record["status"] != "ok":
            self.console.event(
                f"screening {record['id']} failed ({record['reason']}); its first candidate "
                "is trained unscreened"
            )


def log_epoch(mlperf, number: int, result) -> None:
    """Master epoch ``number`` in the MLPerf log: a finished epoch (an EpochResult, or the store's
    EpochRow of one)."""
    mlperf.trial_epoch(
        number,
        result.metrics["val_accuracy"],
        start_ms=int(result.t_start * 1000),
        stop_ms=int(result.t_end * 1000),
        trial_id=result.trial_id,
        trial_epoch=result.epoch,
        worker=result.worker,
    )


def log_screening(mlperf, record: dict[str, Any]) -> None:
    """A proxy screening's ``aihpc_screening`` event in the MLPerf log."""
    from aihpc.runner.screening import event

    key, value, metadata = event(record)
    mlperf.event(key, value, metadata)


def resume_log(mlperf, store, path: Path) -> None:
    """Continue the MLPerf log of a run whose master was killed.

    The master logs an epoch (and a screening) just after committing it to
    the store, so one committed in the moment before the kill can be missing
    from the log.  Those are logged now, in the order they finished, after
    the ones the log holds; the new epochs follow them, so the log again
    holds every finished epoch once.
    """
    from aihpc.records.mlperf_check import read_events
    from aihpc.runner.screening import MLPERF_KEY

    events, _ = read_events(path)
    logged = {
        ((e.get("metadata") or {}).get("trial_id"), (e.get("metadata") or {}).get("trial_epoch"))
        for e in events
        if e.get("key") == "eval_accuracy"
    }
    screened = {
        (e.get("metadata") or {}).get("screening_id") for e in events if e.get("key") == MLPERF_KEY
    }
    done = [e for e in store.epochs() if e.status == "ok"]
    have = [e for e in done if (e.trial_id, e.epoch) in logged]
    best = max((e.metrics["val_accuracy"] for e in have), default=None)
    mlperf.resumed(last_epoch=len(have), best_accuracy=best)
    missing = [e for e in done if (e.trial_id, e.epoch) not in logged]
    for number, epoch in enumerate(missing, start=len(have) + 1):
        log_epoch(mlperf, number, epoch)
    for record in store.screenings():
        if record["id"] not in screened:
            log_screening(mlperf, record)
