"""The record of ``aihpc infer``: ``infer.json``, a result file of kind ``infer``.

Its ``data`` (:class:`InferRecord`): what was served (the run and trial, or
the zoo model; its architecture), on which device in which dtype; the
quality check against float32; the operations per query (counted); the
calibrated seconds per batch size; the server's bounds; and per scenario the
figure MLPerf reports (offline samples per second, single-stream's 90th
percentile latency, the server's highest valid rate) with LoadGen's own
``result_*`` keys of every test, the folder of its logs (``loadgen/NN-
scenario/``), the energy metered, and a histogram of the latencies this side
saw.  The server's tests are the throughput-latency curve.  ``valid`` is
false when the quality check fails or a scenario's result is invalid, with
the reasons.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from aihpc.infer.accuracy import QualityCheck
from aihpc.infer.loadgen import why_invalid
from aihpc.infer.scenarios import Bounds, Calibration, ScenarioRun, best_valid
from aihpc.infer.source import Source

RECORD_FILE = "infer.json"
HISTOGRAM_BINS = 40


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
    """One test as a point of the throughput-latency curve."""
    r = run.loadgen.results
    return {
        "target_qps": run.loadgen.settings.target_qps,
        "samples_per_second": run.loadgen.samples_per_second,
        "p99_latency_s": run.loadgen.latency(99.0),
        "p99_first_token_s": _ns(r, "first_token_99.00_percentile_latency_ns"),
        "p99_time_per_output_token_s": _ns(r, "time_per_output_token_99.00_percentile_ns"),
        "valid": run.loadgen.valid,
    }


def scenario_record(
    name: str, runs: list[ScenarioRun], ops: float, peak: dict[str, Any] | None
) -> dict[str, Any]:
    """The record of one scenario's tests (the module docstring)."""
    if name == "server":
        best = best_valid(runs)
        shown = best or runs[-1]
        return {
            "max_qps": None if best is None else best.loadgen.settings.target_qps,
            **_point(shown),
            "curve": sorted((_point(r) for r in runs), key=lambda p: p["target_qps"] or 0.0),
            "tests": [r.to_dict() for r in runs],
            "histogram": histogram(shown.latencies),
            "first_token_histogram": histogram(shown.first_token_latencies),
            "valid": best is not None,
        }
    (run,) = runs
    rate = run.loadgen.samples_per_second
    record = {
        **_point(run),
        "p90_latency_s": run.loadgen.latency(90.0),
        "p50_latency_s": run.loadgen.latency(50.0),
        "tests": [run.to_dict()],
        "histogram": histogram(run.latencies),
        "first_token_histogram": histogram(run.first_token_latencies),
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


def _reasons(quality: QualityCheck, scenarios: dict[str, dict[str, Any]]) -> list[str]:
    reasons = [] if quality.valid else [str(quality.reason)]
    for name, record in scenarios.items():
        if not record["valid"]:
            if name == "server":
                slowest = min(record["tests"], key=lambda t: t["settings"]["target_qps"])
                reasons.append(
                    f"server: no rate searched met the latency bound, down to "
                    f"{slowest['settings']['target_qps']:.3g} queries/s: "
                    f"{why_invalid(slowest['results'])}"
                )
            else:
                why = why_invalid(record["tests"][0]["results"])
                reasons.append(f"{name}: {why}")
    return reasons


@dataclass(frozen=True)
class InferRecord:
    """``infer.json``'s data (the module docstring)."""

    data: dict[str, Any]
    out_dir: str | None = None

    @property
    def valid(self) -> bool:
        return bool(self.data["valid"])

    @classmethod
    def build(
        cls,
        source: Source,
        options: Any,
        devices: list[torch.device],
        dtype: str,
        tokens: tuple[int, int] | None,
        ops: float,
        quality: QualityCheck,
        calibration: Calibration,
        limits: Bounds,
        runs: dict[str, list[ScenarioRun]],
        peak: dict[str, Any] | None,
    ) -> InferRecord:
        scenarios = {name: scenario_record(name, r, ops, peak) for name, r in runs.items()}
        reasons = _reasons(quality, scenarios)
        data = {
            "source": {
                "label": source.label,
                "task": source.task,
                "arch": source.arch,
                **source.details,
            },
            "device": str(devices[0]),
            "devices": [str(d) for d in devices],
            "dtype": dtype,
            "threads": torch.get_num_threads(),
            "samples": int(source.inputs.shape[0]),
            "generation": None
            if tokens is None
            else {"prompt_tokens": tokens[0], "new_tokens": tokens[1]},
            "ops_per_query": ops,
            "quality": quality.to_dict(),
            "calibration_s": calibration.to_dict(),
            "bounds": limits.__dict__,
            "seconds_per_test": options.seconds,
            "scenarios": scenarios,
            "peak": peak,
            "loadgen_version": next(iter(r[0].loadgen.version for r in runs.values()), None),
            "valid": not reasons,
            "invalid_reasons": reasons,
        }
        return cls(data)

    def write(self, folder: Path) -> Path:
        from aihpc.records.files import result_document, write_result

        folder.mkdir(parents=True, exist_ok=True)
        return write_result(folder / RECORD_FILE, result_document("infer", self.data))
