"""What the master tells whoever watches the run: the observer's interface, as a Protocol.

:class:`aihpc.runner.display.observer.Observers` (the console and the MLPerf
log) is the observer of ``aihpc run``; tests and the scale rehearsal pass
stand-ins that record or ignore what they are told.  Each call is cheap and
never raises for a healthy run.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from aihpc.records.messages import EpochResult
    from aihpc.records.rows import ScreeningRow


class Observer(Protocol):
    """The master's progress, events and results as they happen."""

    def update(self, status: dict[str, Any]) -> None:
        """The master's status (:meth:`~aihpc.runner.search.master.Master.status`), every tick."""
        ...

    def report(self, status: dict[str, Any]) -> None:
        """The same status, every ``report_seconds`` (a line of the progress log)."""
        ...

    def event(self, text: str) -> None:
        """Something went wrong with a trial or a helper process, in one line."""
        ...

    def epoch(self, number: int, result: EpochResult, best: float | None) -> None:
        """A trial-epoch finished with an evaluation: master epoch ``number``; the run's best
        quality so far."""
        ...

    def screening(self, record: ScreeningRow) -> None:
        """A proxy screening was recorded."""
        ...
