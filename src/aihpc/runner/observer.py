"""Fan the master's progress out to what watches it: the console and the MLPerf log."""

from __future__ import annotations

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
        self.mlperf.trial_epoch(
            number,
            result.metrics["val_accuracy"],
            start_ms=int(result.t_start * 1000),
            stop_ms=int(result.t_end * 1000),
            trial_id=result.trial_id,
            trial_epoch=result.epoch,
            worker=result.worker,
        )

    def screening(self, record: dict[str, Any]) -> None:
        """A proxy screening was recorded: one ``aihpc_screening`` event in the MLPerf log (and a
        console line
        if it failed)."""
        from aihpc.runner.screening import event

        key, value, metadata = event(record)
        self.mlperf.event(key, value, metadata)
        if record["status"] != "ok":
            self.console.event(
                f"screening {record['id']} failed ({record['reason']}); its first candidate "
                "is trained unscreened"
            )
