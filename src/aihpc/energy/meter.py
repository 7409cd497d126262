"""The energy meter: cumulative energy counters sampled by a thread, their deltas summed.

RAPL (:mod:`aihpc.energy.rapl`) and NVML (:mod:`aihpc.energy.nvml`) both
expose a *cumulative* counter, so the energy of an interval is the last
reading minus the first, whatever the sampling rate, except where the counter
went down between two readings:

* a counter with a wrap range (RAPL's ``max_energy_range_uj``) that went
  down wrapped once: the delta is ``now + range - before`` (two wraps between
  samples cannot be told from one; at RAPL's smallest ranges, 2^32 µJ = 4.3 kJ,
  a package would need 4.3 kW to wrap twice in one interval);
* a counter without a wrap range (NVML's millijoules since the driver
  loaded) that went down restarted from zero: the energy since the restart,
  ``now``, is counted and the restart is recorded in ``resets``; the energy
  between the reading before and the restart is not measured, so the joules
  of a device with ``resets > 0`` are a lower bound.

The sampler reads every counter every ``interval_s`` (0.5 s: MLPerf's power
rules ask for at least one sample a second), plus once at start and once at
stop, so the measured span is exactly start to stop.  Every ``save_every_s``
it hands its accumulators' states to ``on_save``; a sampler started with
such states (a worker's meter started again after its process was killed)
continues from them: its first reading's delta from the last saved one is
the energy used in between, which a cumulative counter holds.  All energies
are in joules, times in seconds (``time.monotonic``, one clock for every
process of a host), powers in watts.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any, Protocol

SAMPLE_INTERVAL_S = 0.5  # MLPerf power: at least 1 sample/s
SAVE_EVERY_S = 5.0  # how often a sampler hands its states to be saved


class EnergyCounter(Protocol):
    """One cumulative energy counter of one device.

    ``read()`` gives the counter's value in joules (any origin); it may be
    called from the sampler's thread only.  ``wrap_j``: the value at which
    the counter wraps to zero, or None if it does not wrap (a decrease is then
    a restart).  ``device``, ``host`` and ``source`` never change.
    """

    device: str
    host: str
    source: str
    wrap_j: float | None

    def read(self) -> float: ...


@dataclass(frozen=True)
class DeviceEnergy:
    """The energy one device used over the measured span, or why it was not measured.

    ``joules``, ``seconds`` and ``watts`` (joules / seconds) are None when
    ``reason`` says why; with them, ``reason`` says why they cover part of the
    span only (a worker lost during the run: its readings until then);
    ``samples`` is how many readings were taken,
    ``max_interval_s`` the longest gap between two of them, ``wraps`` and
    ``resets`` as in the module docstring.
    """

    device: str
    host: str
    source: str
    joules: float | None = None
    seconds: float | None = None
    watts: float | None = None
    samples: int = 0
    max_interval_s: float | None = None
    wraps: int = 0
    resets: int = 0
    reason: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> DeviceEnergy:
        values: dict[str, Any] = {k: d.get(k, default) for k, default in _DEFAULTS.items()}
        return cls(**values)

    @classmethod
    def unmeasured(cls, device: str, host: str, source: str, reason: str) -> DeviceEnergy:
        return cls(device=device, host=host, source=source, reason=reason)


_DEFAULTS = {
    "device": "?",
    "host": "?",
    "source": "?",
    "joules": None,
    "seconds": None,
    "watts": None,
    "samples": 0,
    "max_interval_s": None,
    "wraps": 0,
    "resets": 0,
    "reason": None,
}


def counter_delta(before: float, now: float, wrap_j: float | None) -> tuple[float, str | None]:
    """Joules between two readings of a cumulative counter, and ``"wrap"``/``"reset"`` if it went
    down."""
    if now >= before:
        return now - before, None
    if wrap_j is not None:
        return now + wrap_j - before, "wrap"
    return now, "reset"


class Accumulator:
    """Sums one counter's deltas, reading by reading (not thread-safe: one sampler thread feeds
    it)."""

    def __init__(self, wrap_j: float | None) -> None:
        self.wrap_j = wrap_j
        self.joules = 0.0
        self.samples = 0
        self.wraps = 0
        self.resets = 0
        self.max_interval_s = 0.0
        self._first_t: float | None = None
        self._last: tuple[float, float] | None = None

    def add(self, t: float, value_j: float) -> None:
        """One reading: ``value_j`` joules on the counter at time ``t`` seconds."""
        if self._last is None:
            self._first_t = t
        else:
            t_before, before = self._last
            delta, event = counter_delta(before, value_j, self.wrap_j)
            self.joules += delta
            self.wraps += event == "wrap"
            self.resets += event == "reset"
            self.max_interval_s = max(self.max_interval_s, t - t_before)
        self._last = (t, value_j)
        self.samples += 1

    def state(self) -> dict[str, Any]:
        """What an accumulator continues from (:meth:`resumed`): its sums and its last reading."""
        return {
            "joules": self.joules,
            "samples": self.samples,
            "wraps": self.wraps,
            "resets": self.resets,
            "max_interval_s": self.max_interval_s,
            "first_t": self._first_t,
            "last": list(self._last) if self._last is not None else None,
        }

    @classmethod
    def resumed(cls, wrap_j: float | None, state: dict[str, Any]) -> Accumulator:
        """An accumulator that goes on from ``state`` (:meth:`state` of another's)."""
        acc = cls(wrap_j)
        acc.joules, acc.samples = float(state["joules"]), int(state["samples"])
        acc.wraps, acc.resets = int(state["wraps"]), int(state["resets"])
        acc.max_interval_s = float(state["max_interval_s"])
        acc._first_t = state["first_t"]
        last = state["last"]
        acc._last = (float(last[0]), float(last[1])) if last is not None else None
        return acc

    def record(self, device: str, host: str, source: str) -> DeviceEnergy:
        """The device's energy so far; unmeasured (with the reason) with fewer than two readings."""
        if self._last is None or self._first_t is None or self.samples < 2:
            return DeviceEnergy.unmeasured(
                device, host, source, f"only {self.samples} reading(s) of the counter"
            )
        seconds = self._last[0] - self._first_t
        return DeviceEnergy(
            device=device,
            host=host,
            source=source,
            joules=self.joules,
            seconds=seconds,
            watts=self.joules / seconds if seconds > 0 else None,
            samples=self.samples,
            max_interval_s=self.max_interval_s,
            wraps=self.wraps,
            resets=self.resets,
        )


def replay(readings: list[tuple[float, float]], wrap_j: float | None) -> Accumulator:
    """An Accumulator fed ``(t, joules)`` readings in order (recorded readings, tests)."""
    acc = Accumulator(wrap_j)
    for t, value in readings:
        acc.add(t, value)
    return acc


class Sampler:
    """A daemon thread reading ``counters`` every ``interval_s`` seconds from ``start()`` to
    ``stop()``.

    A counter whose read raises stops being sampled; its record then says
    why.  ``stop()`` takes a last reading and returns one DeviceEnergy per
    counter, in the order given.  ``saved``: each counter's accumulator state
    to continue from (None: from nothing); ``on_save``: called from the
    sampler's thread with every counter's state, every ``save_every_s``.
    """

    def __init__(
        self,
        counters: list[EnergyCounter],
        interval_s: float = SAMPLE_INTERVAL_S,
        clock: Callable[[], float] = time.monotonic,
        saved: list[dict[str, Any] | None] | None = None,
        on_save: Callable[[list[dict[str, Any]]], None] | None = None,
        save_every_s: float = SAVE_EVERY_S,
    ) -> None:
        self.counters = list(counters)
        self.interval_s = interval_s
        self.clock = clock
        states = saved or [None] * len(self.counters)
        self._accs = [
            Accumulator.resumed(c.wrap_j, state) if state else Accumulator(c.wrap_j)
            for c, state in zip(self.counters, states, strict=True)
        ]
        self.on_save, self.save_every_s = on_save, save_every_s
        self._saved_at = -math.inf  # the first pass saves
        self.save_error: str | None = None  # why the last save failed, if it did
        self._failed: dict[int, str] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="aihpc-energy", daemon=True)

    def start(self) -> Sampler:
        self._sample()
        self._thread.start()
        return self

    def stop(self) -> list[DeviceEnergy]:
        self._stop.set()
        self._thread.join()
        self._sample()
        return [
            self._failed_record(i, c)
            if i in self._failed
            else self._accs[i].record(c.device, c.host, c.source)
            for i, c in enumerate(self.counters)
        ]

    def states(self) -> list[dict[str, Any]]:
        """Every counter's accumulator state (:meth:`Accumulator.state`), in the order given."""
        return [acc.state() for acc in self._accs]

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._sample()
            if self.on_save is not None and self.clock() - self._saved_at >= self.save_every_s:
                self._saved_at = self.clock()
                try:
                    self.on_save(self.states())
                # a state that cannot be saved costs only what a restart would continue from
                except Exception as exc:
                    self.save_error = f"{type(exc).__name__}: {exc}"

    def _sample(self) -> None:
        for i, counter in enumerate(self.counters):
            if i in self._failed:
                continue
            try:
                value = counter.read()
            # a counter that stops reading ends its measurement, not the run
            except Exception as exc:
                self._failed[i] = f"reading the counter failed: {type(exc).__name__}: {exc}"
                continue
            self._accs[i].add(self.clock(), value)

    def _failed_record(self, i: int, c: EnergyCounter) -> DeviceEnergy:
        return DeviceEnergy.unmeasured(c.device, c.host, c.source, self._failed[i])
