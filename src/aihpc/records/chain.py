"""The run store's digest chain: evidence that nothing was altered after the run.

As the master commits a record to the store — a trial proposed, a trial
finished, an attempt lost, an epoch's result, a proxy screening, a wall-clock
segment, a meta value — the store also appends one *link* in the same transaction::

    record_sha256 = SHA-256(canonical JSON of the record, exactly as stored)
    chain_sha256  = SHA-256(previous chain_sha256 + record_sha256)   (hex strings; the first
                                                                     link's previous is GENESIS)

A link names what it covers (``kind`` and ``key``, e.g. ``epoch`` ``3/2``:
trial 3, epoch 2).  ``aihpc verify`` (:mod:`aihpc.verify.recount`) rebuilds
each record from the rows as they are now, and the chain from the links:

- an edited row no longer hashes to its link's ``record_sha256``;
- a deleted row leaves a link without a row, an added row a row without a link;
- an edited, removed or reordered link breaks the chain from there on;
- removing the last links (with their rows) changes the chain's head, which
  the run also writes into results.json and the MLPerf log.

A row may legitimately be rewritten during the run (a segment's stop moves
every second; an epoch may be replaced): each rewrite adds a link, and the
row must match the *last* link of its key.  What the chain cannot do is stop
someone who edits a row, recomputes every later link and rewrites the head
in both files: there is no secret in it.  Publishing the head (it is printed
in results.json) closes that gap for whoever keeps a copy.

The timeline (the live-view samples) is not chained: nothing is computed
from it.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

GENESIS = "0" * 64
"""The chain value before the first link."""

# kind -> the columns of the record, in the table they come from.
RECORD_COLUMNS: dict[str, tuple[str, ...]] = {
    "trial": (
        "id",
        "parent",
        "arch_hash",
        "arch",
        "morph",
        "hparams",
        "hpo_number",
        "budget",
        "num_params",
        "recipe",
        "t_created",
        "lineage_start",
        "lineage_epochs",
        "hparams_origin",
    ),
    "finish": ("id", "status", "t_end", "reason", "traceback"),
    "attempt": ("id", "attempts"),
    "epoch": (
        "trial_id",
        "epoch",
        "status",
        "worker",
        "t_start",
        "t_end",
        "ops_train",
        "ops_eval",
        "metrics",
        "phase_seconds",
        "ops_per_sample",
        "device",
        "attempt",
        "weights",
        "weights_digest",
    ),
    "screening": (
        "id",
        "parent",
        "trial",
        "status",
        "worker",
        "t_start",
        "t_end",
        "batch",
        "ops",
        "chosen",
        "candidates",
        "reason",
    ),
    "segment": ("id", "start", "stop"),
    "meta": ("key", "value"),
}


def record_key(kind: str, record: dict[str, Any]) -> str:
    """Which row a record is: a trial id, ``trial/epoch``, a segment id or a meta key."""
    if kind == "epoch":
        return f"{record['trial_id']}/{record['epoch']}"
    if kind == "meta":
        return str(record["key"])
    return str(record["id"])


def record_digest(kind: str, row: dict[str, Any]) -> str:
    """SHA-256 of the record's canonical JSON: its columns (see RECORD_COLUMNS), keys sorted, no
    spaces.

    Values are those stored: JSON columns as their stored text, numbers as
    SQLite returns them (a float survives JSON exactly: ``repr`` round-trips).
    A column the row lacks is left out: a store of an older format, written
    before the column was added, linked its records without it (a store that
    has the column linked it, so one dropped later no longer matches).
    """
    record = {column: row[column] for column in RECORD_COLUMNS[kind] if column in row}
    text = json.dumps([kind, record], sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def chain_digest(previous: str, record_sha256: str) -> str:
    """The next chain value: SHA-256 over the previous value and the record's digest (hex text)."""
    return hashlib.sha256(f"{previous}{record_sha256}".encode("ascii")).hexdigest()
