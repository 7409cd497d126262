"""What a person sees while a run goes: a live view in a terminal, plain lines elsewhere.

In a terminal, a rich live panel shows the score, trials running and done,
the best quality (accuracy, or loss) and the time left, refreshed every second.  Anywhere else
(a SLURM log file, a pipe) one plain line is printed per progress report
(every ``report_seconds``), so logs stay readable.
"""

from __future__ import annotations

import sys
from types import TracebackType
from typing import TYPE_CHECKING, Any, TextIO

from aihpc.base.fmt import format_si

if TYPE_CHECKING:  # for the types only: rich is imported when the live view starts
    from rich.live import Live
    from rich.panel import Panel

    from aihpc.records.messages import EpochResult


def progress_line(s: dict[str, Any]) -> str:
    return (
        f"[{s['t']:7.1f}s] score {format_si(s['ops_per_second'], 'OPS')}  ops "
        f"{format_si(s['ops'])}  best {s['best_text']}  "
        f"trials done {s['trials_done']} running {s['running']}  left {s['time_left']:.0f}s"
    )


class Console:
    """Observer of a run: receives progress, events and reports from the master."""

    def __init__(self, live: bool | None = None, stream: TextIO | None = None) -> None:
        self.stream = stream or sys.stdout
        self.live_mode = self.stream.isatty() if live is None else live
        self._live: Live | None = None  # while the console is entered in live mode

    def __enter__(self) -> Console:
        if self.live_mode:
            from rich.console import Console as RichConsole
            from rich.live import Live

            live = Live(console=RichConsole(file=self.stream), refresh_per_second=2, transient=True)
            live.__enter__()
            self._live = live
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._live is not None:
            self._live.__exit__(kind, exc, tb)
            self._live = None

    def print(self, text: str) -> None:
        if self._live is not None:
            self._live.console.print(text, markup=False, highlight=False)
        else:
            print(text, file=self.stream, flush=True)

    def update(self, status: dict[str, Any]) -> None:
        if self._live is not None:
            self._live.update(_panel(status))

    def report(self, status: dict[str, Any]) -> None:
        self.print(progress_line(status))

    def event(self, text: str) -> None:
        """Something went wrong with a trial (an epoch requeued, a trial failed or diverged);
        shown above the live view, and left out of plain logs, whose lines stay one per report."""
        if self._live is not None:
            self.print(text)

    def epoch(self, number: int, result: EpochResult, best: float | None) -> None:
        pass


def _panel(s: dict[str, Any]) -> Panel:
    from rich.panel import Panel
    from rich.table import Table

    table = Table.grid(padding=(0, 2))
    rows = [
        ("score", format_si(s["ops_per_second"], "OPS")),
        ("operations", format_si(s["ops"])),
        ("best", s["best_text"]),
        ("trials", f"{s['trials_done']} done, {s['running']} running"),
        ("elapsed", f"{s['t']:.0f} s"),
        ("time left", f"{s['time_left']:.0f} s"),
    ]
    for k, v in rows:
        table.add_row(k, v)
    return Panel(table, title="aihpc run", expand=False)
