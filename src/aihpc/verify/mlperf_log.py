"""The MLPerf-log check of ``aihpc verify``: does ``mlperf.log`` tell the same run as results.json?

The log (see :mod:`aihpc.records.mlperf`) holds one block per finished
trial-epoch, whose ``eval_accuracy`` event carries ``trial_id``,
``trial_epoch`` and ``trial_accuracy``, with the epoch's start and stop in
milliseconds.  Checked:

- the finished epochs logged are exactly results.json's ``ok`` epochs, each
  with the same accuracy, and with the store's start and stop times (ms);
- the last ``eval_accuracy`` (the best so far) is the score's best accuracy;
- ``train_samples``/``eval_samples`` are the data set's sizes;
- ``run_stop``'s status is success exactly when the score is valid, and the
  run's segments lie between ``run_start`` and ``run_stop``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from aihpc.records.mlperf_check import read_events
from aihpc.verify.checks import Check, Found, Mismatch, same

SLACK_MS = 1000  # the master's segments start just after run_start and end before run_stop


def check_mlperf(path: Path, store, results: dict[str, Any]) -> tuple[Check, list[Mismatch]]:
    found = Found("mlperf")
    if not path.is_file():
        found.add(f"no MLPerf log at {path}")
        return found.outcome("mlperf.log missing"), found.items
    events, bad = read_events(path)
    for number in bad[:5]:
        found.add(f"line {number} of mlperf.log is not an MLLOG event")
    by_key: dict[str, list[dict[str, Any]]] = {}
    for event in events:
        by_key.setdefault(str(event.get("key")), []).append(event)
    _check_epochs(by_key, store, results, found)
    _check_screenings(by_key, store, found)
    _check_run(by_key, store, results, found)
    logged = len(by_key.get("eval_accuracy", []))
    return found.outcome(
        f"{logged} logged trial-epochs against results.json and the store"
    ), found.items


def _check_epochs(
    by_key: dict[str, list[dict[str, Any]]], store, results: dict[str, Any], found: Found
) -> None:
    logged = {}
    for event in by_key.get("eval_accuracy", []):
        meta = event.get("metadata") or {}
        logged[(meta.get("trial_id"), meta.get("trial_epoch"))] = meta.get("trial_accuracy")
    finished = {
        (t.get("id"), e.get("epoch")): e.get("val_accuracy")
        for t in results.get("trials") or []
        for e in t.get("epochs") or []
        if e.get("status") == "ok"
    }
    for trial, epoch in sorted(set(finished) - set(logged), key=str):
        found.add("finished in results.json but not in the MLPerf log", trial, epoch)
    for trial, epoch in sorted(set(logged) - set(finished), key=str):
        found.add("in the MLPerf log but not a finished epoch of results.json", trial, epoch)
    for key in sorted(set(logged) & set(finished), key=str):
        if not same(logged[key], finished[key]):
            found.add(
                f"accuracy {finished[key]!r} in results.json, {logged[key]!r} in the MLPerf log",
                *key,
            )
    _check_times(by_key, store, found)
    values = [e.get("value") for e in by_key.get("eval_accuracy", [])]
    best = (results.get("score") or {}).get("best_accuracy")
    if values and not same(values[-1], best):
        found.add(
            f"the log's last eval_accuracy {values[-1]!r} is not the score's best accuracy {best!r}"
        )


def _check_screenings(by_key: dict[str, list[dict[str, Any]]], store, found: Found) -> None:
    """Each proxy screening of the store is logged once, with its operations and its trial."""
    from aihpc.runner.screening import MLPERF_KEY

    logged = {(e.get("metadata") or {}).get("screening_id"): e for e in by_key.get(MLPERF_KEY, [])}
    stored = {sc["id"]: sc for sc in store.screenings()}
    for sid in sorted(set(stored) - set(logged), key=str):
        found.add(f"proxy screening {sid} is in the store but not in the MLPerf log")
    for sid in sorted(set(logged) - set(stored), key=str):
        found.add(f"proxy screening {sid} is in the MLPerf log but not in the store")
    for sid in sorted(set(stored) & set(logged)):
        event, row = logged[sid], stored[sid]
        trial = (event.get("metadata") or {}).get("trial_id")
        if event.get("value") != row["ops"] or trial != row["trial"]:
            found.add(
                f"proxy screening {sid}: the MLPerf log has {event.get('value')!r} operations for "
                "trial "
                f"{trial!r}, the store {row['ops']!r} for {row['trial']!r}"
            )


def _check_times(by_key: dict[str, list[dict[str, Any]]], store, found: Found) -> None:
    """Each logged epoch interval is its store row's (t_start, t_end), in whole milliseconds."""
    rows = {(e.trial_id, e.epoch): e for e in store.epochs() if e.status == "ok"}
    for key, field in (("epoch_start", "t_start"), ("epoch_stop", "t_end")):
        for event in by_key.get(key, []):
            meta = event.get("metadata") or {}
            row = rows.get((meta.get("trial_id"), meta.get("trial_epoch")))
            if row is not None and event.get("time_ms") != int(getattr(row, field) * 1000):
                found.add(
                    f"{key} at {event.get('time_ms')} ms in the MLPerf log; the store's {field} is "
                    f"{int(getattr(row, field) * 1000)} ms",
                    row.trial_id,
                    row.epoch,
                )


def _check_run(
    by_key: dict[str, list[dict[str, Any]]], store, results: dict[str, Any], found: Found
) -> None:
    data, score = results.get("data") or {}, results.get("score") or {}
    for key, field in (("train_samples", "num_train"), ("eval_samples", "num_val")):
        values = [e.get("value") for e in by_key.get(key, [])]
        if values != [data.get(field)]:
            found.add(f"{key} logged {values}, results.json's data has {field} {data.get(field)!r}")
    starts, stops = by_key.get("run_start", []), by_key.get("run_stop", [])
    if len(starts) != 1 or len(stops) != 1:
        found.add(
            f"{len(starts)} run_start and {len(stops)} run_stop events; a run logs one of each"
        )
        return
    status = (stops[0].get("metadata") or {}).get("status")
    if (status == "success") != bool(score.get("valid")):
        valid = "valid" if score.get("valid") else "invalid"
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
