"""The record of ``aihpc infer``: ``infer.json``, a result file of kind ``infer``.

Its ``data`` (:class:`InferRecord`): what was served (the run and trial, or
the zoo model; its architecture), on which device in which dtype; the
quality check against float32; the operations per query (counted); the batch
sizes served and each one's warm-up (eager and CUDA-graph seconds, which was
kept); the calibrated seconds per batch size; the server's bounds; the
seconds each phase was predicted to take and took; and per scenario the
figure MLPerf reports (offline samples per second, single-stream's 90th
percentile latency, the server's highest valid rate) with LoadGen's own
``result_*`` keys of every test, the folder of its logs (``loadgen/NN-
scenario/``), the batches it served by size, its latencies split into
queueing and compute at the 99th percentile (:mod:`aihpc.infer.latency`),
the energy metered, and a histogram of the latencies this side saw.  The
server's tests are the throughput-latency curve; a point is valid when
LoadGen's verdict is and the system kept up with its arrivals
(:func:`aihpc.infer.loadgen.kept_up`).  A run whose tests are shorter than
MLPerf's 600 s is a *short test* (``short_test``): LoadGen's verdict on it is
not a submission's.  ``valid`` is false when the quality check fails or a
scenario's result is invalid, with the reasons.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import torch

from aihpc.infer.accuracy import QualityCheck
from aihpc.infer.loadgen import KEPT_UP_SHORTFALL, why_invalid
from aihpc.infer.scenarios import (
    Bounds,
    Calibration,
    ScenarioRun,
    ServerSearch,
    best_valid,
)
from aihpc.infer.source import Source
from aihpc.records.codec import UNSET
from aihpc.records.inference import Generation, InferBounds, InferData, InferDuration
from aihpc.records.inference_scenarios import (
    Histogram,
    ScenarioPoint,
    Scenarios,
    ServerScenario,
    ServerSearchRecord,
    StreamScenario,
    TimingSplit,
    loadgen_number,
    loadgen_seconds,
    loadgen_valid,
)
from aihpc.records.peak import PeakRecord

RECORD_FILE = "infer.json"
HISTOGRAM_BINS = 40
#: MLPerf Inference's minimum duration of a test; a shorter one is a short test.
MLPERF_SECONDS = 600.0


@dataclass(frozen=True)
class Measured:
    """What is known before LoadGen runs, and the seconds predicted for what follows."""

    dtype: str
    ops: float
    quality: QualityCheck
    calibration: Calibration
    limits: Bounds
    tokens: tuple[int, int] | None
    plan: dict[str, float]


def histogram(values: tuple[float, ...] | list[float], bins: int = HISTOGRAM_BINS) -> Histogram:
    """Counts of ``values`` (seconds) in ``bins`` logarithmic bins from the least to the most."""
    positive = [v for v in values if v > 0]
    if not positive:
        return Histogram(edges_s=(), counts=())
    lo, hi = min(positive), max(positive)
    hi = hi * 1.000001 if hi > lo else lo * 1.01
    edges = tuple(lo * (hi / lo) ** (i / bins) for i in range(bins + 1))
    counts = [0] * bins
    scale = bins / math.log(hi / lo)
    for v in positive:
        counts[min(int(math.log(v / lo) * scale), bins - 1)] += 1
    return Histogram(edges_s=edges, counts=tuple(counts))


def _point(run: ScenarioRun) -> ScenarioPoint:
    """One test as a point of the throughput-latency curve: LoadGen's figures, whether the
    system kept up (server tests), and whether the point is valid (both)."""
    r = run.loadgen.results
    return ScenarioPoint(
        target_qps=run.loadgen.settings.target_qps,
        scheduled_qps=loadgen_number(r, "scheduled_samples_per_sec"),
        samples_per_second=run.loadgen.samples_per_second,
        p99_latency_s=run.loadgen.latency(99.0),
        p99_first_token_s=loadgen_seconds(r, "first_token_99.00_percentile_latency_ns"),
        p99_time_per_output_token_s=loadgen_seconds(r, "time_per_output_token_99.00_percentile_ns"),
        loadgen_valid=run.loadgen.valid,
        kept_up=run.kept_up,
        valid=run.valid,
    )


def server_record(search: ServerSearch) -> ServerScenario:
    """The server's record: its best valid rate, the point shown (that test, else the last),
    the curve, every test; or why no rate was tried."""
    runs = search.runs
    searched = search.record()
    if not runs:
        return ServerScenario(max_qps=None, search=searched, curve=(), tests=(), valid=False)
    best = best_valid(runs)
    shown = best or runs[-1]
    point = _point(shown)
    tests = tuple(r.record() for r in runs)
    return ServerScenario(
        max_qps=None if best is None else best.loadgen.settings.target_qps,
        target_qps=point.target_qps,
        scheduled_qps=point.scheduled_qps,
        samples_per_second=point.samples_per_second,
        p99_latency_s=point.p99_latency_s,
        p99_first_token_s=point.p99_first_token_s,
        p99_time_per_output_token_s=point.p99_time_per_output_token_s,
        loadgen_valid=point.loadgen_valid,
        kept_up=point.kept_up,
        search=searched,
        curve=tuple(sorted((_point(r) for r in runs), key=lambda p: p.target_qps or 0.0)),
        tests=tests,
        histogram=histogram(shown.latencies),
        first_token_histogram=histogram(shown.first_token_latencies),
        timing=next(t for r, t in zip(runs, tests, strict=True) if r is shown).timing,
        valid=best is not None,
    )


def scenario_record(
    name: str, runs: list[ScenarioRun], ops: float, peak: PeakRecord | None
) -> StreamScenario:
    """The record of the offline or single-stream scenario's test (the module docstring)."""
    (run,) = runs
    rate = run.loadgen.samples_per_second
    point = _point(run)
    test = run.record()
    offline = name == "offline" and rate is not None
    measured = peak.flops_per_s if peak else None
    nominal = peak.nominal.flops_per_s if peak and peak.nominal else None
    ops_per_second = rate * ops if offline and rate is not None else None
    return StreamScenario(
        target_qps=point.target_qps,
        scheduled_qps=point.scheduled_qps,
        samples_per_second=point.samples_per_second,
        p99_latency_s=point.p99_latency_s,
        p99_first_token_s=point.p99_first_token_s,
        p99_time_per_output_token_s=point.p99_time_per_output_token_s,
        loadgen_valid=point.loadgen_valid,
        kept_up=point.kept_up,
        valid=point.valid,
        p90_latency_s=run.loadgen.latency(90.0),
        p50_latency_s=run.loadgen.latency(50.0),
        tests=(test,),
        histogram=histogram(run.latencies),
        first_token_histogram=histogram(run.first_token_latencies),
        timing=test.timing,
        joules_per_query=run.joules_per_query,
        ops_per_second=ops_per_second,
        peak_fraction=_share(ops_per_second, measured) if offline else UNSET,
        nominal_peak_fraction=_share(ops_per_second, nominal) if offline else UNSET,
    )


def _share(rate: float | None, peak: float | None) -> float | None:
    return rate / peak if rate is not None and peak else None


def _ms(seconds: float | None) -> str:
    return "n/a" if seconds is None else f"{1e3 * seconds:.3g} ms"


def tail_text(timing: TimingSplit | None) -> str:
    """The split of a test's slowest 1 % (:func:`aihpc.infer.latency.timing_split`)."""
    tail = timing.tail if timing is not None else None
    if tail is None:
        return "its slowest 1 % took n/a"
    return (
        f"its slowest 1 % took {_ms(tail.latency_s)}: queueing "
        f"{_ms(tail.queueing_s)} + compute {_ms(tail.compute_s)}"
    )


def _untried_reason(search: ServerSearchRecord) -> str:
    """Why the server tried no rate: the rate its batches sustain is below the floor."""
    stretch = search.min_queries / (search.floor_qps * search.seconds_per_test)
    needed = math.ceil(search.min_queries / (stretch * search.top_qps))
    return (
        f"server: no rate tried: the {search.top_qps:.4g} queries/s its batches of "
        f"{search.batch} sustain is below {search.floor_qps:.4g}/s, the least at which a "
        f"test of at most {stretch:g} x {search.seconds_per_test:g} s reaches LoadGen's "
        f"{search.min_queries} queries (--seconds {needed} would)"
    )


def server_reason(record: ServerScenario) -> str:
    """Why the server's result is invalid: no rate tried, or none valid (the lowest's why)."""
    search = record.search
    if not record.tests:
        return "server: no rate tried" if search is None else _untried_reason(search)
    slowest = min(record.tests, key=lambda t: t.settings.target_qps or 0.0)
    results = slowest.results
    why = [] if loadgen_valid(results) else [why_invalid(results)]
    if slowest.kept_up is False:
        why.append(
            f"the system fell behind its arrivals (it completed "
            f"{loadgen_number(results, 'completed_samples_per_sec') or 0.0:.4g} of the "
            f"{loadgen_number(results, 'scheduled_samples_per_sec') or 0.0:.4g} queries/s "
            f"scheduled)"
        )
    lowest = slowest.settings.target_qps or 0.0
    floor = (
        f" (the least at which LoadGen's {search.min_queries} queries fit in a test of at "
        f"most {search.min_queries / search.floor_qps:.3g} s: a longer --seconds tries "
        f"lower rates)"
        if search is not None and lowest <= search.floor_qps * (1 + 1e-9)
        else ""
    )
    return (
        f"server: no rate searched met the bound, down to {lowest:.4g} queries/s{floor}: "
        f"{'; '.join(why)}; {tail_text(slowest.timing)}"
    )


def _reasons(quality: QualityCheck, scenarios: Scenarios) -> list[str]:
    reasons = [] if quality.valid else [str(quality.reason)]
    for name, record in scenarios.items():
        if record.valid:
            continue
        if isinstance(record, ServerScenario):
            reasons.append(server_reason(record))
        else:
            reasons.append(f"{name}: {why_invalid(record.tests[0].results)}")
    return reasons


@dataclass(frozen=True)
class InferRecord:
    """``infer.json``'s data (the module docstring), as its record."""

    data: InferData
    out_dir: str | None = None

    @property
    def valid(self) -> bool:
        return self.data.valid

    @classmethod
    def build(
        cls,
        source: Source,
        seconds: float,
        devices: list[torch.device],
        m: Measured,
        runs: dict[str, list[ScenarioRun]],
        search: ServerSearch | None,
        peak: PeakRecord | None,
        duration: InferDuration,
    ) -> InferRecord:
        scenarios = _scenarios(runs, search, m.ops, peak)
        reasons = _reasons(m.quality, scenarios)
        tests = [r for scenario_runs in runs.values() for r in scenario_runs]
        limits = m.limits
        data = InferData(
            source=source.record,
            device=str(devices[0]),
            devices=tuple(str(d) for d in devices),
            dtype=m.dtype,
            threads=torch.get_num_threads(),
            samples=int(source.inputs.shape[0]),
            generation=None
            if m.tokens is None
            else Generation(prompt_tokens=m.tokens[0], new_tokens=m.tokens[1]),
            ops_per_query=m.ops,
            quality=m.quality.record(),
            batch_sizes=tuple(sorted(m.calibration.seconds)),
            warm_up=m.calibration.warm_up_by_size(),
            calibration_s=m.calibration.seconds_by_size(),
            bounds=InferBounds(
                latency=limits.latency,
                ttft=limits.ttft,
                tpot=limits.tpot,
                percentile=limits.percentile,
            ),
            seconds_per_test=seconds,
            short_test=seconds < MLPERF_SECONDS,
            kept_up_shortfall=KEPT_UP_SHORTFALL,
            duration=duration,
            scenarios=scenarios,
            peak=peak,
            loadgen_version=tests[0].loadgen.version if tests else None,
            valid=not reasons,
            invalid_reasons=tuple(reasons),
        )
        return cls(data)

    def write(self, folder: Path) -> Path:
        from aihpc.records.files import result_document, write_result

        folder.mkdir(parents=True, exist_ok=True)
        document = result_document("infer", self.data)
        return write_result(folder / RECORD_FILE, document)


def _scenarios(
    runs: dict[str, list[ScenarioRun]],
    search: ServerSearch | None,
    ops: float,
    peak: PeakRecord | None,
) -> Scenarios:
    """Each scenario's record, of the tests it ran."""

    def stream(name: str) -> StreamScenario | None:
        return scenario_record(name, runs[name], ops, peak) if name in runs else None

    server = server_record(search) if "server" in runs and search is not None else None
    single = stream("single-stream")
    return Scenarios(offline=stream("offline"), single_stream=single, server=server)
