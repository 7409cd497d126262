"""The phase timer: events recorded at phase edges, read once, on the host clock or CUDA's."""

from __future__ import annotations

import time

import pytest
import torch

from aihpc.train.timing import PHASES, ClockEvent, PhaseTimer, timer_for


class ManualClock:
    """A clock the test moves itself; its events have ``torch.cuda.Event``'s interface."""

    def __init__(self) -> None:
        self.now = 0.0
        self.waits = 0

    def event(self) -> ClockEvent:
        clock = self

        class Event(ClockEvent):
            def record(self) -> None:
                self.t = clock.now

            def synchronize(self) -> None:
                clock.waits += 1

        return Event()


def test_phases_add_up_by_hand_and_are_read_with_one_wait():
    clock = ManualClock()
    timer = PhaseTimer(clock.event)
    for _step in range(3):  # three steps: data 0.5 s, forward 1.25 s, then 0.75 s outside any phase
        with timer("data"):
            clock.now += 0.5
        with timer("forward"):
            clock.now += 1.25
        clock.now += 0.75
    assert (
        timer.pending == 6 and clock.waits == 0
    )  # nothing read, nothing waited for, inside the loop
    seconds = timer.seconds()
    assert clock.waits == 1 and timer.pending == 0
    assert seconds["data"] == pytest.approx(1.5) and seconds["forward"] == pytest.approx(3.75)
    assert set(seconds) == set(PHASES) and sum(seconds.values()) == pytest.approx(5.25)
    with timer("eval"):  # later phases add to the totals already read
        clock.now += 2.0
    again = timer.seconds()
    assert (
        again["eval"] == pytest.approx(2.0)
        and again["data"] == pytest.approx(1.5)
        and clock.waits == 2
    )
    assert timer.seconds() == again and clock.waits == 2  # nothing pending: no wait


def test_a_phase_that_raises_is_still_timed():
    clock = ManualClock()
    timer = PhaseTimer(clock.event)
    with pytest.raises(RuntimeError), timer("backward"):
        clock.now += 0.25
        raise RuntimeError("in the phase")
    assert timer.seconds()["backward"] == pytest.approx(0.25)


def test_unknown_phase_is_refused():
    with pytest.raises(ValueError, match="unknown phase 'loss'"), PhaseTimer()("loss"):
        pass


def test_the_host_clock_times_real_work_on_the_cpu():
    timer = timer_for(torch.device("cpu"))
    t0 = time.perf_counter()
    with timer("forward"):
        time.sleep(0.05)
    with timer("forward"):
        time.sleep(0.05)
    wall = time.perf_counter() - t0
    forward = timer.seconds()["forward"]
    assert 0.1 <= forward <= wall


def test_clock_events_refuse_to_be_read_before_recorded():
    start, end = ClockEvent(), ClockEvent()
    with pytest.raises(RuntimeError):
        start.elapsed_time(end)
    start.record()
    end.record()
    assert start.elapsed_time(end) >= 0.0
