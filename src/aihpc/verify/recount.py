"""``aihpc verify``: check a finished run against itself, from its own records.

Five checks, each naming every mismatch by trial (and epoch) where it has one:

operations
    Every epoch's operation count recomputed from the logged architecture
    and hyperparameters (batch size, dropout), with an independent,
    layer-by-layer implementation (:func:`aihpc.tasks.image.count.count_spec_per_sample`)
    that tests hold equal to the worker's counter
    (:func:`aihpc.train.sample_ops.count_ops_per_sample`), times the logged samples:
    ``round(train ops/sample × train samples) + round(eval ops/sample × val
    samples)``, exactly as the worker credits them.  The architecture must
    hash to its logged ``arch_hash`` and have its logged parameter count; the
    sample counts must fit the data set.
score
    The score recomputed from the store (operations, the segments' times,
    the best accuracy) with :func:`aihpc.scoring.score.compute_score`, against
    results.json's.
results
    results.json rebuilt from the store (:func:`aihpc.results.write.build_results`)
    and compared field by field, trial by trial.
mlperf
    The MLPerf log against results.json and the store (:mod:`aihpc.verify.mlperf_log`).
integrity
    The store's rows against its digest chain (:mod:`aihpc.records.chain`),
    and the chain's head against results.json and the MLPerf log.  A store
    written before the chain existed (format < 3) is reported "no digest
    chain: integrity not checked", not failed.

Verification reads the run directory only; nothing in it changes.  Operation
counts are only reproducible with a torch whose operator set counts alike;
the torch version that ran is in results.json's environment.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import sqlite3
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec

from aihpc.base.errors import AihpcError, DataError, StorageError
from aihpc.records.codec import UNSET
from aihpc.records.messages import EpochStatus, ScreenStatus
from aihpc.records.rows import EpochRow, ScreeningRow, TrialRow
from aihpc.records.score import ScoreRecord
from aihpc.results.model import RunHead
from aihpc.results.read import iter_trial_records, read_run_head, results_file
from aihpc.results.trial import TrialRecord
from aihpc.scoring.score import Score, compute_score, wall_seconds
from aihpc.tasks import Arch, Task, of_run
from aihpc.verify.checks import Check, Found, Mismatch, Verification, diffs, same

if TYPE_CHECKING:
    from aihpc.records.store import RunStore

MAX_DIFFS = 5  # differing fields named per trial before "and N more"
PARALLEL_FROM_TRIALS = 2_000
"""From this many trials the operations are recounted in a second process while this one runs
the other checks (starting it costs a few seconds: smaller runs are recounted here)."""


def open_run(run_dir: Path) -> tuple[RunStore, RunHead[Any]]:
    """The run's store (read-only) and results.json's fields but its trials; DataError, one line,
    if it is not a finished run (StorageError if its store cannot be read)."""
    from aihpc.records.store import RunStore

    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        why = "not a directory" if run_dir.exists() else "no such directory"
        raise DataError(f"not a run directory: {run_dir} ({why})")
    if not (run_dir / "aihpc.sqlite").is_file():
        raise DataError(
            f"not a run directory: {run_dir} (no aihpc.sqlite, the store `aihpc run` writes)"
        )
    try:
        store = RunStore.read_only(run_dir)
        config = store.meta().config
    except (StorageError, sqlite3.Error) as exc:
        raise StorageError(f"not a run directory: {run_dir} ({exc})") from None
    try:
        if config is None:
            raise DataError(
                f"not a run directory: {run_dir} (its aihpc.sqlite holds no run configuration)"
            )
        return store, _read_head(results_file(run_dir), run_dir)
    except BaseException:
        store.close()
        raise


def _read_head(path: Path, run_dir: Path) -> RunHead[Any]:
    """results.json's fields but its trials (which the checks read one at a time)."""
    if not path.is_file():
        raise DataError(f"run {run_dir} has not finished (no results.json): nothing to verify yet")
    return read_run_head(path)


def verify_run(run_dir: Path) -> Verification:
    """Run every check on ``run_dir`` (see the module docstring), or on the inference result
    it holds (:func:`aihpc.verify.infer.verify_infer`).

    A store damaged so that its rows cannot be read (malformed JSON in a
    column, a table dropped, a row that breaks its record's rule, such as an
    accuracy of 1.5) is a StorageError: there is nothing to compare.
    """
    from aihpc.verify.chain import check_chain
    from aihpc.verify.infer import infer_folder, verify_infer
    from aihpc.verify.mlperf_log import check_mlperf

    folder = infer_folder(run_dir)
    if folder is not None:  # an inference result (aihpc infer): aihpc.verify.infer
        return verify_infer(folder)
    store, head = open_run(run_dir)
    path, log = results_file(run_dir), Path(run_dir) / "mlperf.log"
    try:
        with _second_process(store) as pool:
            # the recount, the longest check, runs beside the others where the run is large
            recount = pool.apply_async(_check_operations_in, (str(run_dir),)) if pool else None
            score = recomputed_score(store)
            rest = [
                check_score(score, head),
                check_results(store, score, head, _trials(path)),
                check_mlperf(log, store, head, _trials(path)),
                check_chain(store, head, log),
            ]
            outcomes = [recount.get() if recount else check_operations(store), *rest]
    except (json.JSONDecodeError, sqlite3.Error, DataError) as exc:
        raise StorageError(
            f"run store {Path(run_dir) / 'aihpc.sqlite'} is damaged: {exc}"
        ) from None
    finally:
        store.close()
    checks = tuple(check for check, _ in outcomes)
    mismatches = tuple(m for _, found in outcomes for m in found)
    return Verification(str(run_dir), checks, mismatches)


def _trials(path: Path) -> Iterator[TrialRecord]:
    """results.json's trials, one at a time; a trial that cannot be read is results.json's damage
    (StorageError), not the store's, which is what a DataError within the checks means."""
    try:
        yield from iter_trial_records(path)
    except DataError as exc:
        raise StorageError(str(exc)) from None


@contextmanager
def _second_process(store: RunStore) -> Iterator[Any]:
    """A pool of one spawned process for the recount where the run has ``PARALLEL_FROM_TRIALS``
    trials or more and this process may use two cores; None otherwise.  Leaving it ends the
    process, also when a check fails."""
    trials = sum(store.status_counts().values())
    if trials < PARALLEL_FROM_TRIALS or len(os.sched_getaffinity(0)) < 2:
        yield None
        return
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        yield pool


def _check_operations_in(run_dir: str) -> tuple[Check, list[Mismatch]]:
    """:func:`check_operations` of the run in ``run_dir``, its store opened in this process."""
    from aihpc.records.store import RunStore

    store = RunStore.read_only(Path(run_dir))
    try:
        return check_operations(store)
    finally:
        store.close()


# -- operations --------------------------------------------------------------------------
def check_operations(store: RunStore) -> tuple[Check, list[Mismatch]]:
    """Every epoch's operations recomputed from its trial's architecture and its samples."""
    found = Found("operations")
    meta = store.meta()
    data = meta.data or {}
    task = of_run(meta.config, meta.data)[0]
    epochs = 0
    arch_hashes: dict[int, str] = {}
    read = task.arch_reader()
    for trial in store.iter_trials():  # one at a time: a run may have hundreds of thousands
        arch_hashes[trial.id] = trial.arch_hash
        counts = _per_sample(task, read, trial, found)
        for e in store.epochs(trial.id):
            epochs += 1
            _check_epoch_ops(trial.id, e, counts, data, found)
    screenings = store.screenings()
    for sc in screenings:
        _check_screening_ops(sc, arch_hashes, found)
    also = f" and {len(screenings)} proxy screenings" if screenings else ""
    return found.outcome(
        f"recomputed for {epochs} epochs of {len(arch_hashes)} trials{also} from their "
        "architectures"
    ), found.items


def _check_screening_ops(sc: ScreeningRow, arch_hashes: dict[int, str], found: Found) -> None:
    """A screening's operations recounted from each candidate's logged architecture and minibatch
    size (:func:`aihpc.recommend.screen.screening_ops`); the trial it started is its chosen
    candidate."""
    from aihpc.recommend.screen import screening_ops
    from aihpc.tasks.image.spec import ArchSpec

    name = f"proxy screening {sc.id}"
    for i, c in enumerate(sc.candidates):
        try:
            spec = ArchSpec.from_dict(c.arch)
        except AihpcError as exc:
            found.add(f"{name}: candidate {i}'s logged architecture is not valid: {exc}")
            continue
        if spec.content_hash() != c.arch_hash:
            found.add(
                f"{name}: candidate {i}'s architecture hashes to {spec.content_hash()[:12]}, "
                f"not the logged {c.arch_hash[:12]}"
            )
        expected = screening_ops(spec, sc.batch)[0] if sc.status == ScreenStatus.OK else 0
        if c.ops != expected:
            found.add(
                f"{name}: candidate {i}'s operations logged {c.ops:,}, recounted {expected:,} "
                "from its "
                f"architecture and a minibatch of {sc.batch}"
            )
    if sc.ops != sum(c.ops for c in sc.candidates):
        found.add(f"{name}: operations logged {sc.ops:,}, not the sum over its candidates")
    if sc.trial is not None and (
        sc.chosen is None
        or not 0 <= sc.chosen < len(sc.candidates)
        or arch_hashes.get(sc.trial) != sc.candidates[sc.chosen].arch_hash
    ):
        found.add(f"{name}: trial {sc.trial} is not its chosen candidate {sc.chosen}", sc.trial)


def _per_sample(
    task: Task, read: Callable[[dict[str, Any]], Arch], trial: TrialRow, found: Found
) -> tuple[float, float, float | None] | None:
    """(train, eval) operations per sample of the trial's logged architecture, as the worker counts
    them (:meth:`aihpc.tasks.base.Task.recount_per_sample`: the same numbers, fast), and its
    model FLOPs per trained sample where the task has them (``Task.model_flops``)."""
    try:
        spec = read(trial.arch)
    except AihpcError as exc:
        found.add(f"its logged architecture is not valid: {exc}", trial.id)
        return None
    if spec.content_hash() != trial.arch_hash:
        found.add(
            f"its architecture hashes to {spec.content_hash()[:12]}, not the logged "
            f"{trial.arch_hash[:12]}",
            trial.id,
        )
    if trial.num_params is not None and spec.num_params() != trial.num_params:
        found.add(
            f"its architecture has {spec.num_params()} parameters, not the logged "
            f"{trial.num_params}",
            trial.id,
        )
    hp = trial.hparams
    return (*task.recount_per_sample(spec, hp.batch_size, hp.dropout), task.model_flops(spec, 1))


def _check_epoch_ops(
    trial_id: int,
    e: EpochRow,
    counts: tuple[float, float, float | None] | None,
    data: dict[str, Any],
    found: Found,
) -> None:
    m = e.metrics
    train_samples, val_samples = int(m.get("train_samples") or 0), int(m.get("val_samples") or 0)
    n_train, n_val = data.get("num_train"), data.get("num_val")
    where = {"trial": trial_id, "epoch": e.epoch}
    if n_train is not None and not 0 <= train_samples <= n_train:
        found.add(f"{train_samples} training samples logged; the data set has {n_train}", **where)
    # a finished epoch evaluated the whole set
    complete = e.status != EpochStatus.OK or val_samples == n_val
    if n_val is not None and (not 0 <= val_samples <= n_val or not complete):
        found.add(
            f"{val_samples} validation samples logged for "
            f"a{' finished' if e.status == EpochStatus.OK else 'n'} "
            f"epoch; the validation set has {n_val}",
            **where,
        )
    if m.get("ops") is not None and m["ops"] != e.ops_train + e.ops_eval:
        found.add(
            f"metrics.ops {m['ops']} is not ops_train + ops_eval = {e.ops_train + e.ops_eval}",
            **where,
        )
    if counts is None:
        return
    train, evaluate, model_flops = counts
    if model_flops is not None and not same(m.get("model_flops"), model_flops * train_samples):
        found.add(
            f"model FLOPs logged {m.get('model_flops')!r}, recomputed "
            f"{model_flops * train_samples!r} from the architecture and {train_samples} samples",
            **where,
        )
    if e.ops_per_sample and e.ops_per_sample != {"train": train, "eval": evaluate}:
        found.add(
            f"operations per sample logged {e.ops_per_sample}, recounted "
            f"{{'train': {train}, 'eval': {evaluate}}}",
            **where,
        )
    for name, logged, expected in (
        ("ops_train", e.ops_train, round(train * train_samples)),
        ("ops_eval", e.ops_eval, round(evaluate * val_samples)),
    ):
        if logged != expected:
            found.add(
                f"{name} logged {logged:,}, recomputed {expected:,} from the architecture and "
                f"{train_samples if name == 'ops_train' else val_samples} samples",
                **where,
            )


# -- score -------------------------------------------------------------------------------
def recomputed_score(store: RunStore) -> Score:
    """The score from the store's operations, segment times and validation metrics (not from
    results.json)."""
    meta = store.meta()
    quality = of_run(meta.config, meta.data)[1]
    values = [e.metrics[quality.metric] for e in store.iter_epochs() if e.status == EpochStatus.OK]
    return compute_score(
        ops=store.total_ops(),
        wall_seconds=wall_seconds(store.segments()),
        best=max(values, key=quality.goodness, default=None),
        quality=quality,
        peak_flops_per_s=meta.peak_flops_per_s,
        nominal_peak_flops_per_s=meta.nominal_peak_flops_per_s,
    )


def check_score(score: Score, results: RunHead[Any]) -> tuple[Check, list[Mismatch]]:
    found = Found("score")
    recorded = results.score.to_dict()  # the fields the file holds (a later one may be absent)
    for key, expected in score.to_dict().items():
        if key not in recorded and key in Score.ADDED_LATER:
            continue  # a file written before the field existed
        if key not in recorded:
            found.add(f"results.json's score has no {key!r}")
        elif not same(recorded[key], expected):
            found.add(
                f"{key} in results.json is {recorded[key]!r}; recomputed from the logged "
                "operations and "
                f"times: {expected!r}"
            )
    segments, wall = results.segments, results.score.wall_seconds
    if segments:
        span = segments[-1].t_end - segments[0].t_start
        if not same(span, wall, rel=1e-9):
            found.add(f"wall_seconds {wall!r} is not the span of results.json's segments {span!r}")
    return found.outcome(
        f"ops, OPS, regulated score, error and share of peak from {score.ops:,} operations "
        f"in {score.wall_seconds:.2f} s"
    ), found.items


# -- results.json ------------------------------------------------------------------------
def check_results(
    store: RunStore, score: Score, head: RunHead[Any], trials: Iterator[TrialRecord]
) -> tuple[Check, list[Mismatch]]:
    """results.json against the one the store rebuilds: its fields (``head``: those the file
    holds), then its ``trials`` one at a time against the store's, both by id; each compared
    field by field as written."""
    from aihpc.results.write import results_fields

    found = Found("results")
    rebuilt = results_fields(store, score)
    expected, recorded = rebuilt.to_dict(), head.to_dict()
    for key in (
        "run_id",
        "config",
        "data",
        "environment",
        "peak",
        "layout",
        "energy",
        "segments",
        "workers",
        "timeline",
        "screenings",
        "losses",
        "helper_restarts",
        "model_flops",
    ):
        if key in recorded and not same(recorded[key], expected.get(key)):
            path, got, want = next(diffs(recorded[key], expected.get(key), key))
            found.add(f"results.json {path} is {_short(got)}; the run store has {_short(want)}")
    _check_repeatable(head.score, rebuilt.score, found)
    _check_parts(head.score, rebuilt.score, found)
    count = _check_trials(store, trials, found)
    return found.outcome(
        f"{count} trials and every section rebuilt from the run store"
    ), found.items


def _check_repeatable(recorded: ScoreRecord, expected: ScoreRecord, found: Found) -> None:
    """The score's ``not_repeatable`` against the rule applied to the store's peak (files written
    before it have none)."""
    if recorded.not_repeatable is not UNSET and recorded.not_repeatable != expected.not_repeatable:
        found.add(
            f"results.json's score.not_repeatable is {recorded.not_repeatable!r}; the run store's "
            f"peak gives {expected.not_repeatable!r}"
        )


def _check_parts(recorded: ScoreRecord, expected: ScoreRecord, found: Found) -> None:
    """What the score is made of (:mod:`aihpc.results.rates`) against the store's epochs (files
    written before it have none)."""
    for key in ("work_seconds", "seed_rate", "path_factor"):
        value, want = getattr(recorded, key), getattr(expected, key)
        if value is not UNSET and not same(value, want):
            found.add(
                f"results.json's score.{key} is {value!r}; the run store's epochs give {want!r}"
            )


def _check_trials(store: RunStore, trials: Iterator[TrialRecord], found: Found) -> int:
    """Each trial of results.json against the store's record of it, the two read side by side in
    id order (as results.json is written); how many trials results.json holds."""
    from aihpc.results.write import run_start, trial_record

    meta = store.meta()
    quality = of_run(meta.config, meta.data)[1]
    t0 = run_start(store)
    stored = (
        (row.arch, trial_record(row, store.epochs(row.id), t0, quality))
        for row in store.iter_trials()
    )
    arch, want = next(stored, (None, None))
    count, previous = 0, -1
    for got in trials:
        count += 1
        if got.id <= previous:
            found.add(f"results.json's trials are not in id order: {got.id!r} after {previous}")
            return count
        previous = got.id
        while want is not None and want.id < got.id:
            found.add("in the run store but missing from results.json", want.id)
            arch, want = next(stored, (None, None))
        if want is None or want.id != got.id:
            found.add("in results.json but not in the run store", got.id)
            continue
        _compare_trial(got, want, arch, found)
        arch, want = next(stored, (None, None))
    while want is not None:
        found.add("in the run store but missing from results.json", want.id)
        arch, want = next(stored, (None, None))
    return count


def _compare_trial(got: TrialRecord, want: TrialRecord, arch: Any, found: Found) -> None:
    """One trial of results.json (``got``) against the store's (``want``, whose architecture in
    full is ``arch``): the first MAX_DIFFS differing fields, as written, and how many more."""
    if got == want:
        return
    if got.arch is not None and want.arch is None:  # older than schema 3: architectures in full
        want = msgspec.structs.replace(want, arch=arch, arch_diff=None)
    changed = list(diffs(got.to_dict(), want.to_dict(), ""))
    for path, value, stored in changed[:MAX_DIFFS]:
        found.add(
            f"results.json {path.lstrip('.')} is {_short(value)}; the run store has "
            f"{_short(stored)}",
            got.id,
        )
    if len(changed) > MAX_DIFFS:
        found.add(f"and {len(changed) - MAX_DIFFS} more fields differ", got.id)


# -- helpers -----------------------------------------------------------------------------
def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
