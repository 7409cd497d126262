"""An inference result (``infer.json``, kind ``infer``): its record, and what ``aihpc compare``
and ``rank`` see of it.

:class:`InferData` is the document's ``data`` (:class:`aihpc.infer.record.InferRecord`
builds it): what was served on which devices, the quality check, the operations per query,
the calibration, the server's bounds, the peak, and per scenario the figures LoadGen
measured (``scenarios``: each scenario's figures and its tests, as LoadGen gave them).

:func:`comparison_fields` reduces the document to the fields of a comparison's entry
(:class:`aihpc.ranking.compare.Entry`, less its source and kind):

* **workload**, the like-for-like key (results of different workloads are never compared
  or ranked together): ``aihpc_infer``, the model (a zoo model by name and input shape; a
  run's trial by its task and a hash of its architecture), a language model's prompt and
  answer lengths, and the scenario the score is of with its bound
  (``server p99 <= 15 ms``, ``server ttft <= 2 s, tpot <= 100 ms``, or ``offline``);
* **score**: the server's ``max_qps``, the highest rate (queries per second; one sample
  each) that met the bound, where the server scenario ran (None where no rate met it);
  else the offline samples per second; None for a single stream alone (its figure is a
  latency);
* the quality served (an accuracy as its error, a loss as the loss; a zoo model's
  agreement has no column), the offline rate's share of the peak, validity, and the
  energy of the offline test;
* **short_test**: its tests were shorter than MLPerf's 600 s (LoadGen's verdict on them is
  not a submission's), so ``aihpc rank`` lists it apart from full ones.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from aihpc.records.codec import Record, value_or_none
from aihpc.records.environment import EnvironmentRecord
from aihpc.records.peak import PeakRecord

INFER_FILE = "infer.json"  # aihpc.infer.record.RECORD_FILE (that module imports torch)
MLPERF_SECONDS = 600.0  # aihpc.infer.record.MLPERF_SECONDS: MLPerf's minimum test duration


class InferBounds(Record, frozen=True):
    """The server scenario's latency bounds in seconds (:class:`aihpc.infer.scenarios.Bounds`)."""

    latency: float | None
    ttft: float | None
    tpot: float | None
    percentile: float


class Generation(Record, frozen=True):
    """A language model's queries: prompt and answer lengths in tokens."""

    prompt_tokens: int
    new_tokens: int


class InferQuality(Record, frozen=True):
    """The quality served against float32's (:class:`aihpc.infer.accuracy.QualityCheck`):
    ``measure`` accuracy, loss, or a zoo model's agreement."""

    measure: str
    served: float | None
    reference: float | None
    kept: float | None
    dtype: str
    samples: int
    valid: bool
    reason: str | None


class InferData(Record, frozen=True):
    """infer.json's ``data`` (the module docstring); the fields after ``invalid_reasons`` are
    absent from files older than them."""

    source: dict[str, Any]  # label, task, arch, and the run and trial or the zoo model
    device: str
    devices: tuple[str, ...]
    dtype: str
    threads: int
    samples: int
    generation: Generation | None
    ops_per_query: float
    quality: InferQuality
    calibration_s: dict[str, float]
    bounds: InferBounds
    seconds_per_test: float
    scenarios: dict[str, dict[str, Any]]
    peak: PeakRecord | None
    loadgen_version: str | None
    valid: bool
    invalid_reasons: tuple[str, ...]
    batch_sizes: tuple[int, ...] | None = None
    warm_up: dict[str, Any] | None = None
    short_test: bool | None = None
    kept_up_shortfall: float | None = None
    duration: dict[str, Any] | None = None


def _model(data: InferData) -> str:
    src = data.source
    if src.get("zoo_model"):
        shape = src.get("input_shape")
        return str(src["zoo_model"]) + (f" {'x'.join(map(str, shape))}" if shape else "")
    arch = json.dumps(src.get("arch"), sort_keys=True, separators=(",", ":"))
    return f"{src.get('task')} trial {hashlib.sha256(arch.encode()).hexdigest()[:12]}"


def _ms(seconds: float) -> str:
    return f"{seconds:g} s" if seconds >= 1 else f"{1e3 * seconds:g} ms"


def scored_scenario(data: InferData) -> str | None:
    """The scenario the score is of (the module docstring), with its bound."""
    if "server" in data.scenarios:
        b = data.bounds
        pct = f"p{100 * b.percentile:g}"
        if b.latency is not None:
            return f"server {pct} <= {_ms(b.latency)}"
        return f"server ttft <= {_ms(b.ttft or 0)}, tpot <= {_ms(b.tpot or 0)}"
    return "offline" if "offline" in data.scenarios else None


def workload(data: InferData) -> str:
    g = data.generation
    tokens = f", {g.prompt_tokens}+{g.new_tokens} tokens" if g else ""
    return f"aihpc_infer {_model(data)}{tokens}, {scored_scenario(data) or 'single-stream'}"


def score(data: InferData) -> float | None:
    if "server" in data.scenarios:
        qps: float | None = data.scenarios["server"].get("max_qps")
        return qps
    rate: float | None = data.scenarios.get("offline", {}).get("samples_per_second")
    return rate


def _quality(q: InferQuality) -> dict[str, Any]:
    if q.measure == "accuracy" and q.served is not None:
        return {"best_accuracy": q.served, "error_percent": 100 * (1 - q.served)}
    if q.measure == "loss":
        return {"best_val_loss": q.served}
    return {}


def _energy(offline: dict[str, Any]) -> dict[str, Any]:
    """Joules and watts of the offline test, all devices; why not where one was not metered."""
    tests = offline.get("tests") or []
    devices = (tests[0].get("energy") or []) if tests else []
    missing = [d for d in devices if d.get("joules") is None]
    if not devices or missing:
        why = "; ".join(str(d.get("reason")) for d in missing) or "no offline test metered"
        return {"energy_note": f"offline test: {why}"}
    watts = sum(d.get("watts") or 0.0 for d in devices)
    ops = offline.get("ops_per_second")
    return {
        "joules": sum(d["joules"] for d in devices),
        "watts": watts,
        "gops_per_watt": ops / watts / 1e9 if ops and watts else None,
        "energy_note": None,
    }


def short_test(data: InferData) -> bool:
    """Whether the tests were shorter than MLPerf's 600 s (records from before ``short_test``
    was written: by their seconds per test)."""
    if data.short_test is not None:
        return data.short_test
    return data.seconds_per_test < MLPERF_SECONDS


def comparison_fields(
    data: InferData, environment: EnvironmentRecord, schema_version: int
) -> dict[str, Any]:
    """The fields of a comparison's entry of an ``infer`` document: its ``data``, the
    ``environment`` it was made in and its ``schema_version`` (the module docstring)."""
    offline = data.scenarios.get("offline", {})
    what = (
        "synthetic samples"
        if data.source.get("zoo_model")
        else "samples of the run's validation split"
    )
    config = {
        "device": data.device,
        "dtype": data.dtype,
        "threads": data.threads,
        "samples": data.samples,
        "bounds": data.bounds.to_dict(),
        "generation": data.generation.to_dict() if data.generation else None,
        "scenarios": sorted(data.scenarios),
    }
    return {
        "schema_version": schema_version,
        "aihpc_version": value_or_none(environment.aihpc_version),
        "workload": workload(data),
        "dataset": f"{data.samples} {what}",
        "budget": f"{data.seconds_per_test} s per test"
        + (" (short test)" if short_test(data) else ""),
        "short_test": short_test(data),
        "config": f"{data.device}, {data.dtype}, {data.threads} "
        + ("thread" if data.threads == 1 else "threads"),
        "config_key": json.dumps(config, sort_keys=True),
        "machine": environment.machine_name(),
        "score": score(data),
        "peak_fraction": offline.get("peak_fraction"),
        "nominal_peak_fraction": offline.get("nominal_peak_fraction"),
        "peak_unreliable": (offline.get("peak_fraction") or 0.0) > 1.0,
        "valid": data.valid,
        **_quality(data.quality),
        **_energy(offline),
    }
