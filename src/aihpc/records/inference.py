"""An inference result (``infer.json``, kind ``infer``): its record, and what ``aihpc compare``
and ``rank`` see of it.

:class:`InferData` is the document's ``data`` (:class:`aihpc.infer.record.InferRecord`
builds it), a record all the way down: what was served (:class:`InferSource`) on which
devices, the quality check, the operations per query, each batch size's warm-up and
calibration, the server's bounds, the peak, the time predicted and taken
(:class:`InferDuration`), and per scenario the figures LoadGen measured and its tests
(:class:`aihpc.records.inference_scenarios.Scenarios`).

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
from aihpc.records.inference_scenarios import Scenarios, StreamScenario
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


class InferSource(Record, frozen=True):
    """What was served (:class:`aihpc.infer.source.Source`): its label, task, architecture
    (the task's own value; None for a zoo model) and parameters; a run's trial (the run's
    folder, the trial and its best value of the run's quality, ``best_val_accuracy`` or
    ``best_val_loss``), or a zoo model (its name, input shape and the seed of its weights and
    inputs)."""

    label: str
    task: str
    arch: dict[str, Any] | None
    num_params: int
    run: str | None = None
    trial: int | None = None
    best_val_accuracy: float | None = None
    best_val_loss: float | None = None
    zoo_model: str | None = None
    input_shape: tuple[int, ...] | None = None
    seed: int | None = None

    def model(self) -> str:
        """The model served, for a comparison's workload: a zoo model by name and input shape;
        a run's trial by its task and a hash of its architecture."""
        if self.zoo_model:
            shape = self.input_shape
            return self.zoo_model + (f" {'x'.join(map(str, shape))}" if shape else "")
        arch = json.dumps(self.arch, sort_keys=True, separators=(",", ":"))
        return f"{self.task} trial {hashlib.sha256(arch.encode()).hexdigest()[:12]}"


class WarmUpRecord(Record, frozen=True):
    """One batch size warmed up (:class:`aihpc.infer.batches.SizeTiming`): its seconds eager
    and as a CUDA graph (None where none was captured, ``why_eager`` saying why), and how it
    was served (``eager`` or ``cuda-graph``)."""

    eager_s: float
    graph_s: float | None
    served_as: str
    why_eager: str | None


class InferDuration(Record, frozen=True):
    """The seconds predicted for each scenario and the peak, and taken (by those and by the
    phases before them: ``quality``, ``warm_up``); what followed the warm-up, predicted and
    taken; the whole command."""

    predicted_s: dict[str, float]
    actual_s: dict[str, float]
    after_warm_up_predicted_s: float
    after_warm_up_actual_s: float
    total_s: float


class InferData(Record, frozen=True):
    """infer.json's ``data`` (the module docstring); the fields after ``invalid_reasons`` are
    absent from files older than them.  ``calibration_s`` and ``warm_up`` are by batch size."""

    source: InferSource
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
    scenarios: Scenarios
    peak: PeakRecord | None
    loadgen_version: str | None
    valid: bool
    invalid_reasons: tuple[str, ...]
    batch_sizes: tuple[int, ...] | None = None
    warm_up: dict[str, WarmUpRecord] | None = None
    short_test: bool | None = None
    kept_up_shortfall: float | None = None
    duration: InferDuration | None = None


def _ms(seconds: float) -> str:
    return f"{seconds:g} s" if seconds >= 1 else f"{1e3 * seconds:g} ms"


def scored_scenario(data: InferData) -> str | None:
    """The scenario the score is of (the module docstring), with its bound."""
    if data.scenarios.server is not None:
        b = data.bounds
        pct = f"p{100 * b.percentile:g}"
        if b.latency is not None:
            return f"server {pct} <= {_ms(b.latency)}"
        return f"server ttft <= {_ms(b.ttft or 0)}, tpot <= {_ms(b.tpot or 0)}"
    return "offline" if data.scenarios.offline is not None else None


def workload(data: InferData) -> str:
    g = data.generation
    tokens = f", {g.prompt_tokens}+{g.new_tokens} tokens" if g else ""
    return f"aihpc_infer {data.source.model()}{tokens}, {scored_scenario(data) or 'single-stream'}"


def score(data: InferData) -> float | None:
    if data.scenarios.server is not None:
        return data.scenarios.server.max_qps
    offline = data.scenarios.offline
    return None if offline is None else offline.samples_per_second


def _quality(q: InferQuality) -> dict[str, Any]:
    if q.measure == "accuracy" and q.served is not None:
        return {"best_accuracy": q.served, "error_percent": 100 * (1 - q.served)}
    if q.measure == "loss":
        return {"best_val_loss": q.served}
    return {}


def _energy(offline: StreamScenario | None) -> dict[str, Any]:
    """Joules and watts of the offline test, all devices; why not where one was not metered."""
    tests = offline.tests if offline is not None else ()
    devices = tests[0].energy if tests else ()
    missing = [d for d in devices if d.joules is None]
    if not devices or missing:
        why = "; ".join(str(d.reason) for d in missing) or "no offline test metered"
        return {"energy_note": f"offline test: {why}"}
    watts = sum(d.watts or 0.0 for d in devices)
    ops = offline.ops_per_second if offline is not None else None
    return {
        "joules": sum(d.joules or 0.0 for d in devices),
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
    offline = data.scenarios.offline
    what = "synthetic samples" if data.source.zoo_model else "samples of the run's validation split"
    peak_fraction = value_or_none(offline.peak_fraction) if offline else None
    config = {
        "device": data.device,
        "dtype": data.dtype,
        "threads": data.threads,
        "samples": data.samples,
        "bounds": data.bounds.to_dict(),
        "generation": data.generation.to_dict() if data.generation else None,
        "scenarios": sorted(data.scenarios.names()),
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
        "peak_fraction": peak_fraction,
        "nominal_peak_fraction": value_or_none(offline.nominal_peak_fraction) if offline else None,
        "peak_unreliable": (peak_fraction or 0.0) > 1.0,
        "valid": data.valid,
        **_quality(data.quality),
        **_energy(offline),
    }
