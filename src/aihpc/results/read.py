"""results.json read back: one reader for every version, into the typed record of the run.

:func:`read_results` reads a file whole into a
:class:`~aihpc.results.model.RunResults`; :func:`read_run_head` its sections
but its trials, and :func:`iter_trial_records` its trials one at a time,
which for a file in schema 3's layout (a line per field and per trial) do not
hold the trials in memory.  Each checks the version and every field against
the record: a document that does not match is a :class:`DataError` of one
line naming the file, the field's path and the problem; a file that cannot be
read, a :class:`StorageError`.

Older versions are upgraded as they are read (:func:`upgrade_head`,
:func:`upgrade_trial`): schema 1 called a trial's parameter count ``params``
and recorded one peak per dtype (read as ``peak_by_dtype``); schema 2 is
schema 3 with every architecture in full (``arch``, which schema 3 keeps for
trials without a parent).  The record keeps the ``schema_version`` written.

:func:`read_results_document` (the document as JSON objects) and
:func:`trial_arch` (an architecture among trials as JSON objects) serve the
readers that edit or compare documents as JSON objects (tests, benchmarks/analysis.py).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Protocol

import msgspec

from aihpc.base.errors import ConfigError, DataError, StorageError
from aihpc.base.fileio import open_binary
from aihpc.records.archdiff import patch
from aihpc.records.codec import convert, decode
from aihpc.results.model import RunHead, RunResults
from aihpc.results.trial import TrialRecord
from aihpc.tasks import recorded_task

#: A run's results, and the name they take when written compressed (see
#: :func:`aihpc.results.write.write_results`).
RESULTS_FILE, COMPRESSED_RESULTS_FILE = "results.json", "results.json.gz"
RESULTS_FILES = (RESULTS_FILE, COMPRESSED_RESULTS_FILE)

#: The ``schema_version`` values of results.json that this aihpc reads, the last the current.
READ_VERSIONS = (1, 2, 3)
CURRENT_VERSION = READ_VERSIONS[-1]

#: The per-trial section, which :func:`read_run_head` leaves unparsed.
TRIALS = "trials"

_TRIALS_TYPE = tuple[TrialRecord, ...]


def results_file(run_dir: Path) -> Path:
    """The run's results file: ``results.json``, or ``results.json.gz`` where a large run wrote
    that instead (``results.json``'s path where neither exists, for the error that follows)."""
    compressed = Path(run_dir) / COMPRESSED_RESULTS_FILE
    plain = Path(run_dir) / RESULTS_FILE
    return compressed if compressed.is_file() and not plain.is_file() else plain


def _what(path: Path) -> str:
    return f"results file {path}"


def read_results(path: Path) -> RunResults[Any]:
    """The record of the results file at ``path``, trials and all (the module docstring)."""
    path = Path(path)
    return decode_results(_read_bytes(path), _what(path))


def decode_results(data: bytes, what: str) -> RunResults[Any]:
    """The record of the results document ``data``; ``what`` names it in errors.

    The document's top-level fields are split unparsed first; its head is
    then parsed, upgraded and checked, and its trials decoded straight into
    their records (parsed, upgraded and checked, for an older version).
    """
    fields = decode(data, dict[str, msgspec.Raw], what)
    head = {key: msgspec.json.decode(raw) for key, raw in fields.items() if key != TRIALS}
    record = _head_record(head, what)
    raw = fields.get(TRIALS)
    if raw is None:
        raise DataError(f"{what}: object missing required field trials")
    if record.schema_version == CURRENT_VERSION:
        trials = decode(raw, _TRIALS_TYPE, what, at=TRIALS)
    else:
        parsed = msgspec.json.decode(raw)
        if isinstance(parsed, list):  # else refused by the conversion, as not an array
            parsed = [upgrade_trial(t, record.schema_version) for t in parsed]
        trials = convert(parsed, _TRIALS_TYPE, what, at=TRIALS)
    values = {name: getattr(record, name) for name in RunHead.__struct_fields__}
    return RunResults(**values, trials=trials)


def _head_record(head: dict[str, Any], what: str) -> RunHead[Any]:
    """The head's record: its version checked, upgraded, its data set's record by its task."""
    version = head.get("schema_version")
    if isinstance(version, bool) or version not in READ_VERSIONS:
        supported = ", ".join(str(v) for v in READ_VERSIONS)
        where = what.removeprefix("results file ")
        raise DataError(
            f"unsupported results schema_version {version!r} in {where} (supported: {supported})"
        )
    upgraded = upgrade_head(head)
    config = upgraded.get("config")
    try:
        task = recorded_task(config if isinstance(config, dict) else None)
    except ConfigError as exc:  # a task this aihpc does not have registered
        raise DataError(f"{what}: config.task: {exc}") from None
    kind: Any = RunHead[task.data_record]  # type: ignore[name-defined]
    record: RunHead[Any] = convert(upgraded, kind, what)
    return record


def upgrade_head(head: dict[str, Any]) -> dict[str, Any]:
    """The head of a document of any version, in the current form: schema 1's peak per dtype
    (an object of dtypes, no ``per_worker``) is ``peak_by_dtype``.  The version stays as
    written."""
    peak = head.get("peak")
    if head.get("schema_version") == 1 and isinstance(peak, dict) and "per_worker" not in peak:
        return {**head, "peak": None, "peak_by_dtype": peak}
    return head


def upgrade_trial(trial: Any, version: int) -> Any:
    """A trial of a document of ``version``, in the current form: schema 1 called its parameter
    count ``params``."""
    if version == 1 and isinstance(trial, dict) and "params" in trial:
        trial = {k: v for k, v in trial.items() if k != "params"} | {"num_params": trial["params"]}
    return trial


def read_run_head(path: Path) -> RunHead[Any]:
    """The record of the results file at ``path`` but its trials, checked as
    :func:`read_results` checks it: what ``aihpc compare`` and ``aihpc rank`` read.

    A file in schema 3's layout (a line per top-level field and per trial)
    is read line by line and its trials skipped unparsed, so the time and
    memory do not grow with the run; an older file is read whole.
    """
    path = Path(path)
    if not laid_out_by_line(path):
        return read_results(path).head()
    return _head_record(_read_head_lines(path), _what(path))


def iter_trial_records(path: Path, only: set[int] | None = None) -> Iterator[TrialRecord]:
    """The trials of the results file at ``path``, one at a time, by its order; with ``only``,
    just those ids.  A file in schema 3's layout is read a line at a time (the lines of trials
    not in ``only`` are not parsed), so memory does not grow with the run; an older file is
    read whole, as :func:`read_results` reads it.  DataError for a trial that is not a trial."""
    path = Path(path)
    if not laid_out_by_line(path):
        trials = read_results(path).trials
        yield from (t for t in trials if only is None or t.id in only)
        return
    what = _what(path)
    with open_binary(path) as lines:
        for line in lines:
            if line.startswith(b'"trials":['):
                break
        for index, line in enumerate(lines):
            if line.startswith(b"]"):
                return
            if only is not None and _line_id(line) not in only:
                continue
            yield decode(line.rstrip().rstrip(b","), TrialRecord, what, at=f"trials[{index}]")


def _read_bytes(path: Path) -> bytes:
    """The bytes of ``path`` (decompressed for ``.gz``); DataError if it is missing, StorageError
    if it cannot be read."""
    try:
        with open_binary(path) as f:
            return f.read()
    except FileNotFoundError:
        raise DataError(f"results file not found: {path}") from None
    except (OSError, EOFError) as exc:
        raise StorageError(
            f"cannot read results file {path}: {' '.join(str(exc).split())}"
        ) from None


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
    """The top-level fields of a file in schema 3's layout, parsed, its trials skipped.
    DataError for a line that is not JSON; StorageError if it cannot be read."""
    head: dict[str, Any] = {}
    try:
        with open_binary(path) as lines:
            lines.readline()  # "{"
            for number, line in enumerate(lines, start=2):
                if line.startswith(b'"trials":[') and not line.rstrip().endswith((b"],", b"]")):
                    for skipped in lines:  # to the end of the section, unparsed
                        if skipped.startswith(b"]"):
                            break
                elif line.startswith(b'"'):
                    try:
                        head.update(msgspec.json.decode(b"{" + line.rstrip().rstrip(b",") + b"}"))
                    except msgspec.DecodeError as exc:
                        raise DataError(
                            f"results file line {number} is not JSON: {path} ({exc})"
                        ) from None
    except (OSError, EOFError) as exc:
        raise StorageError(
            f"cannot read results file {path}: {' '.join(str(exc).split())}"
        ) from None
    head.pop(TRIALS, None)
    return head


class ArchLink(Protocol):
    """What a trial's architecture is rebuilt from: its parent, and its ``arch`` in full or its
    ``arch_diff`` of its parent's (a :class:`TrialRecord` is one)."""

    @property
    def parent(self) -> int | None: ...
    @property
    def arch(self) -> dict[str, Any] | None: ...
    @property
    def arch_diff(self) -> dict[str, Any] | None: ...


def architecture(trials: Mapping[int, ArchLink], trial_id: int) -> dict[str, Any] | None:
    """The architecture of trial ``trial_id`` among ``trials`` (by id), rebuilt through its
    ancestors' diffs where results.json wrote it as one (:mod:`aihpc.records.archdiff`); None
    where ``trials`` lacks it or one of its ancestors."""
    chain = []
    trial = trials.get(trial_id)
    while trial is not None and trial.arch is None:
        if trial.arch_diff is None or trial.parent is None:
            return None
        chain.append(trial.arch_diff)
        trial = trials.get(trial.parent)
    if trial is None or trial.arch is None:
        return None
    arch = trial.arch
    for delta in reversed(chain):
        arch = patch(delta, arch)
    return arch


# -- JSON objects, for the readers of documents as JSON objects (tests, benchmarks) --
def read_results_document(path: Path) -> dict[str, Any]:
    """:func:`read_results` as the JSON object it reads (upgraded; ``schema_version`` the
    current)."""
    return {**read_results(path).to_dict(), "schema_version": CURRENT_VERSION}


def trial_arch(trials: dict[Any, dict[str, Any]], trial_id: Any) -> dict[str, Any] | None:
    """:func:`architecture` of trials as JSON objects (by id)."""
    return architecture({k: _DictLink(t) for k, t in trials.items()}, trial_id)


class _DictLink:
    """A trial as a JSON object, as :func:`architecture` reads it (what is not an object, None)."""

    def __init__(self, trial: dict[str, Any]) -> None:
        self._trial = trial

    def _object(self, key: str) -> dict[str, Any] | None:
        value = self._trial.get(key)
        return value if isinstance(value, dict) else None

    @property
    def parent(self) -> int | None:
        parent = self._trial.get("parent")
        return parent if isinstance(parent, int) else None

    @property
    def arch(self) -> dict[str, Any] | None:
        return self._object("arch")

    @property
    def arch_diff(self) -> dict[str, Any] | None:
        return self._object("arch_diff")
