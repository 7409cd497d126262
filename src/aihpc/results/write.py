"""results.json: the versioned, self-describing record of one run, written from the run store.

The file is a :class:`~aihpc.results.model.RunResults` (the records of
:mod:`aihpc.results.model`) built from the store: :func:`results_fields` its
head, :func:`trial_records` its trials one at a time, :func:`write_results`
the file.  Each section the store keeps as it was measured (the peak, the
environment, the data set, the devices, the energy...) is checked into its
record, which must keep all of it (:func:`aihpc.records.codec.exact`).

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
score's ``seed_only_best``, ``seed_only_trial``, ``seed_only_end`` and ``search_gain``
(:func:`aihpc.results.gain.seed_only`), ``work_seconds``, ``seed_rate`` and ``path_factor``
(:func:`aihpc.results.rates.rate_split`), and its ``not_repeatable`` (:func:`not_repeatable`: why
the score and its share of peak would not repeat, the peak having moved during
the run; null where they would).

Version 3 writes a child's architecture as ``arch_diff``, the edits of its
parent's (:mod:`aihpc.records.archdiff`), instead of ``arch`` in full (which
only trials without a parent keep), and lays the file out one line per
top-level field and per trial, without indentation: 2 to 3 times smaller.
"""

from __future__ import annotations

import gzip
import shutil
from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from aihpc import __version__
from aihpc.base.fileio import atomic_open
from aihpc.nas.helper_restart import HelperRestart
from aihpc.records.codec import UNSET, encode, exact
from aihpc.records.energy import EnergyRecord, energy_results
from aihpc.records.environment import EnvironmentRecord
from aihpc.records.messages import EpochStatus
from aihpc.records.peak import RunPeakRecord
from aihpc.records.rows import SUCCEEDED, EpochRow, ScreeningRow, TrialRow, TrialStatus
from aihpc.records.score import ScoreRecord
from aihpc.results.gain import seed_only
from aihpc.results.model import RunHead, RunResults
from aihpc.results.rates import rate_split
from aihpc.results.read import COMPRESSED_RESULTS_FILE, RESULTS_FILE, TRIALS
from aihpc.results.sections import (
    CandidateRecord,
    CompilationRecord,
    DevicesRecord,
    IntegrityRecord,
    LayoutRecord,
    ModelFlopsRecord,
    ScreeningRecord,
    SegmentRecord,
    StagingRecord,
    TimelinePoint,
    WorkerBusy,
    WorkerMemoryRecord,
)
from aihpc.results.trial import EpochRecord, HparamsRecord, OpsPerSample, TrialOps, TrialRecord
from aihpc.scoring.peak import current_run_peak
from aihpc.scoring.quality import Quality
from aihpc.scoring.score import Score
from aihpc.tasks import recorded_task

# 2: a trial's parameter count is num_params (was params); 3: a child's architecture is
# arch_diff, the edits of its parent's
RESULTS_SCHEMA_VERSION = 3
COMPRESS_ABOVE = 64 * 2**20  # bytes of results.json past which it is written as results.json.gz


def build_results(store: Any, score: Score, quality: Quality) -> RunResults[Any]:
    """results.json from the run store (the single source of truth), whole, in memory;
    :func:`write_results` with :func:`results_fields` and :func:`trial_records` writes it without
    holding the trials."""
    head = results_fields(store, score)
    values = {name: getattr(head, name) for name in RunHead.__struct_fields__}
    return RunResults(**values, trials=tuple(trial_records(store, quality)))


def run_start(store: Any) -> float:
    """The run's start (its first segment's), from which results.json counts its times."""
    segments = store.segments()
    return float(segments[0].start) if segments else 0.0


def trial_records(store: Any, quality: Quality) -> Iterator[TrialRecord]:
    """results.json's trials, by id, made from the store one at a time; each with its best value
    of the run's ``quality``."""
    t0 = run_start(store)
    for row in store.iter_trials():
        yield trial_record(row, store.epochs(row.id), t0, quality)


def results_fields(store: Any, score: Score) -> RunHead[Any]:
    """Every field of results.json but its trials."""
    segments = store.segments()
    t0 = run_start(store)
    meta = store.meta()
    screenings = store.screenings()
    task = recorded_task(meta.config)
    return RunHead(
        schema_version=RESULTS_SCHEMA_VERSION,
        aihpc_version=__version__,
        run_id=meta.run_id,
        config=meta.config,
        data=_section(meta.data, task.data_record, "data"),
        environment=exact(meta.environment, EnvironmentRecord, "results.json's environment"),
        peak=_section(meta.peak, RunPeakRecord, "peak"),
        layout=_section(meta.layout, LayoutRecord, "layout"),
        staging=_section(meta.staging, StagingRecord, "staging"),
        # which device(s) each worker trains on (aihpc.machine.devices)
        devices=_section(meta.devices, DevicesRecord, "devices"),
        score=score_record(store, score, screenings, meta.peak),
        energy=_section(energy_results(meta.energy, score.ops), EnergyRecord, "energy"),
        segments=tuple(SegmentRecord(**s.to_dict(t0)) for s in segments),
        timeline=exact(store.timeline(), tuple[TimelinePoint, ...], "results.json's timeline"),
        workers=workers_busy(store, score.wall_seconds, screenings),
        screenings=tuple(screening_record(sc, t0) for sc in screenings),
        losses=tuple(replace(loss, t=loss.t - t0) for loss in store.losses()),
        helper_restarts=tuple(
            HelperRestart.from_dict({**r, "t": r["t"] - t0}) for r in meta.helper_restarts
        ),
        worker_memory=_section(meta.worker_memory, WorkerMemoryRecord, "worker_memory"),
        integrity=integrity(store),
        model_flops=model_flops(store, score),
        compilation=compilation(store),
    )


def _section(value: Any, kind: Any, name: str) -> Any:
    """The store's section ``value`` as its record ``kind`` (None where the store has none)."""
    return None if value is None else exact(value, kind, f"results.json's {name}")


def workers_busy(store: Any, wall: float, screenings: list[ScreeningRow]) -> tuple[WorkerBusy, ...]:
    """How busy each worker was over the run's ``wall`` seconds: its epochs' time, and its
    screenings' (a screening keeps its worker busy like an epoch)."""
    busy: dict[str, float] = defaultdict(float)
    epochs: dict[str, int] = defaultdict(int)
    for worker, seconds in store.epoch_spans():
        busy[worker] += seconds
        epochs[worker] += 1
    for sc in screenings:
        busy[sc.worker] += sc.t_end - sc.t_start
    return tuple(
        WorkerBusy(
            name=name,
            busy_seconds=seconds,
            busy_fraction=seconds / wall if wall > 0 else 0.0,
            epochs=epochs[name],
        )
        for name, seconds in sorted(busy.items())
    )


def score_record(
    store: Any, score: Score, screenings: list[ScreeningRow], peak: dict[str, Any] | None
) -> ScoreRecord:
    """results.json's ``score``: the score, how the trials ended, the screenings' operations, how
    far the search got above the seed network (:func:`aihpc.results.gain.seed_only`), what the
    score is made of (:func:`aihpc.results.rates.rate_split`) and, from the run's ``peak`` (the
    store's), whether it would repeat."""
    counts = store.status_counts()
    return exact(
        {
            **score.to_dict(),
            "trials_completed": sum(counts.get(status, 0) for status in SUCCEEDED),
            "trials_failed": counts.get(TrialStatus.FAILED, 0),
            "trials_diverged": counts.get(TrialStatus.DIVERGED, 0),
            "screening_ops": sum(sc.ops for sc in screenings),
            **seed_only(store, score),
            **rate_split(store, score),
            "not_repeatable": not_repeatable(peak),
        },
        ScoreRecord,
        "results.json's score",
    )


def not_repeatable(peak: dict[str, Any] | None) -> str | None:
    """Why the score and its share of peak would not repeat (:meth:`RunPeak.not_repeatable`);
    None where they would, or where the peak was not measured (or is in an older form)."""
    run_peak = current_run_peak(peak)
    return None if run_peak is None else run_peak.not_repeatable()


#: results.json's ``model_flops``: a language model run's utilisation by PaLM's convention.
MODEL_FLOPS_CONVENTION = (
    "6N + 12·L·H·Q·T per trained token (PaLM, appendix B): N the parameters in matrix "
    "products, L blocks of H heads of size Q, context T; evaluation not counted"
)


def model_flops(store: Any, score: Score) -> ModelFlopsRecord | None:
    """A language model run's model FLOPs, where its epochs recorded them: their total, per second
    of the run, and as a share of the nominal peak (the model FLOPs utilisation papers report);
    None for an image run."""
    flops = [e.metrics["model_flops"] for e in store.iter_epochs() if "model_flops" in e.metrics]
    if not flops:
        return None
    total = float(sum(flops))
    rate = total / score.wall_seconds if score.wall_seconds > 0 else 0.0
    nominal = score.nominal_peak_flops_per_s
    return ModelFlopsRecord(
        convention=MODEL_FLOPS_CONVENTION,
        total=total,
        per_second=rate,
        utilisation=rate / nominal if nominal else None,
    )


def compilation(store: Any) -> CompilationRecord | None:
    """Where the run's models were compiled region by region (:mod:`aihpc.train.regions`): the
    ``models`` built compiled (one per trial and worker), the regions their first passes called
    (``regions_needed``), how many of those were compiled and how many served by code the worker
    compiled before (``regions_from_cache``: equal blocks of one network, a parent's unchanged
    blocks), and the seconds of the epochs' ``compile`` phase (those first passes, compilation
    included); None where no model compiled."""
    models = needed = compiled = 0
    seconds = 0.0
    for e in store.iter_epochs():
        seconds += e.phase_seconds.get("compile", 0.0)
        if "regions_needed" in e.metrics:
            models += 1
            needed += int(e.metrics["regions_needed"])
            compiled += int(e.metrics["regions_compiled"])
    if not models:
        return None
    return CompilationRecord(
        models=models,
        regions_needed=needed,
        regions_compiled=compiled,
        regions_from_cache=needed - compiled,
        compile_seconds=seconds,
    )


def integrity(store: Any) -> IntegrityRecord:
    """The head of the store's digest chain as results.json is written (see aihpc.records.chain)."""
    head, links = store.chain_head()
    return IntegrityRecord(chain_sha256=head, links=links)


def screening_record(row: ScreeningRow, t0: float) -> ScreeningRecord:
    """One proxy screening of results.json (see aihpc.runner.search.screening); candidates
    without their architectures (the chosen one is its trial's), times relative to ``t0``."""
    return ScreeningRecord(
        id=row.id,
        parent=row.parent,
        trial=row.trial,
        status=row.status,
        worker=row.worker,
        t_start=row.t_start - t0,
        t_end=row.t_end - t0,
        batch=row.batch,
        ops=row.ops,
        chosen=row.chosen,
        candidates=tuple(
            CandidateRecord(
                arch_hash=c.arch_hash,
                morph=c.morph,
                ops=c.ops,
                predicted=c.predicted,
                proxies=c.proxies,
            )
            for c in row.candidates
        ),
        reason=row.reason,
    )


def trial_record(row: TrialRow, epochs: list[EpochRow], t0: float, quality: Quality) -> TrialRecord:
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
    best = max(values, key=quality.goodness) if values else None
    of_accuracy = quality.trial_key == "best_val_accuracy"
    return TrialRecord(
        id=row.id,
        parent=row.parent,
        arch_hash=row.arch_hash,
        arch=row.arch if row.arch_diff is None else None,
        arch_diff=row.arch_diff,
        num_params=row.num_params,
        morph=row.morph,
        hparams=HparamsRecord.of(row.hparams),
        budget_epochs=row.budget,
        status=row.status,
        reason=row.reason,
        traceback=row.traceback,
        attempts=row.attempts,
        worker=max(workers, key=lambda w: workers[w]) if workers else None,
        t_start=(epochs[0].t_start - t0) if epochs else None,
        t_end=(max(e.t_end for e in epochs) - t0) if epochs else None,
        epochs=tuple(epoch_record(e, t0) for e in epochs),
        ops=TrialOps(train=ops_train, eval=ops_eval, total=ops_train + ops_eval),
        ops_per_sample=OpsPerSample(**epochs[-1].ops_per_sample) if epochs else None,
        phase_seconds=dict(phases),
        lineage_start=row.lineage_start,  # the three None where the store's format predates them
        lineage_epochs=row.lineage_epochs,
        hparams_origin=row.hparams_origin,
        best_val_accuracy=best if of_accuracy else UNSET,
        best_val_loss=UNSET if of_accuracy else best,
    )


def epoch_record(e: EpochRow, t0: float) -> EpochRecord:
    """One epoch of a trial in results.json: its metrics, where and when it ran (``t0`` the run's
    start)."""
    return EpochRecord(
        **e.metrics,
        status=e.status,
        worker=e.worker,
        device=e.device,
        attempt=e.attempt,
        t_start=e.t_start - t0,
        t_end=e.t_end - t0,
    )


@dataclass(frozen=True)
class WrittenResults:
    """What :func:`write_results` wrote: the file, the run's sections but its trials, and how
    many trials it holds."""

    path: Path
    head: RunHead[Any]
    trials: int


def write_results(
    run_dir: Path,
    head: RunHead[Any],
    trials: Iterable[TrialRecord],
    compress_above: int = COMPRESS_ABOVE,
) -> WrittenResults:
    """Write the run's results atomically: ``head``, and ``trials`` as they come
    (:func:`trial_records`: never all in memory).

    Sorted keys, one line per top-level field and per trial: still one JSON
    document (any JSON reader takes it), greppable, and a reader can skip the
    trials without parsing them.  Past ``compress_above`` bytes (a run of tens
    of thousands of trials) it is then compressed into ``results.json.gz``
    (about 9 times smaller; ``zcat results.json.gz | jq``), which replaces
    ``results.json``: a run directory holds one of the two.
    """
    plain, compressed = Path(run_dir) / RESULTS_FILE, Path(run_dir) / COMPRESSED_RESULTS_FILE
    count = 0
    with atomic_open(plain) as f:
        for line, is_trial in _results_lines(head.to_dict(), trials):
            f.write(line)
            count += is_trial
    if plain.stat().st_size <= compress_above:
        compressed.unlink(missing_ok=True)
        return WrittenResults(plain, head, count)
    with atomic_open(compressed) as f, gzip.GzipFile(fileobj=f, mode="wb", mtime=0) as packed:
        with plain.open("rb") as source:
            shutil.copyfileobj(source, packed, 2**20)
    plain.unlink()
    return WrittenResults(compressed, head, count)


def _results_lines(
    fields: dict[str, Any], trials: Iterable[TrialRecord]
) -> Iterator[tuple[bytes, bool]]:
    """The file's lines, each with whether it is a trial's."""
    keys = sorted([*fields, TRIALS])
    yield b"{\n", False
    for i, key in enumerate(keys):
        end = b",\n" if i < len(keys) - 1 else b"\n"
        if key != TRIALS:
            yield encode(key) + b":" + encode(fields[key]) + end, False
            continue
        yield encode(key) + b":[", False
        for n, trial in enumerate(trials):
            yield (b"\n" if n == 0 else b",\n") + encode(trial), True
        yield b"\n]" + end, False
    yield b"}\n", False
