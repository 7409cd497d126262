"""results.json read back: one reader for every version, and the typed record of a run's result.

:func:`read_results_document` parses results.json whole: it checks the
version and the shape of each section, and upgrades an older version to the
current one (version 1 called a trial's parameter count ``params``).
:func:`read_results_head` and :func:`iter_trials` read a file in schema 3's
layout (a line per field and per trial) without holding its trials.  The
report renders the document as it is, tolerating what is absent; ``aihpc
verify`` compares it, trial by trial, with the one rebuilt from the store.

:class:`RunResults` is the run's result as a record, for the code that
computes with it (the end-of-run summary, compare, rank, scaling): the score
with its trial tallies, the workers' busy time, the environment and the
peak.  The per-trial, timeline and screening sections stay JSON: they are
records of the store (:mod:`aihpc.records.rows`) laid out for reading, and
only the report and ``aihpc verify`` read them.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aihpc.base.checks import is_integer
from aihpc.base.errors import DataError, StorageError
from aihpc.base.fileio import open_binary, read_json
from aihpc.machine.environment import Environment
from aihpc.nas.helper_restart import HelperRestart
from aihpc.records.archdiff import patch
from aihpc.records.rows import LostEpoch
from aihpc.scoring.peak import RunPeak, current_run_peak
from aihpc.scoring.score import Score

#: A run's results, and the name they take when written compressed (see
#: :func:`aihpc.results.write.write_results`).
RESULTS_FILE, COMPRESSED_RESULTS_FILE = "results.json", "results.json.gz"
RESULTS_FILES = (RESULTS_FILE, COMPRESSED_RESULTS_FILE)


def results_file(run_dir: Path) -> Path:
    """The run's results file: ``results.json``, or ``results.json.gz`` where a large run wrote
    that instead (``results.json``'s path where neither exists, for the error that follows)."""
    compressed = Path(run_dir) / COMPRESSED_RESULTS_FILE
    plain = Path(run_dir) / RESULTS_FILE
    return compressed if compressed.is_file() and not plain.is_file() else plain


#: The ``schema_version`` values of results.json that this aihpc reads.
READ_VERSIONS = (1, 2, 3)

# top-level key -> the JSON type it must have when present
_SHAPES: dict[str, type] = {
    "config": dict,
    "environment": dict,
    "peak": dict,
    "score": dict,
    "timeline": list,
    "workers": list,
    "trials": list,
    "segments": list,
    "losses": list,
    "helper_restarts": list,
    "worker_memory": dict,
}


def read_results_document(path: Path) -> dict[str, Any]:
    """results.json parsed, checked and upgraded to the current schema.

    DataError (one line, naming the path or the version) when the file is
    missing, is not valid JSON, is not a JSON object, has a ``schema_version``
    this aihpc does not read, or a section has the wrong type (``trials`` not
    a list, a trial not an object); StorageError when it cannot be read.
    """
    path = Path(path)
    results = _read_object(path)
    _check_version(results, path)
    _check_shapes(results, path)
    for index, trial in enumerate(results.get("trials") or []):
        if not isinstance(trial, dict):
            raise DataError(
                f"results trials[{index}] must be a JSON object, got {type(trial).__name__}: {path}"
            )
    return upgrade(results)


def _read_object(path: Path) -> dict[str, Any]:
    """The JSON object in ``path``, parsed whole."""
    results = read_json(path, "results file")
    if not isinstance(results, dict):
        raise DataError(
            f"results file must hold a JSON object, got {type(results).__name__}: {path}"
        )
    return results


def _check_version(results: dict[str, Any], path: Path) -> None:
    version = results.get("schema_version")
    if isinstance(version, bool) or version not in READ_VERSIONS:
        supported = ", ".join(str(v) for v in READ_VERSIONS)
        raise DataError(
            f"unsupported results schema_version {version!r} in {path} (supported: {supported})"
        )


def _check_shapes(results: dict[str, Any], path: Path) -> None:
    for key, kind in _SHAPES.items():
        value = results.get(key)
        if value is not None and not isinstance(value, kind):
            raise DataError(
                f"results field {key!r} must be a JSON {'object' if kind is dict else 'array'}, "
                f"got {type(value).__name__}: {path}"
            )


#: The per-trial section that :func:`read_results_head` leaves unparsed.
TRIALS = "trials"


def read_results_head(path: Path) -> dict[str, Any]:
    """results.json without its trials (``trials`` is an empty list), checked as by
    :func:`read_results_document` but not upgraded (``schema_version`` as written, which
    ``aihpc compare`` holds alike): what ``aihpc rank`` and ``aihpc compare`` read.

    A file laid out by schema 3 (a line per top-level field and per trial)
    is read line by line and its trials skipped unparsed, so the time and
    memory do not grow with the run; an older file is parsed whole.
    """
    path = Path(path)
    if not laid_out_by_line(path):
        return {**_read_object(path), TRIALS: []}
    head = _read_head_lines(path)
    _check_version(head, path)
    _check_shapes(head, path)
    return head


def iter_trials(path: Path, only: set[Any] | None = None) -> Iterator[dict[str, Any]]:
    """The trials of the results file at ``path``, one at a time, by its order; with ``only``,
    just those ids.  A file in schema 3's layout is read a line at a time (the lines of trials
    not in ``only`` are not parsed), so memory does not grow with the run; an older file is
    parsed whole, as :func:`read_results_document` reads it.  DataError for a trial that is not
    JSON."""
    if not laid_out_by_line(path):
        trials = read_results_document(path).get(TRIALS) or []
        yield from (t for t in trials if only is None or t.get("id") in only)
        return
    with open_binary(path) as lines:
        for line in lines:
            if line.startswith(b'"trials":['):
                break
        for line in lines:
            if line.startswith(b"]"):
                return
            if only is not None and _line_id(line) not in only:
                continue
            try:
                yield json.loads(line.rstrip().rstrip(b","))
            except ValueError as exc:
                raise DataError(f"a trial of {path} is not JSON: {exc}") from None


def _line_id(line: bytes) -> int | None:
    """A trial line's id, read without parsing the line (keys are sorted: ``"id":N,`` follows
    ``"hparams"``)."""
    start = line.find(b',"id":')
    if start < 0:
        return None
    end = line.find(b",", start + 6)
    try:
        return int(line[start + 6 : end])
    except ValueError:
        return None


def laid_out_by_line(path: Path) -> bool:
    """Whether the results file at ``path`` has schema 3's layout: a line per top-level field and
    per trial (an older file is indented).  DataError if it is missing; StorageError if it cannot
    be read."""
    try:
        with open_binary(path) as lines:
            return lines.readline().rstrip() == b"{" and lines.readline().startswith(b'"')
    except FileNotFoundError:
        raise DataError(f"results file not found: {path}") from None
    except (OSError, EOFError) as exc:
        raise StorageError(
            f"cannot read results file {path}: {' '.join(str(exc).split())}"
        ) from None


def _read_head_lines(path: Path) -> dict[str, Any]:
    """The top-level fields of a file in schema 3's layout, its trials skipped.  DataError for a
    line that is not JSON; StorageError if it cannot be read."""
    head: dict[str, Any] = {}
    try:
        with open_binary(path) as lines:
            lines.readline()  # "{"
            for number, line in enumerate(lines, start=2):
                if line.startswith(b'"trials":[') and not line.rstrip().endswith((b"],", b"]")):
                    for skipped in lines:  # to the end of the section, unparsed
                        if skipped.startswith(b"]"):
                            break
                    head[TRIALS] = []
                elif line.startswith(b'"'):
                    try:
                        head.update(json.loads(b"{" + line.rstrip().rstrip(b",") + b"}"))
                    except ValueError as exc:
                        raise DataError(
                            f"results file line {number} is not JSON: {path} ({exc})"
                        ) from None
    except (OSError, EOFError) as exc:
        raise StorageError(
            f"cannot read results file {path}: {' '.join(str(exc).split())}"
        ) from None
    return head


def upgrade(results: dict[str, Any]) -> dict[str, Any]:
    """The results in the current schema: version 1 called a trial's parameter count ``params``;
    version 2 is version 3 with every architecture in full (``arch``, which version 3 keeps for
    trials without a parent)."""
    if results["schema_version"] == 1:
        for trial in results.get("trials") or []:
            if "params" in trial:
                trial["num_params"] = trial.pop("params")
    results["schema_version"] = 3
    return results


def trial_arch(trials: dict[Any, dict[str, Any]], trial_id: Any) -> dict[str, Any] | None:
    """The architecture of trial ``trial_id`` among ``trials`` (by id), rebuilt through its
    ancestors' diffs where results.json wrote it as one (:mod:`aihpc.records.archdiff`); None
    where the file lacks it or one of its ancestors."""
    chain = []
    trial = trials.get(trial_id)
    while trial is not None and "arch" not in trial:
        if not isinstance(trial.get("arch_diff"), dict):
            return None
        chain.append(trial["arch_diff"])
        trial = trials.get(trial.get("parent"))
    if trial is None or not isinstance(trial.get("arch"), dict):
        return None
    arch = trial["arch"]
    for delta in reversed(chain):
        arch = patch(delta, arch)
    return arch


@dataclass(frozen=True)
class Tallies:
    """What results.json's ``score`` block adds to the score: how the trials ended."""

    trials_completed: int
    trials_failed: int
    trials_diverged: int
    screening_ops: int  # operations of the proxy screenings, part of the score's ops
    # the best value of the trials without a parent, the first trial to reach it, and the run's
    # best less it where higher is better (aihpc.results.write.seed_only); None in older files
    seed_only_best: float | None = None
    seed_only_trial: int | None = None
    search_gain: float | None = None
    # why the score and its share of peak would not repeat (the peak moved during the run:
    # aihpc.scoring.peak.RunPeak.not_repeatable); None where they would, and in older files
    not_repeatable: str | None = None

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Tallies:
        """The tallies of a ``score`` block; ``screening_ops`` is 0 in files from before
        screening, the seed-only figures None in files from before them."""
        missing = [
            k for k in ("trials_completed", "trials_failed", "trials_diverged") if k not in data
        ]
        if missing:
            raise DataError(f"results.json's score lacks {', '.join(missing)}")
        return cls(
            data["trials_completed"],
            data["trials_failed"],
            data["trials_diverged"],
            data.get("screening_ops", 0),
            data.get("seed_only_best"),
            data.get("seed_only_trial"),
            data.get("search_gain"),
            data.get("not_repeatable"),
        )


@dataclass(frozen=True)
class WorkerBusy:
    """How busy one worker was over the run's wall time; ``epochs`` is None in version 1 files."""

    name: str
    busy_seconds: float
    busy_fraction: float
    epochs: int | None

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> WorkerBusy:
        missing = [k for k in ("name", "busy_seconds", "busy_fraction") if k not in data]
        if missing:
            raise DataError(f"a worker of results.json lacks {', '.join(missing)}: {data!r}")
        return cls(data["name"], data["busy_seconds"], data["busy_fraction"], data.get("epochs"))


@dataclass(frozen=True)
class RunResults:
    """One run's result, as results.json records it (see :mod:`aihpc.results.write`)."""

    schema_version: int
    aihpc_version: str | None
    run_id: str | None
    config: dict[
        str, Any
    ]  # the run's configuration, as aihpc.base.config.RunConfig.to_dict gives it
    data: dict[str, Any]  # what the data set is (aihpc.tasks.image.data), its ceiling where known
    environment: Environment
    # None: not measured, or recorded in an older form that the document keeps as it is:
    # version 1's one peak per dtype, or a peak per worker of one process (before aihpc
    # trained a trial on several processes, procs_per_worker); the score names the peak it used
    peak: RunPeak | None
    layout: dict[str, Any] | None
    staging: dict[str, Any] | None
    energy: dict[str, Any] | None  # aihpc.records.energy.energy_results; absent in older files
    score: Score
    tallies: Tallies
    workers: tuple[WorkerBusy, ...]
    trial_count: int  # the trials results.json lists (themselves JSON, for the report and verify)
    screenings: tuple[dict[str, Any], ...]
    devices: dict[str, Any] | None  # each worker's host and devices; absent in older files
    losses: tuple[LostEpoch, ...]  # epochs lost with their workers; absent in older files
    # hyperparameter search processes started again; absent in older files
    helper_restarts: tuple[HelperRestart, ...] = ()
    # each worker's memory limit and what it held before its first trial (the rule with them);
    # absent in older files
    worker_memory: dict[str, Any] | None = None

    @classmethod
    def from_dict(cls, doc: dict[str, Any]) -> RunResults:
        """The record of a results.json document (of :func:`read_results_document`, or as built);
        DataError naming what is missing or broken."""
        version, score = doc.get("schema_version"), doc.get("score")
        if not is_integer(version):
            raise DataError(f"results.json has no schema_version (got {version!r})")
        if not isinstance(score, dict):
            raise DataError("results.json has no score")
        try:
            base = Score.from_dict(score)
        except KeyError as exc:
            raise DataError(f"results.json's score lacks {exc.args[0]}") from None
        return cls(
            schema_version=version,
            aihpc_version=doc.get("aihpc_version"),
            run_id=doc.get("run_id"),
            config=doc.get("config") or {},
            data=doc.get("data") or {},
            environment=Environment.from_dict(doc.get("environment") or {}),
            peak=current_run_peak(doc.get("peak")),
            layout=doc.get("layout"),
            staging=doc.get("staging"),
            energy=doc.get("energy"),
            score=base,
            tallies=Tallies.from_dict(score),
            workers=tuple(WorkerBusy.from_dict(w) for w in doc.get("workers") or ()),
            trial_count=len(doc.get("trials") or ()),
            screenings=tuple(doc.get("screenings") or ()),
            devices=doc.get("devices"),
            losses=tuple(LostEpoch.from_dict(loss) for loss in doc.get("losses") or ()),
            helper_restarts=tuple(
                HelperRestart.from_dict(r) for r in doc.get("helper_restarts") or ()
            ),
            worker_memory=doc.get("worker_memory"),
        )

    def worker_hosts(self) -> dict[str, str]:
        """Each worker's host name, by worker name (empty for files without ``devices``)."""
        return {w["worker"]: w["host"] for w in (self.devices or {}).get("workers") or ()}


def read_results(path: Path) -> RunResults:
    """The record of the results.json at ``path`` (DataError, one line, if it is not one;
    StorageError if it cannot be read)."""
    document = read_results_document(path)
    try:
        return RunResults.from_dict(document)
    except DataError as exc:
        raise DataError(f"{path}: {exc}") from None
