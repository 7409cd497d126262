"""The scenarios ``aihpc infer`` runs under LoadGen, and the batch sizes each is served in.

Every step is warmed up at its fixed batch sizes first (:func:`warm_up`,
:mod:`aihpc.infer.batches`); their timings are the :class:`Calibration`.

* **offline**: every sample in one query; served in batches of the size
  that gave the most samples per second when calibrated.
* **single-stream**: one sample per query, the next issued when the last
  completes; batch 1; the result is the 90th-percentile latency.  LoadGen
  pre-generates its queries from the expected latency it is given, and a
  system faster than that runs out of them before the minimum duration
  (INVALID): it is given a :data:`SINGLE_STREAM_MARGIN`-th of the calibrated
  latency, and a test that still ran out runs again from the latency it saw.
* **server**: Poisson arrivals at a target rate, valid while the
  ``percentile`` latency stays within the bound (a language model's: time to
  first token and time per output token) *and* the system kept up with the
  arrivals (:func:`aihpc.infer.loadgen.kept_up`: a short test's queue that
  grows throughout can still meet the bound).  A server test lasts
  ``seconds``, or longer where LoadGen needs its minimum query count, but at
  most :data:`SERVER_STRETCH` times ``seconds``: a rate below
  :func:`server_floor` (that count in that time) is never tried, so the
  search takes a bounded time.  The rate is searched here, not by
  LoadGen's FindPeakPerformance mode: a first test at half the rate a single
  stream sustains (a quarter of that, twice at most, while invalid; if none
  is valid the scenario's result is INVALID, the others' kept), then the
  rate the server's batches can sustain by their calibration (doubled while
  it stays valid), then bisection between the highest valid and the lowest
  invalid rate (``steps`` tests in all); every test is a point of the
  throughput-latency curve.  Batches grow with the load up to the largest
  size whose calibrated latency fits in a third of the bound; a batch is what
  queued while the previous one ran, never held back to fill (as Triton's
  dynamic batcher by default: waiting for a batch to fill only adds latency).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from aihpc.infer.latency import timing_split
from aihpc.infer.loadgen import LoadGenResult, Settings, kept_up, run_test
from aihpc.infer.systems import BatchingSystem, Step
from aihpc.records.codec import exact
from aihpc.records.energy import DeviceEnergyRecord
from aihpc.records.inference import WarmUpRecord
from aihpc.records.inference_scenarios import InferTest, ServerSearchRecord, loadgen_number

#: Queries of a server test: LoadGen's early stopping needs about 460 queries, none over the
#: bound, to be 99 % confident of a 99th percentile; a few over it need more.
SERVER_MIN_QUERIES = 640
#: The longest a server test may run, in multiples of ``--seconds``: a lower rate would need more
#: time than that to reach LoadGen's minimum query count, and is not tried.
SERVER_STRETCH = 4.0
#: Queries of a single-stream test (early stopping's count for a 90th percentile is about 60).
SINGLE_STREAM_MIN_QUERIES = 256
#: The single-stream test's expected latency is the calibrated one over this.
SINGLE_STREAM_MARGIN = 4.0
#: The offline test's expected rate over the calibrated one.  LoadGen sizes its one offline query
#: from the expected rate (rate x duration x 1.1 samples); a system faster than its calibration
#: serves it before the minimum duration and the test is INVALID (and runs again, see RETRIES).
#: Asking more than the calibrated rate makes the test longer by as much.
OFFLINE_HEADROOM = 1.25
#: LoadGen's offline query holds this many times the expected rate times the duration.
OFFLINE_QUERY_SHARE = 1.1
#: Offline and single-stream tests run again (at the headroom or margin times the rate reached,
#: doubling each time) when the system was through LoadGen's queries before the minimum duration,
#: this often at most: a system that shares its cores can run several times faster from one test
#: to the next.
RETRIES = 4
#: Server tests at a quarter of the last rate when even the first misses the bound.
LOWER_TRIES = 2


@dataclass(frozen=True)
class Calibration:
    """Seconds per batch by batch size, as served (:func:`warm_up`); ``warm_up``: each size's
    eager and graph timings (:meth:`aihpc.infer.batches.SizeTiming.record`)."""

    seconds: dict[int, float]
    warm_up: dict[int, WarmUpRecord] = field(default_factory=dict)

    def rate(self, batch: int) -> float:
        return batch / self.seconds[batch]

    def best_batch(self) -> int:
        return max(self.seconds, key=self.rate)

    def largest_within(self, seconds: float) -> int | None:
        fitting = [b for b, s in self.seconds.items() if s <= seconds]
        return max(fitting) if fitting else None

    def seconds_by_size(self) -> dict[str, float]:
        """The seconds per batch by size, as infer.json's ``calibration_s`` records them."""
        return {str(b): s for b, s in sorted(self.seconds.items())}

    def warm_up_by_size(self) -> dict[str, WarmUpRecord]:
        """Each size's warm-up, as infer.json's ``warm_up`` records it."""
        return {str(b): t for b, t in sorted(self.warm_up.items())}


def warm_up(steps: Sequence[Step]) -> Calibration:
    """Every step warmed up at each of its sizes (:meth:`aihpc.infer.batches.FixedBatches.
    prepare`); the first step's timings are the calibration (the others' devices are alike)."""
    timings = [step.prepare() for step in steps]
    first = timings[0]
    return Calibration(
        {size: t.seconds for size, t in first.items()},
        {size: t.record() for size, t in first.items()},
    )


@dataclass(frozen=True)
class ScenarioRun:
    """One LoadGen test and what the system saw: each sample's latency and its split into
    queueing and compute (seconds), the batches by size, and the test's wall time."""

    loadgen: LoadGenResult
    max_batch: int
    max_wait: float
    sizes: dict[int, int]
    padding: int
    latencies: tuple[float, ...]
    queueing: tuple[float, ...]
    compute: tuple[float, ...]
    first_token_latencies: tuple[float, ...]
    energy: tuple[DeviceEnergyRecord, ...] = ()
    wall_s: float = 0.0

    @property
    def batches(self) -> int:
        return sum(self.sizes.values())

    @property
    def valid(self) -> bool:
        """LoadGen's verdict, and for a server test that it kept up with its arrivals."""
        if self.loadgen.settings.scenario == "server":
            return self.loadgen.valid and self.kept_up is True
        return self.loadgen.valid

    @property
    def kept_up(self) -> bool | None:
        """Whether a server test's system kept up with its arrivals (None for other tests)."""
        return kept_up(self.loadgen.results)

    @property
    def joules_per_query(self) -> float | None:
        """Energy per sample served, where every metered device was measured."""
        joules = [d.joules for d in self.energy]
        if not joules or None in joules:
            return None
        return sum(j or 0.0 for j in joules) / max(len(self.latencies), 1)

    def record(self) -> InferTest:
        """As infer.json records a test."""
        return InferTest(
            settings=self.loadgen.settings.record(),
            results=self.loadgen.results,
            log_dir=self.loadgen.log_dir,
            max_batch=self.max_batch,
            max_wait_s=self.max_wait,
            batches=self.batches,
            batch_sizes={str(s): n for s, n in sorted(self.sizes.items())},
            padded_samples=self.padding,
            samples_served=len(self.latencies),
            timing=timing_split(self.latencies, self.queueing, self.compute),
            kept_up=self.kept_up,
            wall_s=self.wall_s,
            energy=self.energy,
            joules_per_query=self.joules_per_query,
        )


@dataclass(frozen=True)
class Bounds:
    """The server scenario's latency bounds, in seconds: ``latency`` on the ``percentile``
    latency of a sample, or ``ttft`` and ``tpot`` of a language model's answer."""

    latency: float | None
    ttft: float | None = None
    tpot: float | None = None
    percentile: float = 0.99

    @property
    def first(self) -> float:
        """The bound on a sample's first answer: its latency, or its time to first token."""
        bound = self.latency if self.latency is not None else self.ttft
        assert bound is not None
        return bound


def server_floor(seconds: float) -> float:
    """The lowest rate a server test of ``seconds`` is run at: LoadGen's minimum query count
    (:data:`SERVER_MIN_QUERIES`) in :data:`SERVER_STRETCH` times that time."""
    return SERVER_MIN_QUERIES / (SERVER_STRETCH * seconds)


def server_test_seconds(rate: float, seconds: float) -> float:
    """How long a server test at ``rate`` of at least ``seconds`` runs: until LoadGen has issued
    its minimum query count."""
    return max(seconds, SERVER_MIN_QUERIES / rate)


def server_batch(calibration: Calibration, bounds: Bounds) -> int:
    """The server's largest batch: the largest size whose calibrated seconds fit in a third of
    the bound (a sample may wait for the batch running, then run in the next), 1 at least."""
    return calibration.largest_within(bounds.first / 3) or 1


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
        start = time.perf_counter()
        start_meter(key, self.device, ["local"])
        try:
            with system:
                name = str(folder.relative_to(self.out.parent))
                result = run_test(system.issue, system.flush, self.total, settings, folder, name)
        finally:
            metered = stop_meter(key)["devices"] or []
        energy = exact(metered, tuple[DeviceEnergyRecord, ...], "the energy metered")
        if system.error is not None:
            raise system.error
        return ScenarioRun(
            result,
            max_batch,
            max_wait,
            dict(system.sizes),
            system.padding,
            tuple(system.latencies),
            tuple(system.queueing),
            tuple(system.compute),
            tuple(system.first_token_latencies),
            energy,
            time.perf_counter() - start,
        )

    def offline(self, calibration: Calibration) -> ScenarioRun:
        """The offline test at :data:`OFFLINE_HEADROOM` times the calibrated rate; one the system
        served before the minimum duration is run again at that many times the rate it reached,
        :data:`RETRIES` times at most (the last run is the scenario's result)."""
        batch = calibration.best_batch()

        def at(rate: float) -> ScenarioRun:
            return self.test(Settings("offline", self.seconds, 1, target_qps=rate), batch, 0.0)

        return _until_long_enough(at, OFFLINE_HEADROOM * calibration.rate(batch), OFFLINE_HEADROOM)

    def single_stream(self, calibration: Calibration, tokens: bool) -> ScenarioRun:
        """The single-stream test, LoadGen's expected latency a :data:`SINGLE_STREAM_MARGIN`-th
        of the calibrated one, run again as :meth:`offline` is where that was not enough."""

        def at(rate: float) -> ScenarioRun:
            settings = Settings(
                "single-stream",
                self.seconds,
                min_queries=SINGLE_STREAM_MIN_QUERIES,
                target_qps=rate,
                ttft=1e3 if tokens else None,
                tpot=1e3 if tokens else None,
            )
            return self.test(settings, 1, 0.0)

        margin = SINGLE_STREAM_MARGIN
        return _until_long_enough(at, margin * calibration.rate(1), margin)

    def server(
        self, calibration: Calibration, bounds: Bounds, offline: float, steps: int
    ) -> ServerSearch:
        """The rate search (the module docstring) from the rate the server's batches sustain
        (at most ``offline``, the offline rate), above :func:`server_floor`; every test, in the
        order run (none where even that rate is below the floor)."""
        batch = server_batch(calibration, bounds)
        floor = server_floor(self.seconds)
        top = min(offline, len(self.steps) * calibration.rate(batch))
        search = ServerSearch([], batch, top, floor, self.seconds, SERVER_MIN_QUERIES)
        if top < floor:
            return search
        search.runs = self._search(calibration, bounds, search, steps)
        return search

    def _search(
        self, calibration: Calibration, bounds: Bounds, search: ServerSearch, steps: int
    ) -> list[ScenarioRun]:
        floor, top, batch = search.floor, search.top, search.batch

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
            return self.test(settings, batch, 0.0)  # no wait to fill (the module docstring)

        low = min(max(0.5 * calibration.rate(1), floor), top)
        runs = [at(low)]
        high, bracketed = max(top, 2 * low), False
        while not runs[-1].valid:  # a quarter of the rate, twice, before giving up
            if len(runs) == 1 + LOWER_TRIES or low <= floor:
                return runs  # no rate met the bound: the scenario's result is invalid
            high, bracketed, low = low, True, max(low / 4, floor)
            runs.append(at(low))
        for _ in range(steps - len(runs)):
            rate = (low + high) / 2 if bracketed else high
            runs.append(at(rate))
            if runs[-1].valid:
                low = rate
                high = high if bracketed else 2 * rate  # valid at the top: look higher
            else:
                high, bracketed = rate, True
        return runs


@dataclass
class ServerSearch:
    """The server's tests in the order run, its batch, and the rates it searched between: from
    ``top`` (what its batches sustain by their calibration, at most the offline rate) down to
    ``floor`` (:func:`server_floor`: ``min_queries`` in a test of ``seconds``)."""

    runs: list[ScenarioRun]
    batch: int
    top: float
    floor: float
    seconds: float
    min_queries: int

    def record(self) -> ServerSearchRecord:
        """As infer.json records the server's search."""
        return ServerSearchRecord(
            batch=self.batch,
            top_qps=self.top,
            floor_qps=self.floor,
            seconds_per_test=self.seconds,
            min_queries=self.min_queries,
        )


def predicted_seconds(
    calibration: Calibration,
    scenarios: Sequence[str],
    seconds: float,
    server: tuple[int, Bounds, int],
) -> dict[str, float]:
    """The seconds each scenario's tests should take: :data:`OFFLINE_HEADROOM` times LoadGen's
    offline query at the calibrated rate; a single stream's minimum duration or query count;
    ``server`` = (steps, bounds, devices): that many server tests, the first at the search's
    first rate and the others at the rate the server's batches sustain (each
    :func:`server_test_seconds` long), none where that rate is below :func:`server_floor`.
    Their last queries' latency and LoadGen's own work aside; a test run again, or a search
    that goes below its first rate, is not foreseen."""
    steps, bounds, devices = server
    single = max(seconds, SINGLE_STREAM_MIN_QUERIES * calibration.seconds[min(calibration.seconds)])
    sustained = devices * calibration.rate(server_batch(calibration, bounds))
    floor = server_floor(seconds)
    first = min(max(0.5 * calibration.rate(1), floor), sustained)
    each = {
        "offline": OFFLINE_HEADROOM * OFFLINE_QUERY_SHARE * seconds,
        "single-stream": single,
        "server": 0.0
        if sustained < floor
        else server_test_seconds(first, seconds)
        + (steps - 1) * server_test_seconds(sustained, seconds),
    }
    return {name: each[name] for name in scenarios}


def _until_long_enough(
    at: Callable[[float], ScenarioRun], rate: float, headroom: float
) -> ScenarioRun:
    """``at(rate)``, run again while the system was through LoadGen's queries before the minimum
    duration, :data:`RETRIES` times at most: at ``headroom`` times the rate it reached, then twice
    that factor each time (a system whose speed moves between tests, as one that shares its cores
    does, still meets the duration by the last try)."""
    run = at(rate)
    for attempt in range(RETRIES):
        results = run.loadgen.results
        # samples per second offline; queries per second in a single stream
        reached = loadgen_number(results, "samples_per_second") or loadgen_number(
            results, "qps_with_loadgen_overhead"
        )
        if results.get("min_duration_met") is not False or not reached:
            break
        run = at(headroom * 2**attempt * reached)
    return run


def best_valid(runs: list[ScenarioRun]) -> ScenarioRun | None:
    """The server test with the highest rate that was valid (:attr:`ScenarioRun.valid`)."""
    valid = [r for r in runs if r.valid]
    return max(valid, key=lambda r: r.loadgen.settings.target_qps or 0.0, default=None)
