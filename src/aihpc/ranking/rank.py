"""``aihpc rank``: a ranked list of machines from result files, like a TOP500 list for AI.

Every run directory (results.json) and every result file with a score under
a directory is one entry, ranked by its score.  Beside the score stands
HPC AI500's *Valid FLOPS*, which discounts a score reached at a quality
below the target (Jiang et al., "HPC AI500 V2.0: The Methodology, Tools,
and Metrics for Benchmarking HPC AI Systems", IEEE CLUSTER 2021)::

    Valid FLOPS = FLOPS × penalty,
    penalty = (achieved quality / target quality)^n  if achieved < target, else 1

with n = 5 for image classification (the quality is top-1 accuracy).  The
target is each run's own ``min_accuracy`` unless one target is given for
the whole list.  For language models (the quality is a validation loss,
lower is better) the penalty is (target loss / achieved loss)^5 above the
target, the run's ``max_val_loss`` (or ``--target``, a loss).  Each entry
also shows whether ``aihpc verify`` passed on it (yes), found mismatches
(no), or could not check it (unchecked: a lone result file, or a run whose
store has no digest chain); a verdict that
``aihpc verify`` recorded on the same bytes is shown without checking again
(:mod:`aihpc.verify.verdicts`).

Entries of different kinds, workloads or schema versions cannot share a
list (refused, as in ``aihpc compare``); different data sets and budgets are
what a list compares, and are shown in their columns.  Inference results
(``infer.json`` of ``aihpc infer``) are ranked in a list of their own, one
per model, scenario and bound, by the server's highest rate within its
latency bound (else the offline rate): see :mod:`aihpc.ranking.compare`.  Valid FLOPS
does not apply to them (n/a); their "verified" is ``aihpc verify``'s on the
folder holding infer.json.  Results whose tests were shorter than MLPerf's 600 s
(*short tests*: LoadGen's verdict on them is not a submission's, and a queue
growing too slowly for them to see can still miss the bound over 600 s) are
ranked apart from full ones: full tests first, each group ranked from 1.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from aihpc.base.errors import AihpcError, DataError
from aihpc.ranking.compare import (
    SCORED_KINDS,
    Entry,
    check_like_for_like,
    energy_cells,
    energy_notes,
    load_entry,
    peak_cells,
    quality_cell,
    score_text,
)
from aihpc.records.inference import INFER_FILE
from aihpc.results.read import COMPRESSED_RESULTS_FILE, RESULTS_FILES

VALID_FLOPS_EXPONENT = 5  # HPC AI500's n for image classification
#: The groups of an inference list (:func:`group_of`), in the order listed.
FULL_TESTS = "full tests (MLPerf's 600 s a test or more)"
SHORT_TESTS = "short tests (under MLPerf's 600 s a test: not a submission's verdict)"
COLUMNS = (
    "rank",
    "result",
    "machine",
    "config",
    "data set",
    "budget",
    "score",
    "Valid FLOPS",
    "error",
    "share of peak",
    "of nominal",
    "verified",
    "energy",
    "power",
    "GOPS/W",
)


def valid_flops(
    flops: float | None, achieved: float | None, target: float | None, n: int = VALID_FLOPS_EXPONENT
) -> float | None:
    """HPC AI500's Valid FLOPS (see the module docstring); None where the score is unknown."""
    if flops is None:
        return None
    if target is None or target <= 0 or (achieved is not None and achieved >= target):
        return flops
    return flops * (max(achieved or 0.0, 0.0) / target) ** n


@dataclass(frozen=True)
class RankRow:
    rank: int
    entry: Entry
    valid_flops: float | None
    target: float | None
    verified: str  # yes, no or unchecked
    group: str = ""  # an inference list's group (FULL_TESTS or SHORT_TESTS); "" for runs


def group_of(entry: Entry) -> str:
    """The group an entry is ranked in: full or short tests for inference results, else ""."""
    if entry.kind != "infer":
        return ""
    return SHORT_TESTS if entry.short_test else FULL_TESTS


def find_results(directory: Path, kind: str = "run") -> tuple[list[Path], list[Path]]:
    """(files of ``kind`` with a score, JSON files skipped) under ``directory``: a folder of
    runs lists their results.json, and their inference results (``infer/infer.json``) only
    with ``kind="infer"``."""
    import json

    if not directory.is_dir():
        raise DataError(f"not a directory: {directory}")
    found: list[Path] = []
    skipped: list[Path] = []
    for path in sorted([*directory.rglob("*.json"), *directory.rglob(COMPRESSED_RESULTS_FILE)]):
        if path.name in RESULTS_FILES:
            (found if kind == "run" else skipped).append(path)
            continue
        try:
            found_kind = json.loads(path.read_text(encoding="utf-8")).get("kind")
        except (OSError, UnicodeDecodeError, ValueError, AttributeError):
            found_kind = None
        (found if found_kind == kind else skipped).append(path)
    return found, skipped


def build_ranking(
    directory: Path, verify: bool = True, target: float | None = None, kind: str = "run"
) -> tuple[list[RankRow], list[Path]]:
    """The ranked rows of every result of ``kind`` under ``directory``, best first; and the
    files skipped."""
    paths, skipped = find_results(Path(directory), kind)
    if not paths:
        what = "no results.json, no result file with a score"
        if kind != "run":
            what = f"no result file of kind {kind!r}"
        raise DataError(f"no results under {directory} ({what})")
    entries = [load_entry(p) for p in paths]
    check_like_for_like(entries)
    scored_kind = SCORED_KINDS[entries[0].kind]
    scored = sorted(
        entries,
        key=lambda e: (
            group_of(e) == SHORT_TESTS,  # full tests first
            e.metric() is None,
            -(e.metric() or 0) if scored_kind.higher_is_better else (e.metric() or 0),
        ),
    )
    rows: list[RankRow] = []
    for e in scored:
        group = group_of(e)
        number = 1 + sum(row.group == group for row in rows)  # ranked within its group
        if SCORED_KINDS[e.kind].unit != "OPS":  # Valid FLOPS discounts operations only
            flops, goal = None, None
        elif e.best_val_loss is not None:  # a language model's loss: lower is better
            goal = target if target is not None else e.max_val_loss
            inverse = None if goal is None else 1.0 / goal
            flops = valid_flops(e.score, 1.0 / e.best_val_loss, inverse)
        else:
            goal = target if target is not None else e.target_accuracy
            flops = valid_flops(e.score, e.best_accuracy, goal)
        verified = verification(Path(e.source)) if verify else "unchecked"
        rows.append(RankRow(number, e, flops, goal, verified, group))
    return rows, skipped


def verification(path: Path) -> str:
    """yes / no / unchecked: ``aihpc verify`` on the run directory holding ``path``, or the verdict
    it recorded on the same bytes (:mod:`aihpc.verify.verdicts`)."""
    from aihpc.verify import verdicts

    is_run = path.name in RESULTS_FILES and (path.parent / "aihpc.sqlite").is_file()
    if not is_run and path.name != INFER_FILE:
        return "unchecked"
    key = verdicts.fingerprint(path.parent)
    status = verdicts.recorded(key)
    if status is not None:
        return status
    try:
        return verdicts.verify_and_record(path.parent, key).status
    except AihpcError:
        return "no"


def cells(row: RankRow, directory: Path) -> list[str]:
    from aihpc.base.fmt import format_si

    e = row.entry
    source = Path(e.source)
    if source.name in (*RESULTS_FILES, INFER_FILE):
        source = source.parent  # a run, an inference result, by its directory
    name = str(source.relative_to(directory)) if source.is_relative_to(directory) else str(source)
    return [
        str(row.rank),
        name,
        e.machine,
        e.config,
        e.dataset,
        e.budget,
        score_text(e.kind, e.score),
        format_si(row.valid_flops, "OPS"),
        quality_cell(e),
        *peak_cells(e),
        row.verified,
        *energy_cells(e),
    ]


def notes(target: float | None, rows: Sequence[RankRow] = ()) -> list[str]:
    goal = f"{target:g} for every entry" if target is not None else "each run's min_accuracy"
    energy = energy_notes([row.entry for row in rows], label="rank ")
    if rows and rows[0].entry.kind == "infer":
        return energy + INFER_NOTES
    return energy + [
        "score: operations per second over the whole run (AIPerf); error: 100 - best validation "
        "accuracy in %.",
        "Valid FLOPS (HPC AI500, Jiang et al. 2021): score x (best accuracy / "
        f"target)^{VALID_FLOPS_EXPONENT} "
        f"where the accuracy is below the target, else the score; target: {goal}.",
        "verified: yes = `aihpc verify` passed, now or on the same bytes before (its recorded "
        "verdict); no = it found mismatches; unchecked = not a run directory, or a run store "
        "without a digest chain.",
        "energy: joules measured over the run (NVML per GPU, RAPL per CPU package and DRAM) and "
        "their average "
        "power; GOPS/W: operations per joule / 1e9, given only when every device that trained was "
        "measured.",
    ]


INFER_NOTES = [
    "score: the highest rate of queries per second (one sample each) that met the server's "
    "latency bound under MLPerf LoadGen (the workload names the bound), else the offline "
    "samples per second; error (or val loss): the quality served; Valid FLOPS: n/a.",
    "share of peak: the offline rate's operations per second against the device's measured "
    "(and nominal) peak in the served dtype.",
    "verified: yes = `aihpc verify` passed on the folder of infer.json (LoadGen's logs, the "
    "figures, the operations recounted, the quality measured again); no = it found "
    "mismatches; unchecked = a check could not run (the served run not found).",
    "energy, power, GOPS/W: of the offline test, where every device was metered.",
    "full and short tests are ranked apart: a test shorter than MLPerf's 600 s (its budget says "
    "short test) is LoadGen's verdict on that time only; `aihpc infer --seconds 600` runs "
    "MLPerf's.",
]


def columns(rows: Sequence[RankRow]) -> tuple[str, ...]:
    """The list's columns: :data:`COLUMNS`, with "val loss" for "error" in a list of language
    models."""
    if rows and rows[0].entry.best_val_loss is not None:
        return tuple("val loss" if c == "error" else c for c in COLUMNS)
    return COLUMNS


def groups(rows: list[RankRow]) -> list[tuple[str, list[RankRow]]]:
    """The rows by group, in the order listed (one group, "", for training runs)."""
    found: dict[str, list[RankRow]] = {}
    for row in rows:
        found.setdefault(row.group, []).append(row)
    return list(found.items())


def to_markdown(rows: list[RankRow], directory: Path, target: float | None) -> str:
    lines = [f"# aihpc rank: {len(rows)} results under {directory}"]
    for group, members in groups(rows):
        lines += ["", f"## {group[0].upper() + group[1:]}", ""] if group else [""]
        lines += [
            "| " + " | ".join(columns(rows)) + " |",
            "|" + "|".join("---" for _ in columns(rows)) + "|",
        ]
        for row in members:
            text = (c.replace("|", "\\|") for c in cells(row, directory))
            lines.append("| " + " | ".join(text) + " |")
    lines += [""] + [f"- {n}" for n in notes(target, rows)]
    return "\n".join(lines)


def to_html(rows: list[RankRow], directory: Path, target: float | None) -> str:
    """A self-contained HTML page of the list (inline CSS, no external references)."""
    head = "".join(f"<th>{html.escape(c)}</th>" for c in columns(rows))
    tables = []
    for group, members in groups(rows):
        body = "\n".join(
            "<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in cells(row, directory)) + "</tr>"
            for row in members
        )
        heading = f"<h2>{html.escape(group[0].upper() + group[1:])}</h2>\n" if group else ""
        tables.append(
            f"{heading}<table><thead><tr>{head}</tr></thead><tbody>\n{body}\n</tbody></table>"
        )
    items = "".join(f"<li>{html.escape(n)}</li>" for n in notes(target, rows))
    title = html.escape(f"aihpc rank: {len(rows)} results under {directory}")
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{title}</title><style>"
        "body{font-family:system-ui,sans-serif;margin:2em}table{border-collapse:collapse}"
        "th,td{border:1px solid #ccc;padding:4px 8px;text-align:left}th{background:#eee}"
        "</style></head><body>"
        f"<h1>{title}</h1>\n{''.join(tables)}"
        f"<ul>{items}</ul></body></html>\n"
    )
