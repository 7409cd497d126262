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

from aihpc.machine.environment import Environment
from aihpc.records.codec import Record
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


def _model(data: dict[str, Any]) -> str:
    src = data.get("source") or {}
    if src.get("zoo_model"):
        shape = src.get("input_shape")
        return str(src["zoo_model"]) + (f" {'x'.join(map(str, shape))}" if shape else "")
    arch = json.dumps(src.get("arch"), sort_keys=True, separators=(",", ":"))
    return f"{src.get('task')} trial {hashlib.sha256(arch.encode()).hexdigest()[:12]}"


def _ms(seconds: float) -> str:
    return f"{seconds:g} s" if seconds >= 1 else f"{1e3 * seconds:g} ms"


def scored_scenario(data: dict[str, Any]) -> str | None:
    """The scenario the score is of (the module docstring), with its bound."""
    scenarios = data.get("scenarios") or {}
    if "server" in scenarios:
        b = data.get("bounds") or {}
        pct = f"p{100 * (b.get('percentile') or 0.99):g}"
        if b.get("latency") is not None:
            return f"server {pct} <= {_ms(b['latency'])}"
        return f"server ttft <= {_ms(b.get('ttft') or 0)}, tpot <= {_ms(b.get('tpot') or 0)}"
    return "offline" if "offline" in scenarios else None


def workload(data: dict[str, Any]) -> str:
    g = data.get("generation")
    tokens = f", {g['prompt_tokens']}+{g['new_tokens']} tokens" if g else ""
    return f"aihpc_infer {_model(data)}{tokens}, {scored_scenario(data) or 'single-stream'}"


def score(data: dict[str, Any]) -> float | None:
    scenarios = data.get("scenarios") or {}
    if "server" in scenarios:
        qps: float | None = scenarios["server"].get("max_qps")
        return qps
    rate: float | None = (scenarios.get("offline") or {}).get("samples_per_second")
    return rate


def _quality(q: dict[str, Any]) -> dict[str, Any]:
    if q.get("measure") == "accuracy":
        return {"best_accuracy": q.get("served"), "error_percent": 100 * (1 - q["served"])}
    if q.get("measure") == "loss":
        return {"best_val_loss": q.get("served")}
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


def short_test(data: dict[str, Any]) -> bool:
    """Whether the tests were shorter than MLPerf's 600 s (records from before ``short_test``
    was written: by their seconds per test)."""
    if "short_test" in data:
        return bool(data["short_test"])
    return float(data.get("seconds_per_test") or 0.0) < MLPERF_SECONDS


def comparison_fields(doc: dict[str, Any]) -> dict[str, Any]:
    """The fields of a comparison's entry of an ``infer`` document (the module docstring)."""
    data = doc.get("data") or {}
    env = doc.get("environment") or {}
    offline = (data.get("scenarios") or {}).get("offline") or {}
    src = data.get("source") or {}
    what = "synthetic samples" if src.get("zoo_model") else "samples of the run's validation split"
    config = {
        k: data.get(k)
        for k in ("device", "dtype", "threads", "samples", "bounds", "generation", "scenarios")
    }
    config["scenarios"] = sorted(config["scenarios"] or {})
    return {
        "schema_version": doc["schema_version"],
        "aihpc_version": env.get("aihpc_version"),
        "workload": workload(data),
        "dataset": f"{data.get('samples')} {what}",
        "budget": f"{data.get('seconds_per_test')} s per test"
        + (" (short test)" if short_test(data) else ""),
        "short_test": short_test(data),
        "config": f"{data.get('device')}, {data.get('dtype')}, {data.get('threads')} "
        + ("thread" if data.get("threads") == 1 else "threads"),
        "config_key": json.dumps(config, sort_keys=True),
        "machine": Environment.from_dict(env).machine_name(),
        "score": score(data),
        "peak_fraction": offline.get("peak_fraction"),
        "nominal_peak_fraction": offline.get("nominal_peak_fraction"),
        "peak_unreliable": (offline.get("peak_fraction") or 0.0) > 1.0,
        "valid": data.get("valid"),
        **_quality(data.get("quality") or {}),
        **_energy(offline),
    }
