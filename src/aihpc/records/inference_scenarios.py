"""infer.json's scenarios as records: each LoadGen test, and each scenario's figures.

A test (:class:`InferTest`) is what LoadGen was asked (:class:`LoadGenSettings`), what its
detail log says (``results``: LoadGen's own ``result_*`` keys, the prefix dropped, kept whole
as its log has them, so ``aihpc verify`` can compare the two), and what the system saw: its
batches, its latencies split into queueing and compute (:class:`TimingSplit`), the energy
metered.  The offline and single-stream scenarios (:class:`StreamScenario`) show their one
test; the server's (:class:`ServerScenario`) shows its best valid test (else the last) and
the throughput-latency curve of all of them (:class:`ScenarioPoint` each), or, where no rate
could be tried, its search alone.

The fields after a class's first group are absent from files older than them (see
:mod:`aihpc.records.codec` for what a field's type says).
"""

from __future__ import annotations

import msgspec

from aihpc.records.codec import UNSET, Record, UnsetType, value_or_none
from aihpc.records.energy import DeviceEnergyRecord

#: A value of LoadGen's detail log (its ``result_*`` keys are numbers, flags and words).
LoadGenValue = bool | int | float | str | None
#: LoadGen's ``result_*`` values of one test, by key less the prefix, as its log has them.
LoadGenResults = dict[str, LoadGenValue]


def loadgen_number(results: LoadGenResults, key: str) -> float | None:
    """LoadGen's value ``key`` as a number; None where it logged none."""
    value = results.get(key)
    return None if value is None or isinstance(value, str) else float(value)


def loadgen_seconds(results: LoadGenResults, key: str) -> float | None:
    """LoadGen's value ``key``, nanoseconds, in seconds; None where it logged none."""
    value = loadgen_number(results, key)
    return None if value is None else value / 1e9


def loadgen_rate(results: LoadGenResults) -> float | None:
    """Samples per second: LoadGen's result (offline, single-stream), or the rate it saw
    completed (server, whose result is its target rate)."""
    rate = loadgen_number(results, "samples_per_second")
    return loadgen_number(results, "completed_samples_per_sec") if rate is None else rate


def loadgen_valid(results: LoadGenResults) -> bool:
    """LoadGen's verdict."""
    return results.get("validity") == "VALID"


class LoadGenSettings(Record, frozen=True):
    """What one LoadGen test was asked (:class:`aihpc.infer.loadgen.Settings`)."""

    scenario: str
    seconds: float
    min_queries: int
    target_qps: float | None
    latency: float | None
    percentile: float
    ttft: float | None
    tpot: float | None


class TailTiming(Record, frozen=True):
    """The samples at or above the 99th percentile latency, with their mean latency, queueing
    and compute (None where there were no samples)."""

    samples: int
    latency_s: float | None
    queueing_s: float | None
    compute_s: float | None


class TimingSplit(Record, frozen=True):
    """A test's latencies split into queueing and compute (:func:`aihpc.infer.latency.
    timing_split`)."""

    p99_latency_s: float | None
    p99_queueing_s: float | None
    p99_compute_s: float | None
    tail: TailTiming


class Histogram(Record, frozen=True):
    """Counts of latencies in logarithmic bins, ``edges_s`` one more than ``counts``."""

    edges_s: tuple[float, ...]
    counts: tuple[int, ...]


class InferTest(Record, frozen=True):
    """One LoadGen test (the module docstring); ``log_dir``: the folder of its logs, relative to
    the result's folder."""

    settings: LoadGenSettings
    results: LoadGenResults
    log_dir: str
    max_batch: int
    max_wait_s: float
    batches: int
    samples_served: int
    energy: tuple[DeviceEnergyRecord, ...]
    joules_per_query: float | None
    batch_sizes: dict[str, int] | None = None
    padded_samples: int | None = None
    timing: TimingSplit | None = None
    kept_up: bool | None | UnsetType = UNSET
    wall_s: float | None = None


class ScenarioPoint(Record, frozen=True):
    """One test as a point of the throughput-latency curve: LoadGen's figures, whether the
    system kept up (server tests; None for others), and whether the point is valid (both)."""

    target_qps: float | None
    samples_per_second: float | None
    p99_latency_s: float | None
    p99_first_token_s: float | None
    p99_time_per_output_token_s: float | None
    valid: bool
    scheduled_qps: float | None | UnsetType = UNSET
    loadgen_valid: bool | UnsetType = UNSET
    kept_up: bool | None | UnsetType = UNSET


class StreamScenario(ScenarioPoint, frozen=True, kw_only=True):
    """The offline or single-stream scenario: the point of its one test, its latency
    percentiles, histograms (a language model's first tokens too) and energy per query; the
    offline scenario's operations per second and their share of the measured and nominal
    peaks (None where there is no peak)."""

    p50_latency_s: float | None
    p90_latency_s: float | None
    joules_per_query: float | None
    tests: tuple[InferTest, ...]
    histogram: Histogram
    first_token_histogram: Histogram
    timing: TimingSplit | None = None
    ops_per_second: float | None = None
    peak_fraction: float | None | UnsetType = UNSET
    nominal_peak_fraction: float | None | UnsetType = UNSET


class ServerSearchRecord(Record, frozen=True):
    """The server's rate search (:class:`aihpc.infer.scenarios.ServerSearch`)."""

    batch: int
    top_qps: float
    floor_qps: float
    seconds_per_test: float
    min_queries: int


class ServerScenario(Record, frozen=True):
    """The server scenario: its highest valid rate, the curve and every test; the point,
    histograms and timing of the test it shows (its best valid one, else the last), absent
    where no rate was tried."""

    max_qps: float | None
    curve: tuple[ScenarioPoint, ...]
    tests: tuple[InferTest, ...]
    valid: bool
    search: ServerSearchRecord | None = None
    target_qps: float | None | UnsetType = UNSET
    samples_per_second: float | None | UnsetType = UNSET
    p99_latency_s: float | None | UnsetType = UNSET
    p99_first_token_s: float | None | UnsetType = UNSET
    p99_time_per_output_token_s: float | None | UnsetType = UNSET
    scheduled_qps: float | None | UnsetType = UNSET
    loadgen_valid: bool | UnsetType = UNSET
    kept_up: bool | None | UnsetType = UNSET
    histogram: Histogram | None = None
    first_token_histogram: Histogram | None = None
    timing: TimingSplit | None = None

    def point(self) -> ScenarioPoint | None:
        """The point of the test it shows; None where no rate was tried."""
        if isinstance(self.target_qps, UnsetType):
            return None
        return ScenarioPoint(
            target_qps=self.target_qps,
            samples_per_second=value_or_none(self.samples_per_second),
            p99_latency_s=value_or_none(self.p99_latency_s),
            p99_first_token_s=value_or_none(self.p99_first_token_s),
            p99_time_per_output_token_s=value_or_none(self.p99_time_per_output_token_s),
            valid=self.valid,
            scheduled_qps=self.scheduled_qps,
            loadgen_valid=self.loadgen_valid,
            kept_up=self.kept_up,
        )


Scenario = StreamScenario | ServerScenario


class Scenarios(Record, frozen=True):
    """Each scenario that ran, by its name."""

    offline: StreamScenario | None = None
    single_stream: StreamScenario | None = msgspec.field(default=None, name="single-stream")
    server: ServerScenario | None = None

    def items(self) -> list[tuple[str, Scenario]]:
        """(name, record) of each scenario that ran: offline, single-stream, server."""
        named: list[tuple[str, Scenario | None]] = [
            ("offline", self.offline),
            ("single-stream", self.single_stream),
            ("server", self.server),
        ]
        return [(name, s) for name, s in named if s is not None]

    def names(self) -> list[str]:
        return [name for name, _ in self.items()]
