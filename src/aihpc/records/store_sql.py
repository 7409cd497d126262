"""The run store's tables, the rows its digest chain covers, and the format number a resume checks.

(:mod:`aihpc.records.store` reads and writes them.)
"""

from __future__ import annotations

from aihpc.records.chain import RECORD_COLUMNS

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS segments (id INTEGER PRIMARY KEY, start REAL NOT NULL, stop REAL);
CREATE TABLE IF NOT EXISTS trials (
    id INTEGER PRIMARY KEY,
    parent INTEGER,
    arch_hash TEXT NOT NULL,
    arch TEXT NOT NULL,
    morph TEXT NOT NULL,
    hparams TEXT NOT NULL,
    hpo_number INTEGER,
    budget INTEGER NOT NULL,
    status TEXT NOT NULL,
    reason TEXT,
    num_params INTEGER,
    recipe TEXT,
    t_created REAL NOT NULL,
    t_end REAL,
    attempts INTEGER NOT NULL DEFAULT 0,
    traceback TEXT,
    lineage_start REAL,
    lineage_epochs INTEGER,
    hparams_origin TEXT
);
CREATE TABLE IF NOT EXISTS epochs (
    trial_id INTEGER NOT NULL,
    epoch INTEGER NOT NULL,
    status TEXT NOT NULL,
    worker TEXT NOT NULL,
    t_start REAL NOT NULL,
    t_end REAL NOT NULL,
    ops_train INTEGER NOT NULL,
    ops_eval INTEGER NOT NULL,
    metrics TEXT NOT NULL,
    phase_seconds TEXT NOT NULL,
    ops_per_sample TEXT NOT NULL,
    device TEXT NOT NULL,
    attempt INTEGER NOT NULL,
    weights TEXT,
    weights_digest TEXT,
    PRIMARY KEY (trial_id, epoch)
);
CREATE TABLE IF NOT EXISTS screenings (
    id INTEGER PRIMARY KEY,
    parent INTEGER NOT NULL,
    trial INTEGER,
    status TEXT NOT NULL,
    worker TEXT NOT NULL,
    t_start REAL NOT NULL,
    t_end REAL NOT NULL,
    batch INTEGER NOT NULL,
    ops INTEGER NOT NULL,
    chosen INTEGER,
    candidates TEXT NOT NULL,
    reason TEXT
);
CREATE TABLE IF NOT EXISTS timeline (t REAL NOT NULL, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS losses (
    t REAL NOT NULL,
    trial_id INTEGER NOT NULL,
    epoch INTEGER NOT NULL,
    attempt INTEGER NOT NULL,
    worker TEXT,
    address TEXT,
    reason TEXT NOT NULL,
    requeued INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS chain (
    seq INTEGER PRIMARY KEY,
    kind TEXT NOT NULL,
    key TEXT NOT NULL,
    record_sha256 TEXT NOT NULL,
    chain_sha256 TEXT NOT NULL
);
"""


def _insert(table: str, columns: tuple[str, ...], verb: str = "INSERT") -> str:
    """An INSERT into ``table`` that names its ``columns``, one parameter each."""
    marks = ", ".join("?" * len(columns))
    return f"{verb} INTO {table} ({', '.join(columns)}) VALUES ({marks})"


# The store's INSERTs; every column named, in the table's order
TRIAL_COLUMNS = (
    *("id", "parent", "arch_hash", "arch", "morph", "hparams", "hpo_number", "budget"),
    *("status", "num_params", "recipe", "t_created", "lineage_start", "lineage_epochs"),
    "hparams_origin",
)
EPOCH_COLUMNS = (
    *("trial_id", "epoch", "status", "worker", "t_start", "t_end", "ops_train", "ops_eval"),
    *("metrics", "phase_seconds", "ops_per_sample", "device", "attempt", "weights"),
    "weights_digest",
)
SCREENING_COLUMNS = (
    *("id", "parent", "trial", "status", "worker", "t_start", "t_end", "batch", "ops"),
    *("chosen", "candidates", "reason"),
)
LOSS_COLUMNS = ("t", "trial_id", "epoch", "attempt", "worker", "address", "reason", "requeued")
INSERT_META = _insert("meta", ("key", "value"), "INSERT OR REPLACE")
INSERT_TRIAL = _insert("trials", TRIAL_COLUMNS)
INSERT_EPOCH = _insert("epochs", EPOCH_COLUMNS, "INSERT OR REPLACE")
INSERT_SCREENING = _insert("screenings", SCREENING_COLUMNS)
INSERT_LOSS = _insert("losses", LOSS_COLUMNS)
INSERT_TIMELINE = _insert("timeline", ("t", "value"))

# kind of record -> (its table, the WHERE clause that finds its row)
RECORD_ROWS = {
    "trial": ("trials", "id = ?"),
    "finish": ("trials", "id = ?"),
    "attempt": ("trials", "id = ?"),
    "epoch": ("epochs", "trial_id = ? AND epoch = ?"),
    "screening": ("screenings", "id = ?"),
    "segment": ("segments", "id = ?"),
    "meta": ("meta", "key = ?"),
}
# kind of record -> the query that reads it back as stored (a primary-key lookup)
RECORD_SQL = {
    kind: f"SELECT {', '.join(RECORD_COLUMNS[kind])} FROM {table} WHERE {where}"  # noqa: S608 - constants
    for kind, (table, where) in RECORD_ROWS.items()
}

# The layout of the tables and the weight files; a run is resumed only by an
# aihpc that writes the same format (format 1 kept every trial's weights in
# one file, which the master wrote; format 2 had no digest chain; format 3 kept
# every trial's architecture in full, where format 4 keeps a child's as
# {"arch_diff": the edits of its parent's}, see aihpc.records.archdiff; format 4's trials lack
# lineage_start, lineage_epochs and hparams_origin, which a resumed search needs).
STORE_FORMAT = 5
