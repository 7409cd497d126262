"""The integrity check of ``aihpc verify``: the run store's rows against its digest chain.

See :mod:`aihpc.records.chain` for how the chain is written and what it proves.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from aihpc.records.chain import GENESIS, chain_digest, record_digest, record_key
from aihpc.records.rows import TrialStatus
from aihpc.results.model import RunHead
from aihpc.verify.checks import Check, Found, Mismatch

if TYPE_CHECKING:
    from aihpc.records.store import RunStore

CHAIN_FORMAT = 3  # the first store format with a digest chain
AFTER_RESULTS = {("meta", "finished")}  # the links a run commits after writing results.json


def check_chain(
    store: RunStore, results: RunHead[Any], log_path: Path
) -> tuple[Check, list[Mismatch]]:
    """Rows against the last link of their key; the chain continuous; its head where the run wrote
    it."""
    found = Found("integrity")
    store_format = store.meta().store_format or 1
    if store_format < CHAIN_FORMAT:
        return Check(
            "integrity",
            "unchecked",
            f"no digest chain (store format {store_format}): integrity not checked",
        ), []
    links = store.chain()
    _check_continuity(links, found)
    last = {(link["kind"], link["key"]): link for link in links}
    rows = _records(store)
    for (kind, key), digest in rows.items():
        link = last.get((kind, key))
        if link is None:
            found.add(
                f"{_describe(kind, key)} has no link in the digest chain: added after the run",
                *_where(kind, key),
            )
        elif link["record_sha256"] != digest:
            found.add(
                f"{_describe(kind, key)} differs from the record committed during the run",
                *_where(kind, key),
            )
    for kind, key in sorted(set(last) - set(rows)):
        found.add(
            f"{_describe(kind, key)} was committed during the run and has been deleted",
            *_where(kind, key),
        )
    _check_head(links, results, log_path, found)
    head = links[-1]["chain_sha256"] if links else GENESIS
    return found.outcome(
        f"{len(rows)} records against a chain of {len(links)} links, head {head[:16]}"
    ), found.items


def _check_continuity(links: list[dict[str, Any]], found: Found) -> None:
    previous = GENESIS
    for number, link in enumerate(links, start=1):
        if (
            link["seq"] != number
            or chain_digest(previous, link["record_sha256"]) != link["chain_sha256"]
        ):
            found.add(
                f"the chain breaks at link {number} ({link['kind']} {link['key']}): "
                "links were edited, removed or reordered"
            )
            return
        previous = link["chain_sha256"]


def _records(store: RunStore) -> dict[tuple[str, str], str]:
    """(kind, key) -> record digest of every chained row as it is now."""
    out: dict[tuple[str, str], str] = {}

    def put(kind: str, row: dict[str, Any]) -> None:
        out[(kind, record_key(kind, row))] = record_digest(kind, row)

    for row in store.raw_rows("trials"):
        put("trial", row)
        if row["status"] != TrialStatus.RUNNING:
            put("finish", row)
        if row["attempts"]:
            put("attempt", row)
    for kind, table in (
        ("epoch", "epochs"),
        ("screening", "screenings"),
        ("segment", "segments"),
        ("meta", "meta"),
    ):
        for row in store.raw_rows(table):
            put(kind, row)
    return out


def _check_head(
    links: list[dict[str, Any]], results: RunHead[Any], log_path: Path, found: Found
) -> None:
    """The head results.json (and the MLPerf log's run_stop) recorded is a link of the chain, and
    only
    the links a run commits after its results follow it."""
    from aihpc.mlperf.check import iter_events

    recorded = results.integrity
    if recorded is None:
        found.add("results.json records no chain head (integrity section missing)")
        return
    n, head = recorded.links, recorded.chain_sha256
    if not 0 <= n <= len(links) or (links[n - 1]["chain_sha256"] if n else GENESIS) != head:
        found.add(
            f"results.json records chain head {str(head)[:16]} at link {n}; the store's chain "
            f"({len(links)} links) does not hold it there: links were removed or rewritten"
        )
        return
    later = {(link["kind"], link["key"]) for link in links[n:]}
    if later - AFTER_RESULTS:
        extra = ", ".join(f"{k} {key}" for k, key in sorted(later - AFTER_RESULTS))
        found.add(f"records were committed after results.json was written: {extra}")
    if log_path.is_file():
        stops = [
            e for _, e in iter_events(log_path, "run_stop") if e and e.get("key") == "run_stop"
        ]
        logged = (stops[-1].get("metadata") or {}).get("chain_sha256") if stops else None
        if logged != head:
            found.add(
                f"the MLPerf log's run_stop records chain head {str(logged)[:16]}, results.json "
                f"{head[:16]}"
            )


def _describe(kind: str, key: str) -> str:
    return {
        "trial": "its trial record",
        "finish": "its finish record (status, end)",
        "attempt": "its lost-attempt count",
        "epoch": "its epoch record",
        "screening": f"proxy screening {key}",
        "segment": f"segment {key}",
        "meta": f"meta value {key!r}",
    }[kind]


def _where(kind: str, key: str) -> tuple[int | None, int | None]:
    if kind in ("trial", "finish", "attempt"):
        return int(key), None
    if kind == "epoch":
        trial, epoch = key.split("/")
        return int(trial), int(epoch)
    return None, None
