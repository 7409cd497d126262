"""results.json: the versioned, self-describing record of one run.

``RESULTS_SCHEMA_VERSION`` changes whenever a field changes meaning or disappears;
old files are kept as test fixtures (tests/report/fixtures).  Keys are
sorted when written.  All ``t_*`` and ``t`` values are seconds since the
run's start; operations are counted analytically (see aihpc.counting).
``integrity`` (added in aihpc 0.1, no version change: a new field) holds the
head of the run store's digest chain when the file was written.
``energy`` (no version change: a new field; absent in older files, null
where the run did not meter) is the run's measured energy, per device and in
total, with operations per joule (see aihpc.energy.run).
``devices``
(a new field, no version change) maps each worker to its host and devices;
``peak.per_worker[*].parts`` holds the peaks of a worker's processes.
``losses`` (a new field, no version change; absent in older files) lists
the epochs lost with their workers (:class:`aihpc.records.rows.LostEpoch`),
``t`` relative to the run's start.

``worker_memory`` (a new field, no version change; absent in older files) holds
each worker's memory limit, its node's memory and what it held before its
first trial, with the rule that sized the limits (:mod:`aihpc.launch.memory`);
a loss's ``reason`` says where the worker's nanny killed it for memory, its
memory against its limit.

``helper_restarts`` (a new field, no version change; absent in older files)
lists the hyperparameter search processes that died and were started again
(:class:`aihpc.nas.helper_restart.HelperRestart`), ``t`` relative to the run's
start.

``compilation`` (a new field, no version change; absent where nothing
compiled) counts what the trials' compiled models needed and what the
workers' caches already held (:func:`compilation`).

A trial's ``lineage_start`` (seconds of the run's clock at which its
lineage's root started: its learning-rate schedule's start),
``lineage_epochs`` (the epochs its ancestors trained before its first) and
``hparams_origin`` (``tpe``, ``default``, or ``inherited from trial N``) are
new fields, no version change (absent for runs from before them); so are the
score's ``seed_only_best``, ``seed_only_trial`` and ``search_gain``
(:func:`seed_only`), and its ``not_repeatable`` (:func:`not_repeatable`: why
the score and its share of peak would not repeat, the peak having moved during
the run; null where they would).

Version 3 writes a child's architecture as ``arch_diff``, the edits of its
parent's (:mod:`aihpc.records.archdiff`), instead of ``arch`` in full (which
only trials without a parent keep), and lays the file out one line per
top-level field and per trial, without indentation: 2 to 3 times smaller.
"""

from __future__ import annotations

import gzip
import json
import shutil
from collections import defaultdict
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from aihpc import __version__
from aihpc.base.fileio import atomic_open
from aihpc.records.energy import energy_results
from aihpc.records.messages import EpochStatus
from aihpc.records.rows import SUCCEEDED, EpochRow, ScreeningRow, TrialRow, TrialStatus
from aihpc.results.read import COMPRESSED_RESULTS_FILE, RESULTS_FILE
from aihpc.scoring.peak import current_run_peak
from aihpc.scoring.quality import Quality
from aihpc.scoring.score import Score

# 2: a trial's parameter count is num_params (was params); 3: a child's architecture is
# arch_diff, the edits of its parent's
RESULTS_SCHEMA_VERSION = 3
COMPRESS_ABOVE = 64 * 2**20  # bytes of results.json past which it is written as results.json.gz


def build_results(store, score: Score, quality: Quality) -> dict[str, Any]:
    """Assemble results.json from the run store (the single source of truth), whole, in memory;
    :func:`write_results` with :func:`results_fields` and :func:`trial_records` writes it without
    holding the trials."""
    fields = results_fields(store, score)
    return {**fields, "trials": list(trial_records(store, quality))}


def run_start(store) -> float:
    """The run's start (its first segment's), from which results.json counts its times."""
    segments = store.segments()
    return segments[0].start if segments else 0.0


def trial_records(store, quality: Quality) -> Iterator[dict[str, Any]]:
    """results.json's trials, by id, made from the store one at a time; each with its best value
    of the run's ``quality``."""
    t0 = run_start(store)
    for row in store.iter_trials():
        yield trial_record(row, store.epochs(row.id), t0, quality)


def results_fields(store, score: Score) -> dict[str, Any]:
    """Every field of results.json but its trials."""
    segments = store.segments()
    t0 = run_start(store)
    wall = score.wall_seconds
    per_worker: dict[str, dict[str, float]] = defaultdict(
        lambda: {"busy_seconds": 0.0, "epochs": 0}
    )
    for worker, seconds in store.epoch_spans():
        w = per_worker[worker]
        w["busy_seconds"] += seconds
        w["epochs"] += 1
    counts = store.status_counts()
    screenings = store.screenings()
    for sc in screenings:  # a screening keeps its worker busy like an epoch
        per_worker[sc.worker]["busy_seconds"] += sc.t_end - sc.t_start
    workers_out = [
        {
            "name": name,
            "busy_seconds": w["busy_seconds"],
            "busy_fraction": w["busy_seconds"] / wall if wall > 0 else 0.0,
            "epochs": int(w["epochs"]),
        }
        for name, w in sorted(per_worker.items())
    ]
    score_block = {
        **score.to_dict(),
        "trials_completed": sum(counts.get(status, 0) for status in SUCCEEDED),
        "trials_failed": counts.get(TrialStatus.FAILED, 0),
        "trials_diverged": counts.get(TrialStatus.DIVERGED, 0),
        "screening_ops": sum(sc.ops for sc in screenings),
        **seed_only(store, score),
    }
    meta = store.meta()
    score_block["not_repeatable"] = not_repeatable(meta.peak)
    return {
        "schema_version": RESULTS_SCHEMA_VERSION,
        "aihpc_version": __version__,
        "run_id": meta.run_id,
        "config": meta.config,
        "data": meta.data,
        "environment": meta.environment,
        "peak": meta.peak,
        "layout": meta.layout,
        "staging": meta.staging,
        "devices": meta.devices,  # which device(s) each worker trains on (aihpc.machine.devices)
        "score": score_block,
        "energy": energy_results(meta.energy, score.ops),
        "segments": [s.to_dict(t0) for s in segments],
        "timeline": store.timeline(),
        "workers": workers_out,
        "screenings": [screening_record(sc, t0) for sc in screenings],
        "losses": [{**loss.to_dict(), "t": loss.t - t0} for loss in store.losses()],
        "helper_restarts": [{**r, "t": r["t"] - t0} for r in meta.helper_restarts],
        "worker_memory": meta.worker_memory,
        "integrity": integrity(store),
        **model_flops(store, score),
        **compilation(store),
    }


def not_repeatable(peak: dict[str, Any] | None) -> str | None:
    """Why the score and its share of peak would not repeat (:meth:`RunPeak.not_repeatable`);
    None where they would, or where the peak was not measured (or is in an older form)."""
    run_peak = current_run_peak(peak)
    return None if run_peak is None else run_peak.not_repeatable()


def seed_only(store, score: Score) -> dict[str, Any]:
    """How far the search got above the seed network trained afresh, in the same run:
    ``seed_only_best``, the best validation value of the trials without a parent (the seed, and
    every trial of strategies "none" and "seed"), ``seed_only_trial`` the first to reach it, and
    ``search_gain`` the run's best less it, in the quality's units where higher is better
    (accuracy as a fraction; a loss in nats per token, the seed-only loss less the run's best).
    None where no such trial finished an evaluation."""
    metric, sign = ("val_loss", -1.0) if score.is_loss else ("val_accuracy", 1.0)
    roots = store.roots()
    best: float | None = None
    trial: int | None = None
    for e in store.iter_epochs():
        value = e.metrics.get(metric) if e.status == EpochStatus.OK else None
        if (
            e.trial_id in roots
            and value is not None
            and (best is None or sign * value > sign * best)
        ):
            best, trial = value, e.trial_id
    run_best = score.best_val_loss if score.is_loss else score.best_accuracy
    gain = None if best is None or run_best is None else sign * (run_best - best)
    return {"seed_only_best": best, "seed_only_trial": trial, "search_gain": gain}


#: results.json's ``model_flops``: a language model run's utilisation by PaLM's convention.
MODEL_FLOPS_CONVENTION = (
    "6N + 12·L·H·Q·T per trained token (PaLM, appendix B): N the parameters in matrix "
    "products, L blocks of H heads of size Q, context T; evaluation not counted"
)


def model_flops(store, score: Score) -> dict[str, Any]:
    """``{"model_flops": ...}`` where the run's epochs recorded model FLOPs (language models):
    their total, per second of the run, and as a share of the nominal peak (the model FLOPs
    utilisation papers report); nothing for an image run."""
    flops = [e.metrics["model_flops"] for e in store.iter_epochs() if "model_flops" in e.metrics]
    if not flops:
        return {}
    total = float(sum(flops))
    rate = total / score.wall_seconds if score.wall_seconds > 0 else 0.0
    nominal = score.nominal_peak_flops_per_s
    return {
        "model_flops": {
            "convention": MODEL_FLOPS_CONVENTION,
            "total": total,
            "per_second": rate,
            "utilisation": rate / nominal if nominal else None,
        }
    }


def compilation(store) -> dict[str, Any]:
    """``{"compilation": ...}`` where the run's models were compiled region by region
    (:mod:`aihpc.train.regions`): ``models`` built compiled (one per trial and worker), the
    regions their first passes called (``regions_needed``), how many of those were compiled and
    how many served by code the worker compiled before (``regions_from_cache``: equal blocks of
    one network, a parent's unchanged blocks), and the seconds of the epochs' ``compile``
    phase (those first passes, compilation included); nothing where no model compiled."""
    models = needed = compiled = 0
    seconds = 0.0
    for e in store.iter_epochs():
        seconds += e.phase_seconds.get("compile", 0.0)
        if "regions_needed" in e.metrics:
            models += 1
            needed += int(e.metrics["regions_needed"])
            compiled += int(e.metrics["regions_compiled"])
    if not models:
        return {}
    return {
        "compilation": {
            "models": models,
            "regions_needed": needed,
            "regions_compiled": compiled,
            "regions_from_cache": needed - compiled,
            "compile_seconds": seconds,
        }
    }


def integrity(store) -> dict[str, Any]:
    """The head of the store's digest chain as results.json is written (see aihpc.records.chain)."""
    head, links = store.chain_head()
    return {"chain_sha256": head, "links": links}


def screening_record(row: ScreeningRow, t0: float) -> dict[str, Any]:
    """One proxy screening of results.json (see aihpc.runner.search.screening); candidates
    without their architectures (the chosen one is its trial's), times relative to ``t0``."""
    return {
        **row.to_dict(),
        "status": str(row.status),
        "t_start": row.t_start - t0,
        "t_end": row.t_end - t0,
        "candidates": [
            {k: v for k, v in c.to_dict().items() if k != "arch"} for c in row.candidates
        ],
    }


def trial_record(
    row: TrialRow, epochs: list[EpochRow], t0: float, quality: Quality
) -> dict[str, Any]:
    """One trial of results.json from its store row and epochs; times relative to ``t0``; a
    child's architecture as the diff of its parent's; its best value of ``quality``'s metric
    (``best_val_accuracy``, ``best_val_loss``)."""
    phases: dict[str, float] = defaultdict(float)
    workers: dict[str, int] = defaultdict(int)
    for e in epochs:
        for k, v in e.phase_seconds.items():
            phases[k] += v
        workers[e.worker] += 1
    values = [e.metrics[quality.metric] for e in epochs if e.status == EpochStatus.OK]
    ops_train = sum(e.ops_train for e in epochs)
    ops_eval = sum(e.ops_eval for e in epochs)
    return {
        "id": row.id,
        "parent": row.parent,
        "arch_hash": row.arch_hash,
        **({"arch": row.arch} if row.arch_diff is None else {"arch_diff": row.arch_diff}),
        "num_params": row.num_params,
        "morph": row.morph,
        "hparams": row.hparams.to_dict(),
        "budget_epochs": row.budget,
        "status": str(row.status),
        "reason": row.reason,
        "traceback": row.traceback,
        "attempts": row.attempts,
        **lineage_fields(row),
        "worker": max(workers, key=lambda w: workers[w]) if workers else None,
        "t_start": (epochs[0].t_start - t0) if epochs else None,
        "t_end": (max(e.t_end for e in epochs) - t0) if epochs else None,
        "epochs": [
            {
                **e.metrics,
                "status": str(e.status),
                "worker": e.worker,
                "device": e.device,
                "attempt": e.attempt,
                "t_start": e.t_start - t0,
                "t_end": e.t_end - t0,
            }
            for e in epochs
        ],
        quality.trial_key: max(values, key=quality.goodness) if values else None,
        "ops": {"train": ops_train, "eval": ops_eval, "total": ops_train + ops_eval},
        "ops_per_sample": epochs[-1].ops_per_sample if epochs else None,
        "phase_seconds": dict(phases),
    }


def lineage_fields(row: TrialRow) -> dict[str, Any]:
    """A trial's lineage and its hyperparameters' origin, where its store kept them (format 5)."""
    if row.hparams_origin is None:
        return {}
    return {
        "lineage_start": row.lineage_start,
        "lineage_epochs": row.lineage_epochs,
        "hparams_origin": row.hparams_origin,
    }


def write_results(
    run_dir: Path,
    results: dict[str, Any],
    trials: Iterable[dict[str, Any]] | None = None,
    compress_above: int = COMPRESS_ABOVE,
) -> tuple[Path, int]:
    """Write the run's results atomically; returns the file written and how many trials it holds.

    ``trials``: the trials, written as they come (:func:`trial_records`:
    never all in memory); None: ``results["trials"]``.  Sorted keys, one line
    per top-level field and per trial: still one JSON document (any JSON
    reader takes it), greppable, and a reader can skip the trials without
    parsing them.  Past ``compress_above`` bytes (a run of tens of
    thousands of trials) it is then compressed into ``results.json.gz``
    (about 9 times smaller; ``zcat results.json.gz | jq``), which replaces
    ``results.json``: a run directory holds one of the two.
    """
    fields = {k: v for k, v in results.items() if k != "trials"}
    rows = results.get("trials") or [] if trials is None else trials
    plain, compressed = Path(run_dir) / RESULTS_FILE, Path(run_dir) / COMPRESSED_RESULTS_FILE
    count = 0
    with atomic_open(plain) as f:
        for line, is_trial in _results_lines(fields, rows):
            f.write(line.encode("utf-8"))
            count += is_trial
    if plain.stat().st_size <= compress_above:
        compressed.unlink(missing_ok=True)
        return plain, count
    with atomic_open(compressed) as f, gzip.GzipFile(fileobj=f, mode="wb", mtime=0) as packed:
        with plain.open("rb") as source:
            shutil.copyfileobj(source, packed, 2**20)
    plain.unlink()
    return compressed, count


def _results_lines(
    fields: dict[str, Any], trials: Iterable[dict[str, Any]]
) -> Iterator[tuple[str, bool]]:
    """The file's lines, each with whether it is a trial's."""

    def dumps(value: Any) -> str:
        return json.dumps(value, sort_keys=True, separators=(",", ":"), allow_nan=False)

    keys = sorted([*fields, "trials"])
    yield "{\n", False
    for i, key in enumerate(keys):
        end = ",\n" if i < len(keys) - 1 else "\n"
        if key != "trials":
            yield f"{dumps(key)}:{dumps(fields[key])}{end}", False
            continue
        yield f"{dumps(key)}:[", False
        for n, trial in enumerate(trials):
            yield ("\n" if n == 0 else ",\n") + dumps(trial), True
        yield f"\n]{end}", False
    yield "}\n", False
