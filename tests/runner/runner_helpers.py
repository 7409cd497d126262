"""A deterministic in-process stand-in for the Dask executor, for master tests.

It runs each task to completion inside ``submit`` (the real trainer, the real
data), so the master sees every result on its next ``wait``, in submission
order; nothing runs concurrently and nothing depends on a second process.
The master's clock is a :class:`StepClock` that each task advances by a fixed
step, so how many tasks fit before the deadline does not depend on how fast
the machine is.  (Workers still read the real clock: the master's deadline,
far in the fake future, never cuts a task short.)
"""

from __future__ import annotations

import time
from concurrent.futures import Future
from typing import Any


class StepClock:
    def __init__(self, step: float) -> None:
        self.now = time.time()
        self.step = step

    def __call__(self) -> float:
        return self.now


class InProcessExecutor:
    def __init__(self, clock: StepClock, slots: int = 2) -> None:
        self.clock = clock
        self._slots = slots
        self.keys: list[str] = []

    def slots(self) -> int:
        return self._slots

    def submit(self, fn, task: Any, key: str) -> Future:
        self.keys.append(key)
        self.clock.now += self.clock.step
        future: Future = Future()
        try:
            future.set_result(fn(task))
        except Exception as exc:  # as Dask does: the exception surfaces in result()
            future.set_exception(exc)
        return future

    def wait(self, futures, timeout: float) -> set[Future]:
        return {f for f in futures if f.done()}


class NullObserver:
    def update(self, status) -> None: ...
    def report(self, status) -> None: ...
    def event(self, text: str) -> None: ...
    def epoch(self, number: int, result, best) -> None: ...
