"""Phase timing of a trial-epoch without stalling the device.

A phase is timed by a pair of *events* recorded at its edges, and the pairs
are read only when the epoch asks for its totals.  On a GPU the events are
``torch.cuda.Event(enable_timing=True)``: recording one only enqueues a
timestamp on the stream, so the host keeps launching work, and the one
``synchronize`` at the end of the epoch is the only wait.  The time between
a phase's two events is stream time: the kernels the phase launched, plus
any gap in which the device sat idle waiting for the host during the phase
(model building, compilation), so the phases still add up to the epoch.

On the CPU every operation finishes before the call returns, so the host
clock read at the edges is exact: :class:`ClockEvent` does that behind the
same interface, and one :class:`PhaseTimer` serves both.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from typing import Any, Protocol

import torch

#: The phases of an epoch, in the order results list them.  ``compile`` is
#: the first pass through a freshly compiled model (compilation included); it
#: is time without counted operations beyond the samples of that one step.
PHASES = ("data", "forward", "backward", "optimizer", "eval", "compile", "other")


class Event(Protocol):
    """What a timer needs of an event: ``torch.cuda.Event``'s interface."""

    def record(self) -> None: ...

    def synchronize(self) -> None: ...

    def elapsed_time(self, end: Any, /) -> float:  # milliseconds from self to end (an Event)
        ...


class ClockEvent:
    """An event that reads the host clock when recorded (exact where operations are synchronous)."""

    __slots__ = ("t",)

    def __init__(self) -> None:
        self.t: float | None = None

    def record(self) -> None:
        self.t = time.perf_counter()

    def synchronize(self) -> None:
        if self.t is None:
            raise RuntimeError("event synchronized before it was recorded")

    def elapsed_time(self, end: ClockEvent) -> float:
        if self.t is None or end.t is None:
            raise RuntimeError("elapsed_time of an event that was not recorded")
        return (end.t - self.t) * 1e3


class PhaseTimer:
    """Seconds spent in each of :data:`PHASES`; ``with timer("forward"): ...`` adds to one.

    ``new_event`` makes one event (e.g. ``ClockEvent`` or a CUDA event
    factory).  Events are kept until :meth:`seconds` reads them all, waiting
    once for the last one recorded; nothing inside a phase ever waits.
    """

    def __init__(self, new_event: Callable[[], Event] = ClockEvent) -> None:
        self._new_event = new_event
        self._pending: list[tuple[str, Event, Event]] = []
        self._seconds = dict.fromkeys(PHASES, 0.0)

    @contextlib.contextmanager
    def __call__(self, phase: str) -> Iterator[None]:
        if phase not in self._seconds:
            raise ValueError(f"unknown phase {phase!r}; phases are {', '.join(PHASES)}")
        start = self._new_event()
        start.record()
        try:
            yield
        finally:
            end = self._new_event()
            end.record()
            self._pending.append((phase, start, end))

    @property
    def pending(self) -> int:
        """Phase intervals recorded and not yet read."""
        return len(self._pending)

    def seconds(self) -> dict[str, float]:
        """Total seconds per phase so far (reads the pending events: one wait, for the last)."""
        if self._pending:
            self._pending[-1][2].synchronize()
            for phase, start, end in self._pending:
                self._seconds[phase] += start.elapsed_time(end) / 1e3
            self._pending.clear()
        return dict(self._seconds)


def timer_for(device: torch.device) -> PhaseTimer:
    """CUDA events on a GPU (timestamps on the current stream), the host clock elsewhere."""
    if device.type == "cuda":
        # torch leaves cuda.Event's constructor unannotated
        return PhaseTimer(lambda: torch.cuda.Event(enable_timing=True))  # type: ignore[no-untyped-call]
    return PhaseTimer(ClockEvent)
