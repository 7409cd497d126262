"""One test under MLPerf Inference's LoadGen (``mlcommons-loadgen``), its logs read back.

:func:`run_test` hands LoadGen a system under test (two callbacks: issue
queries, flush) and a query sample library of ``total`` samples, runs one
scenario in performance mode, and reads the result from LoadGen's own
detail log (``mlperf_log_detail.txt``, one ``:::MLLOG`` JSON line per key),
which stays in ``outdir`` beside the summary (``mlperf_log_summary.txt``):
the ``result_*`` keys (samples per second, latency percentiles in ns,
validity and why not) are kept as LoadGen wrote them, so ``aihpc verify``
can compare the record with the log.  The trace file is not written (it
holds one event per sample and is not needed to check the result).

LoadGen's minimum duration is 600 s and its minimum query counts are in the
thousands, for submissions; aihpc sets its own (``seconds``,
``min_queries``), recorded with the result, so a result here says the same
as a submission's only when those match.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aihpc.base.errors import ConfigError
from aihpc.records.codec import convert
from aihpc.records.inference_scenarios import (
    LoadGenResults,
    LoadGenSettings,
    loadgen_number,
    loadgen_rate,
    loadgen_seconds,
    loadgen_valid,
)

#: aihpc's scenario names -> LoadGen's TestScenario members.
SCENARIOS = {"offline": "Offline", "server": "Server", "single-stream": "SingleStream"}
DETAIL_LOG = "mlperf_log_detail.txt"
SUMMARY_LOG = "mlperf_log_summary.txt"


def loadgen() -> Any:
    """The ``mlperf_loadgen`` module; ConfigError (one line) if it is not installed."""
    try:
        import mlperf_loadgen
    except ImportError:
        import sys

        raise ConfigError(
            "aihpc infer needs MLPerf LoadGen, which is not installed in "
            f"{sys.executable}: pip install mlcommons-loadgen"
        ) from None
    return mlperf_loadgen


def check_scenario(name: str) -> str:
    """``name`` if LoadGen runs it here; ConfigError naming the known ones otherwise."""
    if name not in SCENARIOS:
        raise ConfigError(
            f"scenario {name!r} is not one aihpc runs under LoadGen: {', '.join(SCENARIOS)}"
        )
    return name


@dataclass(frozen=True)
class Settings:
    """What one LoadGen test is asked for (times in seconds).

    ``target_qps``: the server's arrival rate, or the offline expected rate
    (LoadGen sizes its one offline query from it); ``latency``: the server's
    bound on the ``percentile`` latency; ``ttft``/``tpot``: a language
    model's bounds on the time to first token and per output token (LoadGen's
    token latencies), which replace ``latency`` when given.
    """

    scenario: str
    seconds: float
    min_queries: int
    target_qps: float | None = None
    latency: float | None = None
    percentile: float = 0.99
    ttft: float | None = None
    tpot: float | None = None

    def record(self) -> LoadGenSettings:
        """As infer.json records a test's settings."""
        return LoadGenSettings(
            scenario=self.scenario,
            seconds=self.seconds,
            min_queries=self.min_queries,
            target_qps=self.target_qps,
            latency=self.latency,
            percentile=self.percentile,
            ttft=self.ttft,
            tpot=self.tpot,
        )


def test_settings(settings: Settings) -> Any:
    """LoadGen's TestSettings for ``settings``, in performance-only mode."""
    lg = loadgen()
    s = lg.TestSettings()
    s.scenario = getattr(lg.TestScenario, SCENARIOS[settings.scenario])
    s.mode = lg.TestMode.PerformanceOnly
    s.min_duration_ms = int(settings.seconds * 1000)
    s.min_query_count = settings.min_queries
    if settings.scenario == "offline" and settings.target_qps:
        s.offline_expected_qps = settings.target_qps
    if settings.scenario == "server":
        s.server_target_qps = settings.target_qps
        s.server_target_latency_percentile = settings.percentile
        if settings.latency is not None:
            s.server_target_latency_ns = int(settings.latency * 1e9)
    if settings.scenario == "single-stream":
        s.single_stream_target_latency_percentile = 0.90
        if settings.target_qps:
            s.single_stream_expected_latency_ns = int(1e9 / settings.target_qps)
    if settings.ttft is not None and settings.tpot is not None:
        s.use_token_latencies = True
        s.ttft_latency = int(settings.ttft * 1e9)
        s.tpot_latency = int(settings.tpot * 1e9)
    return s


@dataclass(frozen=True)
class LoadGenResult:
    """What LoadGen's detail log says of one test: its ``result_*`` keys (prefix dropped) and
    the folder holding its logs."""

    settings: Settings
    results: LoadGenResults
    log_dir: str  # relative to the result's folder: loadgen/NN-scenario
    version: str | None = None

    @property
    def valid(self) -> bool:
        return loadgen_valid(self.results)

    @property
    def samples_per_second(self) -> float | None:
        """Samples per second (:func:`aihpc.records.inference_scenarios.loadgen_rate`)."""
        return loadgen_rate(self.results)

    def latency(self, percentile: float) -> float | None:
        """The ``percentile`` (e.g. 99.0) latency in seconds, where LoadGen reported it."""
        return loadgen_seconds(self.results, f"{percentile:.2f}_percentile_latency_ns")


def run_test(
    issue: Callable[[list[Any]], None],
    flush: Callable[[], None],
    total: int,
    settings: Settings,
    outdir: Path,
    name: str,
) -> LoadGenResult:
    """One LoadGen test of ``settings`` on ``total`` samples; its logs in ``outdir``, recorded as
    ``name``."""
    lg = loadgen()
    outdir.mkdir(parents=True, exist_ok=True)
    log = lg.LogSettings()
    log.log_output.outdir = str(outdir)
    log.log_output.copy_summary_to_stdout = False
    log.enable_trace = False
    sut = lg.ConstructSUT(issue, flush)
    qsl = lg.ConstructQSL(total, total, lambda _: None, lambda _: None)
    try:
        lg.StartTestWithLogSettings(sut, qsl, test_settings(settings), log)
    finally:
        lg.DestroyQSL(qsl)
        lg.DestroySUT(sut)
    detail = read_detail(outdir / DETAIL_LOG)
    version = detail.get("loadgen_version")
    results = results_of(detail)
    return LoadGenResult(settings, results, name, None if version is None else str(version))


def read_detail(path: Path) -> dict[str, Any]:
    """Every key of a LoadGen detail log with its (last) value."""
    values: dict[str, Any] = {}
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            if line.startswith(":::MLLOG "):
                try:
                    entry = json.loads(line[len(":::MLLOG ") :])
                except ValueError:
                    continue
                values[entry.get("key")] = entry.get("value")
    return values


def read_results(path: Path) -> LoadGenResults:
    """The ``result_*`` keys of a detail log, the prefix dropped, and ``early_stopping_met``;
    DataError (one line) where one is not a number, a flag or a word."""
    return results_of(read_detail(path), str(path))


def results_of(detail: dict[str, Any], where: str = "LoadGen's detail log") -> LoadGenResults:
    """:func:`read_results` of a detail log already read."""
    results = {k[len("result_") :]: v for k, v in detail.items() if k.startswith("result_")}
    if "early_stopping_met" in detail:
        results["early_stopping_met"] = detail["early_stopping_met"]
    typed: LoadGenResults = convert(results, LoadGenResults, where)
    return typed


#: The shortfall of a server test's completed rate against its scheduled rate (the Poisson
#: arrivals LoadGen drew, not its target) that still counts as keeping up (see :func:`kept_up`).
KEPT_UP_SHORTFALL = 0.02


def kept_up(results: LoadGenResults) -> bool | None:
    """Whether a server test's system kept up with its arrivals, from LoadGen's ``result_*``
    values: it completed at least (1 - :data:`KEPT_UP_SHORTFALL`) of the rate scheduled; None
    where they lack either rate (not a server test).

    LoadGen's completed rate counts up to the last completion, so a system that keeps up falls
    short of the scheduled rate only by its last samples' latency over the test's duration; one
    whose queue grows, by the share of the arrivals it could not serve.  A short test cannot
    tell a queue growing slower than that from its last samples' latency (over MLPerf's 600 s
    such a queue misses any bound of seconds, and LoadGen's verdict tells)."""
    scheduled = loadgen_number(results, "scheduled_samples_per_sec")
    completed = loadgen_number(results, "completed_samples_per_sec")
    if scheduled is None or completed is None:
        return None
    return completed >= (1 - KEPT_UP_SHORTFALL) * scheduled


#: LoadGen's conditions of a valid result, as its detail log names them.
CONDITIONS = {
    "perf_constraints_met": "the latency bound was not met",
    "min_duration_met": "the minimum duration was not reached",
    "min_queries_met": "too few queries",
    "early_stopping_met": "too few queries for early stopping's confidence in the percentile",
}


def why_invalid(results: LoadGenResults) -> str:
    """Why LoadGen called a result invalid, from its conditions (its own reason first)."""
    reasons = [text for key, text in CONDITIONS.items() if results.get(key) is False]
    if results.get("invalid_reason"):
        reasons.insert(0, str(results["invalid_reason"]))
    return "; ".join(reasons) or "LoadGen: INVALID"
