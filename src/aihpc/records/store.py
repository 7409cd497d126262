"""The master's run store: SQLite in the run directory, the master its only writer.

Every trial epoch is committed as it ends, so a crash loses nothing finished.
Model weights live beside the database in ``weights/``, written there by the
workers (:mod:`aihpc.train.weights`); each epoch's row keeps the name and
digest of the file it wrote, so a child can start from its parent's trained
weights and a resumed run can continue a trial from its last finished epoch.

Wall-clock accounting: each time a master runs it opens a *segment*
(start, stop).  The budget counts only the seconds segments ran; the score's
clock never stops — it runs from the first segment's start to the last one's
stop, so downtime of a killed master counts as time with no operations.

Integrity: every committed trial, epoch, segment and meta record also
appends a link to a SHA-256 digest chain, in the same transaction (see
:mod:`aihpc.records.chain`); ``aihpc verify`` checks the rows against it.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
from collections.abc import Iterator
from enum import StrEnum
from pathlib import Path
from typing import Any

from aihpc.base.errors import DataError, StorageError
from aihpc.records.archdiff import ArchBook, diff, patch
from aihpc.records.chain import GENESIS, RECORD_COLUMNS, chain_digest, record_digest
from aihpc.records.messages import EpochResult, Morph
from aihpc.records.meta import MetaKey, RunMeta
from aihpc.records.rows import (
    FINISHED,
    EpochRow,
    LostEpoch,
    NewTrial,
    ScreeningRow,
    TrialRow,
    TrialStatus,
)
from aihpc.records.store_sql import (
    INSERT_EPOCH,
    INSERT_LOSS,
    INSERT_META,
    INSERT_SCREENING,
    INSERT_TIMELINE,
    INSERT_TRIAL,
    LOSS_COLUMNS,
    RECORD_ROWS,
    RECORD_SQL,
    SCHEMA,
    STORE_FORMAT,
)
from aihpc.scoring.score import Segment

__all__ = ["STORE_FORMAT", "RunDirState", "RunStore", "read_meta", "run_dir_state"]


class RunStore:
    """The run directory's database and weight files."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = Path(run_dir)
        self.weights_dir = self.run_dir / "weights"
        try:
            self.weights_dir.mkdir(parents=True, exist_ok=True)
            self.db = sqlite3.connect(self.run_dir / "aihpc.sqlite", isolation_level=None)
            # WAL with synchronous=NORMAL: every committed write survives a crash
            # of the master (a power loss may lose the last ones); 10x fewer fsyncs.
            self.db.execute("PRAGMA journal_mode=WAL")
            self.db.execute("PRAGMA synchronous=NORMAL")
            self.db.executescript(SCHEMA)
        except (OSError, sqlite3.Error) as exc:
            raise StorageError(
                f"cannot write run directory {self.run_dir}: {_reason(exc)}"
            ) from None
        self.db.row_factory = sqlite3.Row
        self._head = self.chain_head()[0]

    @classmethod
    def read_only(cls, run_dir: Path) -> RunStore:
        """The store of ``run_dir`` opened for reading only: nothing in the directory changes.

        StorageError if it cannot be opened as an SQLite file (see :func:`read_meta`).
        """
        store = cls.__new__(cls)
        store.run_dir = Path(run_dir)
        store.weights_dir = store.run_dir / "weights"
        store.db = _open_read_only(store.run_dir / "aihpc.sqlite")
        store.db.row_factory = sqlite3.Row
        return store

    def close(self) -> None:
        self.db.close()

    # -- meta -------------------------------------------------------------------------
    def set_meta(self, key: MetaKey, value: object) -> None:
        """Keep ``value`` (as JSON) under ``key``, replacing what it held."""
        self._write(
            INSERT_META,
            (str(key), json.dumps(value, sort_keys=True)),
            link=("meta", (str(key),)),
        )

    def meta(self) -> RunMeta:
        """The run's metadata as it is now."""
        return _meta_of(self.db)

    # -- segments ---------------------------------------------------------------------
    def open_segment(self, start: float) -> int:
        segment = self._write(
            "INSERT INTO segments (start, stop) VALUES (?, ?)",
            (start, start),
            link=("segment", None),
        ).lastrowid
        assert segment is not None  # an INSERT's row id
        return segment

    def touch_segment(self, segment: int, now: float) -> None:
        self._write(
            "UPDATE segments SET stop = ? WHERE id = ?",
            (now, segment),
            link=("segment", (segment,)),
        )

    def segments(self) -> list[Segment]:
        return [
            Segment(start=r[0], stop=r[1])
            for r in self.db.execute("SELECT start, stop FROM segments ORDER BY id")
        ]

    # -- trials -----------------------------------------------------------------------
    def add_trial(self, trial: NewTrial) -> None:
        """Record a new trial, running; with ``parent_arch`` (its parent's architecture), its own
        is kept as the diff of that one."""
        base = trial.parent_arch
        arch = trial.arch if base is None else {"arch_diff": diff(trial.arch, base)}
        self._write(
            INSERT_TRIAL,
            (
                trial.id,
                trial.parent,
                trial.arch_hash,
                json.dumps(arch, sort_keys=True),
                trial.morph,
                json.dumps(trial.hparams.to_dict(), sort_keys=True),
                trial.hpo_number,
                trial.budget,
                str(TrialStatus.RUNNING),
                trial.num_params,
                _recipe_json(trial.recipe),
                trial.t_created,
                trial.lineage_start,
                trial.lineage_epochs,
                trial.hparams_origin,
            ),
            link=("trial", (trial.id,)),
        )

    def finish_trial(
        self,
        trial_id: int,
        status: TrialStatus,
        t_end: float,
        reason: str | None = None,
        traceback: str | None = None,
    ) -> None:
        """Close a trial; a failed one keeps its one-line ``reason`` and its full ``traceback``."""
        if status not in FINISHED:
            raise ValueError(f"unknown trial status {status!r}")
        self._write(
            "UPDATE trials SET status = ?, t_end = ?, reason = ?, traceback = ? WHERE id = ?",
            (str(status), t_end, reason, traceback, trial_id),
            link=("finish", (trial_id,)),
        )

    def add_attempt(self, trial_id: int) -> None:
        self._write(
            "UPDATE trials SET attempts = attempts + 1 WHERE id = ?",
            (trial_id,),
            link=("attempt", (trial_id,)),
        )

    def lineage_epochs(self) -> dict[int, int | None]:
        """Each trial's epochs trained along its lineage before its first, by id (None: a store
        from before lineages were kept); without reading its architecture."""
        columns = {r[1] for r in self.db.execute("PRAGMA table_info(trials)")}
        if "lineage_epochs" not in columns:  # a store of a format before 4
            return {int(r[0]): None for r in self.db.execute("SELECT id FROM trials")}
        return {
            int(r[0]): None if r[1] is None else int(r[1])
            for r in self.db.execute("SELECT id, lineage_epochs FROM trials")
        }

    def finish_order(self) -> list[int]:
        """The ids of the finished trials in the order they finished (their digest-chain links)."""
        return [
            int(r[0])
            for r in self.db.execute("SELECT key FROM chain WHERE kind = 'finish' ORDER BY seq")
        ]

    def trials(self) -> list[TrialRow]:
        """Every trial, by id (see :meth:`iter_trials`)."""
        return list(self.iter_trials())

    def iter_trials(self) -> Iterator[TrialRow]:
        """Every trial, by id, with its architecture in full and, for a child, as the diff of its
        parent's; a parent's is kept in memory only until its last child has been read."""
        book = ArchBook(
            (r[0], r[1]) for r in self.db.execute("SELECT id, parent FROM trials ORDER BY id")
        )
        for r in self.db.execute("SELECT * FROM trials ORDER BY id"):
            d = dict(r)
            arch, base = json.loads(d["arch"]), book.parent_arch(d["parent"])
            if "arch_diff" in arch:
                if base is None:
                    raise DataError(f"trial {d['id']}'s architecture is a diff of no parent")
                d["arch_diff"] = arch["arch_diff"]
                arch = patch(arch["arch_diff"], base)
            elif base is not None:  # a store from before diffs (format 3)
                d["arch_diff"] = diff(arch, base)
            d["arch"] = arch
            d["hparams"] = json.loads(d["hparams"])
            d["recipe"] = json.loads(d["recipe"]) if d["recipe"] is not None else None
            book.read(d["id"], d["parent"], arch)
            yield TrialRow.from_dict(d)

    # -- epochs -----------------------------------------------------------------------
    def add_epoch(self, result: EpochResult, attempt: int) -> None:
        """Record one finished epoch, its ``attempt``, with the reference to its weights."""
        weights = result.weights
        self._write(
            INSERT_EPOCH,
            (
                result.trial_id,
                result.epoch,
                str(result.status),
                result.worker,
                result.t_start,
                result.t_end,
                result.ops_train,
                result.ops_eval,
                json.dumps(result.metrics, sort_keys=True),
                json.dumps(result.phase_seconds, sort_keys=True),
                json.dumps(result.ops_per_sample, sort_keys=True),
                result.device,
                attempt,
                weights.name if weights else None,
                weights.digest if weights else None,
            ),
            link=("epoch", (result.trial_id, result.epoch)),
        )

    def epochs(self, trial_id: int | None = None) -> list[EpochRow]:
        """Epoch rows, by end time (of one trial: by epoch); ``weights`` a WeightsRef or None."""
        return list(self.iter_epochs(trial_id))

    def iter_epochs(self, trial_id: int | None = None) -> Iterator[EpochRow]:
        """:meth:`epochs` one row at a time, as they are needed: memory does not grow with the
        run."""
        query, args = "SELECT * FROM epochs ORDER BY t_end", tuple[int, ...]()
        if trial_id is not None:
            query, args = "SELECT * FROM epochs WHERE trial_id = ? ORDER BY epoch", (trial_id,)
        for r in self.db.execute(query, args):
            d = dict(r)
            for key in ("metrics", "phase_seconds", "ops_per_sample"):
                d[key] = json.loads(d[key])
            digest = d.pop("weights_digest")
            d["weights"] = (
                {"name": d["weights"], "digest": digest} if d["weights"] is not None else None
            )
            yield EpochRow.from_dict(d)

    def epoch_spans(self) -> Iterator[tuple[str, float]]:
        """Each epoch's worker and seconds, by trial and epoch, read as they are needed."""
        query = "SELECT worker, t_end - t_start FROM epochs ORDER BY trial_id, epoch"
        yield from self.db.execute(query)

    def status_counts(self) -> dict[str, int]:
        """How many trials are in each state (a :class:`TrialStatus` value)."""
        query = "SELECT status, COUNT(*) FROM trials GROUP BY status"
        return {str(status): int(n) for status, n in self.db.execute(query)}

    def total_ops(self) -> int:
        """Operations of every epoch and every proxy screening: the score's numerator."""
        epochs = self.db.execute(
            "SELECT COALESCE(SUM(ops_train + ops_eval), 0) FROM epochs"
        ).fetchone()[0]
        if not self._has_table("screenings"):
            return int(epochs)
        return int(epochs) + int(
            self.db.execute("SELECT COALESCE(SUM(ops), 0) FROM screenings").fetchone()[0]
        )

    # -- proxy screenings -------------------------------------------------------------
    def add_screening(self, row: ScreeningRow) -> None:
        """Record one screening: its candidates (architecture, hash, morphs, prediction, proxies,
        operations), which was chosen and the trial it became (None: none was started)."""
        self._write(
            INSERT_SCREENING,
            (
                row.id,
                row.parent,
                row.trial,
                str(row.status),
                row.worker,
                row.t_start,
                row.t_end,
                row.batch,
                row.ops,
                row.chosen,
                json.dumps([c.to_dict() for c in row.candidates], sort_keys=True),
                row.reason,
            ),
            link=("screening", (row.id,)),
        )

    def screenings(self) -> list[ScreeningRow]:
        """Screenings by id; none in a store written before screening existed."""
        if not self._has_table("screenings"):
            return []
        return [
            ScreeningRow.from_dict({**dict(r), "candidates": json.loads(r["candidates"])})
            for r in self.db.execute("SELECT * FROM screenings ORDER BY id")
        ]

    # -- lost epochs ------------------------------------------------------------------
    def add_loss(self, loss: LostEpoch) -> None:
        """Record an epoch lost with its worker.  Not a link of the digest chain: the attempt it
        cost is (:meth:`add_attempt`), and a loss adds no operations to the score."""
        row = loss.to_dict()
        self._write(INSERT_LOSS, tuple(row[column] for column in LOSS_COLUMNS))

    def losses(self) -> list[LostEpoch]:
        """Lost epochs, oldest first; none in a store written before they were recorded."""
        if not self._has_table("losses"):
            return []
        return [
            LostEpoch.from_dict(dict(r)) for r in self.db.execute("SELECT * FROM losses ORDER BY t")
        ]

    # -- timeline ---------------------------------------------------------------------
    def add_timeline(self, t: float, value: dict[str, Any]) -> None:
        self._write(INSERT_TIMELINE, (t, json.dumps(value, sort_keys=True)))

    def timeline(self) -> list[dict[str, Any]]:
        query = "SELECT value FROM timeline ORDER BY t"
        return [dict(json.loads(r[0])) for r in self.db.execute(query)]

    # -- digest chain -----------------------------------------------------------------
    def chain_head(self) -> tuple[str, int]:
        """The chain's last value and its number of links (GENESIS and 0 for none, or a store older
        than the chain)."""
        if not self._has_table("chain"):
            return GENESIS, 0
        row = self.db.execute(
            "SELECT chain_sha256, seq FROM chain ORDER BY seq DESC LIMIT 1"
        ).fetchone()
        return (row[0], int(row[1])) if row else (GENESIS, 0)

    def chain(self) -> list[dict[str, Any]]:
        return [dict(r) for r in self.db.execute("SELECT * FROM chain ORDER BY seq")]

    def raw_rows(self, table: str) -> list[dict[str, Any]]:
        """Every row of ``table`` exactly as stored (JSON columns as text), for the chain's
        checks."""
        if table not in {t for t, _ in RECORD_ROWS.values()}:
            raise ValueError(f"no chained table {table!r}")
        if not self._has_table(table):
            return []  # a table newer than the store (screenings)
        return [dict(r) for r in self.db.execute(f"SELECT * FROM {table}")]  # noqa: S608 - checked name

    # -- internals --------------------------------------------------------------------
    def _has_table(self, name: str) -> bool:
        """Whether the store has table ``name`` (a store written by an older aihpc may lack newer
        ones)."""
        return (
            self.db.execute(
                "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (name,)
            ).fetchone()
            is not None
        )

    def _write(
        self,
        sql: str,
        args: tuple[object, ...],
        link: tuple[str, tuple[object, ...] | None] | None = None,
    ) -> sqlite3.Cursor:
        """Execute one write; with ``link`` (kind, key of the row; None: the row just inserted),
        append the row's link to the digest chain in the same transaction."""
        try:
            if link is None:
                return self.db.execute(sql, args)
            self.db.execute("BEGIN IMMEDIATE")
            try:
                cursor = self.db.execute(sql, args)
                head = self._link(link[0], link[1] if link[1] is not None else (cursor.lastrowid,))
                self.db.execute("COMMIT")
            except BaseException:
                # SQLite has already rolled back after some errors (a full disk)
                if self.db.in_transaction:
                    with contextlib.suppress(sqlite3.Error):
                        self.db.execute("ROLLBACK")
                raise
            self._head = head
            return cursor
        except sqlite3.OperationalError as exc:
            raise StorageError(
                f"cannot write run store {self.run_dir / 'aihpc.sqlite'}: {exc}"
            ) from None

    def _link(self, kind: str, key: tuple[object, ...]) -> str:
        """Append the link of the ``kind`` record whose row ``key`` finds, as it now is; returns the
        new head."""
        row = self.db.execute(RECORD_SQL[kind], key).fetchone()
        record = record_digest(kind, dict(zip(RECORD_COLUMNS[kind], row, strict=True)))
        head = chain_digest(self._head, record)
        self.db.execute(
            "INSERT INTO chain (kind, key, record_sha256, chain_sha256) VALUES (?, ?, ?, ?)",
            (kind, "/".join(str(k) for k in key), record, head),
        )
        return head


def _recipe_json(recipe: Morph | None) -> str | None:
    """A child's morph recipe, without the parent's architecture (the parent's row holds it)."""
    if recipe is None:
        return None
    weights = recipe.parent_weights
    fields = {
        "parent_weights": {"name": weights.name, "digest": weights.digest} if weights else None,
        "parent_seed": recipe.parent_seed,
        "seed": recipe.seed,
        "steps": recipe.steps,
        "max_params": recipe.max_params,
    }
    return json.dumps(fields, sort_keys=True)


def _reason(exc: Exception) -> str:
    return getattr(exc, "strerror", None) or str(exc)


def _meta_of(con: sqlite3.Connection) -> RunMeta:
    """The metadata of the store open in ``con``."""
    return RunMeta.from_dict(
        {key: json.loads(value) for key, value in con.execute("SELECT key, value FROM meta")}
    )


def read_meta(db: Path) -> RunMeta:
    """The metadata of the store ``db``, read without writing anything.

    StorageError if the file cannot be opened as an aihpc store.  A store
    closed cleanly has no write-ahead log, and is opened as immutable so that
    reading it creates no ``-wal``/``-shm`` files beside it; one whose master
    was killed is read through its existing log.
    """
    try:
        with contextlib.closing(_open_read_only(db)) as con:
            return _meta_of(con)
    except sqlite3.Error as exc:
        raise StorageError(f"cannot read run store {db}: {exc}") from None


def _open_read_only(db: Path) -> sqlite3.Connection:
    """``db`` opened read-only (immutable when it has no write-ahead log, so no files appear beside
    it)."""
    immutable = "&immutable=1" if not Path(f"{db}-wal").exists() else ""
    try:
        con = sqlite3.connect(f"file:{db}?mode=ro{immutable}", uri=True)
        con.execute("SELECT 1 FROM sqlite_master LIMIT 1")  # a file that is not SQLite fails here
        return con
    except sqlite3.Error as exc:
        raise StorageError(f"cannot read run store {db}: {exc}") from None


class RunDirState(StrEnum):
    """What a run directory holds (:func:`run_dir_state`)."""

    NEW = "new"  # nothing: absent or empty
    RUN = "run"  # a run store
    OTHER = "other"  # something else


def run_dir_state(run_dir: Path) -> RunDirState:
    """What ``run_dir`` holds."""
    if not run_dir.exists() or (run_dir.is_dir() and not any(run_dir.iterdir())):
        return RunDirState.NEW
    if (run_dir / "aihpc.sqlite").exists():
        return RunDirState.RUN
    return RunDirState.OTHER
