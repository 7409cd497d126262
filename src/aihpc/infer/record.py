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
from typing import Any

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
from aihpc.records.codec import exact
from aihpc.records.inference import InferData

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


def histogram(
    values: tuple[float, ...] | list[float], bins: int = HISTOGRAM_BINS
) -> dict[str, Any]:
    """Counts of ``values`` (seconds) in ``bins`` logarithmic bins from the least to the most."""
    positive = [v for v in values if v > 0]
    if not positive:
        return {"edges_s": [], "counts": []}
    lo, hi = min(positive), max(positive)
    hi = hi * 1.000001 if hi > lo else lo * 1.01
    edges = [lo * (hi / lo) ** (i / bins) for i in range(bins + 1)]
    counts = [0] * bins
    scale = bins / math.log(hi / lo)
    for v in positive:
        counts[min(int(math.log(v / lo) * scale), bins - 1)] += 1
    return {"edges_s": edges, "counts": counts}


def _ns(results: dict[str, Any], key: str) -> float | None:
    value = results.get(key)
    return None if value is None else float(value) / 1e9


def _point(run: ScenarioRun) -> dict[str, Any]:
    """One test as a point of the throughput-latency curve: LoadGen's figures, whether the
    system kept up (server tests), and whether the point is valid (both)."""
    r = run.loadgen.results
    scheduled = r.get("scheduled_samples_per_sec")
    return {
        "target_qps": run.loadgen.settings.target_qps,
        "scheduled_qps": None if scheduled is None else float(scheduled),
        "samples_per_second": run.loadgen.samples_per_second,
        "p99_latency_s": run.loadgen.latency(99.0),
        "p99_first_token_s": _ns(r, "first_token_99.00_percentile_latency_ns"),
        "p99_time_per_output_token_s": _ns(r, "time_per_output_token_99.00_percentile_ns"),
        "loadgen_valid": run.loadgen.valid,
        "kept_up": run.kept_up,
        "valid": run.valid,
    }


def _shown(run: ScenarioRun) -> dict[str, Any]:
    """What a scenario shows of the test its figures are of: its histograms and timing split."""
    return {
        "histogram": histogram(run.latencies),
        "first_token_histogram": histogram(run.first_token_latencies),
        "timing": run.to_dict()["timing"],
    }


def server_record(search: ServerSearch) -> dict[str, Any]:
    """The server's record: its best valid rate, the point shown (that test, else the last),
    the curve, every test; or why no rate was tried."""
    runs = search.runs
    searched = search.to_dict()
    if not runs:
        return {"max_qps": None, "search": searched, "curve": [], "tests": [], "valid": False}
    best = best_valid(runs)
    shown = best or runs[-1]
    return {
        "max_qps": None if best is None else best.loadgen.settings.target_qps,
        **_point(shown),
        "search": searched,
        "curve": sorted((_point(r) for r in runs), key=lambda p: p["target_qps"] or 0.0),
        "tests": [r.to_dict() for r in runs],
        **_shown(shown),
        "valid": best is not None,
    }


def scenario_record(
    name: str, runs: list[ScenarioRun], ops: float, peak: dict[str, Any] | None
) -> dict[str, Any]:
    """The record of the offline or single-stream scenario's test (the module docstring)."""
    (run,) = runs
    rate = run.loadgen.samples_per_second
    record = {
        **_point(run),
        "p90_latency_s": run.loadgen.latency(90.0),
        "p50_latency_s": run.loadgen.latency(50.0),
        "tests": [run.to_dict()],
        **_shown(run),
        "joules_per_query": run.joules_per_query,
    }
    if name == "offline" and rate is not None:
        record["ops_per_second"] = rate * ops
        record.update(_shares(rate * ops, peak))
    return record


def _shares(rate: float, peak: dict[str, Any] | None) -> dict[str, Any]:
    measured = (peak or {}).get("flops_per_s")
    nominal = ((peak or {}).get("nominal") or {}).get("flops_per_s")
    return {
        "peak_fraction": rate / measured if measured else None,
        "nominal_peak_fraction": rate / nominal if nominal else None,
    }


def _ms(seconds: float | None) -> str:
    return "n/a" if seconds is None else f"{1e3 * seconds:.3g} ms"


def tail_text(timing: dict[str, Any]) -> str:
    """The split of a test's slowest 1 % (:func:`aihpc.infer.latency.timing_split`)."""
    tail = timing.get("tail") or {}
    return (
        f"its slowest 1 % took {_ms(tail.get('latency_s'))}: queueing "
        f"{_ms(tail.get('queueing_s'))} + compute {_ms(tail.get('compute_s'))}"
    )


def server_reason(record: dict[str, Any]) -> str:
    """Why the server's result is invalid: no rate tried, or none valid (the lowest's why)."""
    if not record["tests"]:
        search = record["search"]
        stretch = search["min_queries"] / (search["floor_qps"] * search["seconds_per_test"])
        needed = math.ceil(search["min_queries"] / (stretch * search["top_qps"]))
        return (
            f"server: no rate tried: the {search['top_qps']:.4g} queries/s its batches of "
            f"{search['batch']} sustain is below {search['floor_qps']:.4g}/s, the least at which a "
            f"test of at most {stretch:g} x {search['seconds_per_test']:g} s reaches LoadGen's "
            f"{search['min_queries']} queries (--seconds {needed} would)"
        )
    slowest = min(record["tests"], key=lambda t: t["settings"]["target_qps"])
    results = slowest["results"]
    why = [] if results.get("validity") == "VALID" else [why_invalid(results)]
    if slowest.get("kept_up") is False:
        why.append(
            f"the system fell behind its arrivals (it completed "
            f"{float(results['completed_samples_per_sec']):.4g} of the "
            f"{float(results['scheduled_samples_per_sec']):.4g} queries/s scheduled)"
        )
    lowest = slowest["settings"]["target_qps"]
    search = record["search"]
    floor = (
        f" (the least at which LoadGen's {search['min_queries']} queries fit in a test of at "
        f"most {search['min_queries'] / search['floor_qps']:.3g} s: a longer --seconds tries "
        f"lower rates)"
        if lowest <= search["floor_qps"] * (1 + 1e-9)
        else ""
    )
    return (
        f"server: no rate searched met the bound, down to {lowest:.4g} queries/s{floor}: "
        f"{'; '.join(why)}; {tail_text(slowest['timing'])}"
    )


def _reasons(quality: QualityCheck, scenarios: dict[str, dict[str, Any]]) -> list[str]:
    reasons = [] if quality.valid else [str(quality.reason)]
    for name, record in scenarios.items():
        if not record["valid"]:
            if name == "server":
                reasons.append(server_reason(record))
            else:
                why = why_invalid(record["tests"][0]["results"])
                reasons.append(f"{name}: {why}")
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
        options: Any,
        devices: list[torch.device],
        m: Measured,
        runs: dict[str, list[ScenarioRun]],
        search: ServerSearch | None,
        peak: dict[str, Any] | None,
        duration: dict[str, Any],
    ) -> InferRecord:
        scenarios = {
            name: server_record(search)
            if name == "server" and search is not None
            else scenario_record(name, r, m.ops, peak)
            for name, r in runs.items()
        }
        reasons = _reasons(m.quality, scenarios)
        tests = [r for scenario_runs in runs.values() for r in scenario_runs]
        data = {
            "source": {
                "label": source.label,
                "task": source.task.name,
                "arch": source.arch,
                **source.details,
            },
            "device": str(devices[0]),
            "devices": [str(d) for d in devices],
            "dtype": m.dtype,
            "threads": torch.get_num_threads(),
            "samples": int(source.inputs.shape[0]),
            "generation": None
            if m.tokens is None
            else {"prompt_tokens": m.tokens[0], "new_tokens": m.tokens[1]},
            "ops_per_query": m.ops,
            "quality": m.quality.to_dict(),
            "batch_sizes": sorted(m.calibration.seconds),
            "warm_up": {str(b): t for b, t in sorted(m.calibration.warm_up.items())},
            "calibration_s": m.calibration.to_dict(),
            "bounds": m.limits.__dict__,
            "seconds_per_test": options.seconds,
            "short_test": options.seconds < MLPERF_SECONDS,
            "kept_up_shortfall": KEPT_UP_SHORTFALL,
            "duration": duration,
            "scenarios": scenarios,
            "peak": peak,
            "loadgen_version": tests[0].loadgen.version if tests else None,
            "valid": not reasons,
            "invalid_reasons": reasons,
        }
        return cls(exact(data, InferData, "the inference result"))

    def write(self, folder: Path) -> Path:
        from aihpc.records.files import result_document, write_result

        folder.mkdir(parents=True, exist_ok=True)
        document = result_document("infer", self.data)
        return write_result(folder / RECORD_FILE, document)
