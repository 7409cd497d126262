"""The MLPerf-log check of ``aihpc verify``: does ``mlperf.log`` tell the same run as results.json?

The log (see :mod:`aihpc.mlperf.log`) holds one block per finished
trial-epoch, whose ``eval_accuracy`` event carries ``trial_id``,
``trial_epoch`` and ``trial_accuracy``, with the epoch's start and stop in
milliseconds.  Checked:

- the finished epochs logged are exactly results.json's ``ok`` epochs, each
  with the same accuracy, and with the store's start and stop times (ms);
- the last ``eval_accuracy`` (the best so far) is the score's best accuracy;
- ``train_samples``/``eval_samples`` are the data set's sizes;
- ``run_stop``'s status is success exactly when the score is valid, and the
  run's segments lie between ``run_start`` and ``run_stop``.

The log, results.json's trials and the store's epochs are each read one at a
time; what is kept is a few numbers per logged epoch (:class:`Log`).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aihpc.mlperf.check import iter_events
from aihpc.records.messages import EpochStatus
from aihpc.results.model import RunHead
from aihpc.results.trial import TrialRecord
from aihpc.tasks import of_run
from aihpc.verify.checks import Check, Found, Mismatch, same

if TYPE_CHECKING:
    from aihpc.records.store import RunStore

SLACK_MS = 1000  # the master's segments start just after run_start and end before run_stop
PER_EPOCH = {"eval_accuracy": 0, "epoch_start": 1, "epoch_stop": 2}  # their place in Log.epochs
OTHER_KEYS = ("train_samples", "eval_samples", "run_start", "run_stop")  # and the screenings'


@dataclass
class Log:
    """What the check reads of the log, a line at a time: per logged (trial, epoch) its accuracy
    and its start and stop in ms (None where not logged), the last ``eval_accuracy`` value, the
    run's own events by key, and the lines that are not events."""

    epochs: dict[tuple[Any, Any], list[Any]] = field(default_factory=dict)
    accuracies: int = 0  # eval_accuracy events
    last_accuracy: Any = None
    events: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    bad: list[int] = field(default_factory=list)


def read_log(path: Path) -> Log:
    """The log at ``path`` as :class:`Log` holds it."""
    from aihpc.runner.search.screening import MLPERF_KEY

    log = Log()
    for number, event in iter_events(path):
        if event is None:
            log.bad.append(number)
            continue
        key = str(event.get("key"))
        if key in PER_EPOCH:
            meta = event.get("metadata") or {}
            slots = log.epochs.setdefault(
                (meta.get("trial_id"), meta.get("trial_epoch")), [None] * 3
            )
            if key == "eval_accuracy":
                slots[0], log.last_accuracy = meta.get("trial_accuracy"), event.get("value")
                log.accuracies += 1
            else:
                slots[PER_EPOCH[key]] = event.get("time_ms")
        elif key in OTHER_KEYS or key == MLPERF_KEY:
            log.events.setdefault(key, []).append(event)
    return log


def check_mlperf(
    path: Path, store: RunStore, head: RunHead[Any], trials: Iterator[TrialRecord]
) -> tuple[Check, list[Mismatch]]:
    """The log at ``path`` against the store, results.json's fields (``head``) and its
    ``trials`` (read one at a time)."""
    found = Found("mlperf")
    if not path.is_file():
        found.add(f"no MLPerf log at {path}")
        return found.outcome("mlperf.log missing"), found.items
    log = read_log(path)
    for number in log.bad[:5]:
        found.add(f"line {number} of mlperf.log is not an MLLOG event")
    _check_epochs(log, store, head, trials, found)
    _check_screenings(log.events, store, found)
    _check_run(log.events, store, head, found)
    return found.outcome(
        f"{log.accuracies} logged trial-epochs against results.json and the store"
    ), found.items


def _check_epochs(
    log: Log, store: RunStore, head: RunHead[Any], trials: Iterator[TrialRecord], found: Found
) -> None:
    """Each finished epoch of results.json is logged once, with its quality (an accuracy, or a
    loss: the run's task's); nothing else is."""
    meta = store.meta()
    quality = of_run(meta.config, meta.data)[1]
    unmatched = {key for key, slots in log.epochs.items() if slots[0] is not None}
    for trial in trials:
        for e in trial.epochs:
            if e.status != EpochStatus.OK:
                continue
            key = (trial.id, e.epoch)
            if key not in unmatched:
                found.add("finished in results.json but not in the MLPerf log", *key)
                continue
            unmatched.discard(key)
            logged = log.epochs[key][0]
            if not same(logged, e.value(quality.metric)):
                found.add(
                    f"{quality.label} {e.value(quality.metric)!r} in results.json, {logged!r} in "
                    "the MLPerf log",
                    *key,
                )
    for trial, epoch in sorted(unmatched, key=str):
        found.add("in the MLPerf log but not a finished epoch of results.json", trial, epoch)
    _check_times(log, store, found)
    best = head.score.best(quality.best_key)
    if log.accuracies and not same(log.last_accuracy, best):
        found.add(
            f"the log's last eval_accuracy {log.last_accuracy!r} is not the score's "
            f"{quality.best_key} {best!r}"
        )


def _check_screenings(
    by_key: dict[str, list[dict[str, Any]]], store: RunStore, found: Found
) -> None:
    """Each proxy screening of the store is logged once, with its operations and its trial."""
    from aihpc.runner.search.screening import MLPERF_KEY

    logged = {(e.get("metadata") or {}).get("screening_id"): e for e in by_key.get(MLPERF_KEY, [])}
    stored = {sc.id: sc for sc in store.screenings()}
    for sid in sorted(set(stored) - set(logged), key=str):
        found.add(f"proxy screening {sid} is in the store but not in the MLPerf log")
    for unknown in sorted(set(logged) - set(stored), key=str):
        found.add(f"proxy screening {unknown} is in the MLPerf log but not in the store")
    for sid in sorted(set(stored) & set(logged)):
        event, row = logged[sid], stored[sid]
        trial = (event.get("metadata") or {}).get("trial_id")
        if event.get("value") != row.ops or trial != row.trial:
            found.add(
                f"proxy screening {sid}: the MLPerf log has {event.get('value')!r} operations for "
                "trial "
                f"{trial!r}, the store {row.ops!r} for {row.trial!r}"
            )


def _check_times(log: Log, store: RunStore, found: Found) -> None:
    """Each logged epoch interval is its store row's (t_start, t_end), in whole milliseconds."""
    for row in store.iter_epochs():
        slots = log.epochs.get((row.trial_id, row.epoch))
        if row.status != EpochStatus.OK or slots is None:
            continue
        for key, logged, stored in (
            ("epoch_start", slots[1], row.t_start),
            ("epoch_stop", slots[2], row.t_end),
        ):
            if logged is not None and logged != int(stored * 1000):
                field_name = "t_start" if key == "epoch_start" else "t_end"
                found.add(
                    f"{key} at {logged} ms in the MLPerf log; the store's {field_name} is "
                    f"{int(stored * 1000)} ms",
                    row.trial_id,
                    row.epoch,
                )


def _check_run(
    by_key: dict[str, list[dict[str, Any]]], store: RunStore, head: RunHead[Any], found: Found
) -> None:
    data = head.data or None
    for key, size in (("train_samples", "num_train"), ("eval_samples", "num_val")):
        values = [e.get("value") for e in by_key.get(key, [])]
        recorded = getattr(data, size) if data is not None else None
        if values != [recorded]:
            found.add(f"{key} logged {values}, results.json's data has {size} {recorded!r}")
    starts, stops = by_key.get("run_start", []), by_key.get("run_stop", [])
    if len(starts) != 1 or len(stops) != 1:
        found.add(
            f"{len(starts)} run_start and {len(stops)} run_stop events; a run logs one of each"
        )
        return
    status = (stops[0].get("metadata") or {}).get("status")
    if (status == "success") != head.score.valid:
        valid = "valid" if head.score.valid else "invalid"
        found.add(f"run_stop status {status!r} but results.json's score is {valid}")
    segments = store.segments()
    if segments:
        begin = int(segments[0].start * 1000)
        end = int(max(s.stop for s in segments) * 1000)
        if (
            begin < starts[0].get("time_ms", 0) - SLACK_MS
            or end > stops[0].get("time_ms", 0) + SLACK_MS
        ):
            found.add(
                f"the run's segments ({begin}..{end} ms) do not lie between the log's run_start "
                f"({starts[0].get('time_ms')}) and run_stop ({stops[0].get('time_ms')})"
            )
