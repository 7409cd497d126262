"""The scenarios ``aihpc infer`` runs under LoadGen, and the batch sizes each is served in.

* **offline**: every sample in one query; served in batches of the size
  that gave the most samples per second when calibrated (:func:`calibrate`).
* **single-stream**: one sample per query, the next issued when the last
  completes; batch 1; the result is the 90th-percentile latency.
* **server**: Poisson arrivals at a target rate, valid while the
  ``percentile`` latency stays within the bound (a language model's: time to
  first token and time per output token).  The rate is searched here, not by
  LoadGen's FindPeakPerformance mode: a first test at half the rate a
  single stream sustains (a quarter of that, twice at most, while invalid;
  if none is valid the scenario's result is INVALID, the others' kept),
  then the offline rate (doubled while it stays valid), then bisection
  between the highest valid and the lowest invalid rate (``steps`` tests in
  all); every test is a point of the throughput-latency curve.  Batches grow
  with the load up to the largest size whose calibrated latency fits in a
  third of the bound; a batch is what queued while the previous one ran, never held back
  to fill (as Triton's dynamic batcher by default: on this CPU a 1.5-ms
  model's batch of 2 took twice as long as 1, so waiting only added latency,
  3.75 ms of it put the 99th percentile over a 15-ms bound at 300 queries/s).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aihpc.infer.loadgen import LoadGenResult, Settings, run_test
from aihpc.infer.systems import BatchingSystem, Step

BATCHES = (1, 2, 4, 8, 16, 32, 64, 128, 256)
#: Queries of a server test: LoadGen's early stopping needs about 460 queries, none over the
#: bound, to be 99 % confident of a 99th percentile; a few over it need more.
SERVER_MIN_QUERIES = 640
#: Queries of a single-stream test (early stopping's count for a 90th percentile is about 60).
SINGLE_STREAM_MIN_QUERIES = 256
#: The offline test's expected rate over the calibrated one.  LoadGen sizes its one offline query
#: from the expected rate (rate x duration x 1.1 samples); a system faster than its calibration
#: (made while something else ran) serves it before the minimum duration and the test is
#: INVALID.  Asking twice the calibrated rate costs at most twice the duration.
OFFLINE_HEADROOM = 2.0
#: Offline tests run again, at the headroom times the rate reached, when the system served the
#: query before the minimum duration (faster still than twice its calibration).
OFFLINE_RETRIES = 2
#: Server tests at a quarter of the last rate when even the first misses the bound.
LOWER_TRIES = 2


@dataclass(frozen=True)
class Calibration:
    """Seconds per batch by batch size (the median of a few timed batches after one warm-up)."""

    seconds: dict[int, float]

    def rate(self, batch: int) -> float:
        return batch / self.seconds[batch]

    def best_batch(self) -> int:
        return max(self.seconds, key=self.rate)

    def largest_within(self, seconds: float) -> int | None:
        fitting = [b for b, s in self.seconds.items() if s <= seconds]
        return max(fitting) if fitting else None

    def to_dict(self) -> dict[str, Any]:
        return {str(b): s for b, s in sorted(self.seconds.items())}


def calibrate(step: Step, samples: int, max_batch: int, repeats: int = 3) -> Calibration:
    """Time ``step`` at each batch size up to ``max_batch`` (and ``samples``)."""
    import statistics

    seconds: dict[int, float] = {}
    for batch in (b for b in BATCHES if b <= min(max_batch, samples)):
        indices = list(range(batch))
        step(indices, lambda _: None)  # warm-up: the first pass of a shape
        times = []
        for _ in range(repeats):
            t = time.perf_counter()
            step(indices, lambda _: None)
            times.append(time.perf_counter() - t)
        seconds[batch] = statistics.median(times)
    return Calibration(seconds)


@dataclass(frozen=True)
class ScenarioRun:
    """One LoadGen test and what the system saw: its latencies (seconds) and batches."""

    loadgen: LoadGenResult
    max_batch: int
    max_wait: float
    batches: int
    latencies: tuple[float, ...]
    first_token_latencies: tuple[float, ...]
    energy: tuple[dict[str, Any], ...] = ()

    @property
    def joules_per_query(self) -> float | None:
        """Energy per sample served, where every metered device was measured."""
        if not self.energy or any(d.get("joules") is None for d in self.energy):
            return None
        return sum(d["joules"] for d in self.energy) / max(len(self.latencies), 1)

    def to_dict(self) -> dict[str, Any]:
        return {
            **self.loadgen.to_dict(),
            "max_batch": self.max_batch,
            "max_wait_s": self.max_wait,
            "batches": self.batches,
            "samples_served": len(self.latencies),
            "energy": list(self.energy),
            "joules_per_query": self.joules_per_query,
        }


@dataclass(frozen=True)
class Bounds:
    """The server scenario's latency bounds, in seconds: ``latency`` on the ``percentile``
    latency of a sample, or ``ttft`` and ``tpot`` of a language model's answer."""

    latency: float | None
    ttft: float | None = None
    tpot: float | None = None
    percentile: float = 0.99


@dataclass
class ScenarioBench:
    """Runs LoadGen tests of one :class:`Step` on ``total`` samples; their logs under ``out``."""

    steps: Sequence[Step]  # one per device; the first is calibrated
    total: int
    out: Path
    seconds: float
    on_test: Callable[[str], None] = lambda _: None
    device: str = "cpu"
    tests: int = 0

    def test(self, settings: Settings, max_batch: int, max_wait: float) -> ScenarioRun:
        from aihpc.energy.worker import start_meter, stop_meter

        self.tests += 1
        rate = f" at {settings.target_qps:.4g}/s" if settings.scenario == "server" else ""
        self.on_test(f"  LoadGen test {self.tests}: {settings.scenario}{rate}")
        system = BatchingSystem(self.steps, max_batch, max_wait)
        folder = self.out / f"{self.tests:02d}-{settings.scenario}"
        key = f"aihpc-infer-{uuid.uuid4().hex}"
        start_meter(key, self.device, ["local"])
        try:
            with system:
                name = str(folder.relative_to(self.out.parent))
                result = run_test(system.issue, system.flush, self.total, settings, folder, name)
        finally:
            energy = tuple(stop_meter(key)["devices"] or ())
        if system.error is not None:
            raise system.error
        return ScenarioRun(
            result,
            max_batch,
            max_wait,
            system.batches,
            tuple(system.latencies),
            tuple(system.first_token_latencies),
            energy,
        )

    def offline(self, calibration: Calibration) -> ScenarioRun:
        """The offline test at :data:`OFFLINE_HEADROOM` times the calibrated rate; one the system
        served before the minimum duration is run again at that many times the rate it reached,
        :data:`OFFLINE_RETRIES` times at most (the last run is the scenario's result)."""
        batch = calibration.best_batch()
        rate = OFFLINE_HEADROOM * calibration.rate(batch)
        for _ in range(OFFLINE_RETRIES):
            run = self.test(Settings("offline", self.seconds, 1, target_qps=rate), batch, 0.0)
            reached = run.loadgen.samples_per_second
            if run.loadgen.results.get("min_duration_met") is not False or not reached:
                return run
            rate = OFFLINE_HEADROOM * reached
        return self.test(Settings("offline", self.seconds, 1, target_qps=rate), batch, 0.0)

    def single_stream(self, calibration: Calibration, tokens: bool) -> ScenarioRun:
        rate = calibration.rate(1)
        settings = Settings(
            "single-stream",
            self.seconds,
            min_queries=SINGLE_STREAM_MIN_QUERIES,
            target_qps=rate,
            ttft=1e3 if tokens else None,
            tpot=1e3 if tokens else None,
        )
        return self.test(settings, 1, 0.0)

    def server(
        self, calibration: Calibration, bounds: Bounds, top: float, steps: int
    ) -> list[ScenarioRun]:
        """The rate search (the module docstring); every test, in the order run."""
        budget = bounds.latency if bounds.latency is not None else bounds.ttft
        assert budget is not None
        batch = calibration.largest_within(budget / 3) or 1
        wait = 0.0  # a batch is what queued while the last one ran (the module docstring)

        def at(rate: float) -> ScenarioRun:
            settings = Settings(
                "server",
                self.seconds,
                min_queries=SERVER_MIN_QUERIES,
                target_qps=rate,
                latency=bounds.latency,
                percentile=bounds.percentile,
                ttft=bounds.ttft,
                tpot=bounds.tpot,
            )
            return self.test(settings, batch, wait)

        low = 0.5 * calibration.rate(1)
        runs = [at(low)]
        high, bracketed = max(top, 2 * low), False
        while not runs[-1].loadgen.valid:  # a quarter of the rate, twice, before giving up
            if len(runs) == 1 + LOWER_TRIES:
                return runs  # no rate met the bound: the scenario's result is invalid
            high, bracketed, low = low, True, low / 4
            runs.append(at(low))
        for _ in range(steps - len(runs)):
            rate = (low + high) / 2 if bracketed else high
            runs.append(at(rate))
            if runs[-1].loadgen.valid:
                low = rate
                high = high if bracketed else 2 * rate  # valid at the top: look higher
            else:
                high, bracketed = rate, True
        return runs


def best_valid(runs: list[ScenarioRun]) -> ScenarioRun | None:
    """The server test with the highest rate that was valid."""
    valid = [r for r in runs if r.loadgen.valid]
    return max(valid, key=lambda r: r.loadgen.settings.target_qps or 0.0, default=None)
