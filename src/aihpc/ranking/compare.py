"""``aihpc compare``: results side by side, like with like, with significance where runs repeat.

Each input is read into an :class:`Entry` by the reader of its *kind*
(:data:`SCORED_KINDS`): ``run`` is results.json of ``aihpc run``; a versioned
result document of :mod:`aihpc.records.files` names its kind in ``kind``.
Adding a kind that carries a score (e.g. ``train_to_target``) is one entry
in that table: a function from the document to an Entry, which of its
figures is the one to test, whether higher is better, and its unit.  A kind
not in the table is refused.  ``run`` is scored by operations per second; ``infer``
(``aihpc infer``, :mod:`aihpc.records.inference`) by the server's ``max_qps``, the highest
rate (queries of one sample per second) within the latency bound, else the offline
samples/s; its workload names the model and the scenario with its bound, so different
ones are never compared; columns of training runs only (regulated score, time to train,
Valid FLOPS) show n/a for it.

Like for like: results of different workloads, or of different schema
versions, are refused; different data sets, budgets or aihpc versions are
flagged (``strict`` refuses them too).

Repeats: inputs with the same workload, data set, budget, configuration
(all but the seed) and machine form a group.  Where two groups both have
at least two results, their headline figures are compared with Welch's
unequal-variances t-test (Welch 1947, Biometrika 34:28-35), two-sided:
``*`` p < 0.05, ``**`` p < 0.01, ``n.s.`` otherwise, each group against the
first.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aihpc.base.errors import ConfigError, DataError
from aihpc.base.fmt import text_table
from aihpc.records.codec import value_or_none
from aihpc.records.energy import EnergyRecord
from aihpc.records.files import InferFile, read_result_file
from aihpc.results.model import RunHead
from aihpc.results.read import RESULTS_FILES, read_run_head, results_file
from aihpc.tasks import recorded_task

SIGNIFICANCE = ((0.01, "**"), (0.05, "*"))
SIGNIFICANCE_RULE = (
    "significance: Welch's t-test (two-sided) on {metric} of each group of repeated runs "
    "against group A; ** p < 0.01, * p < 0.05, n.s. otherwise; needs >= 2 runs in both groups"
)
UNGROUPED_CONFIG = (
    "seed",
    "report_seconds",
)  # settings that do not make a run a different configuration


@dataclass(frozen=True)
class Entry:
    """One result, reduced to what compare and rank show.  Scores in operations per second."""

    source: str
    kind: str
    schema_version: int
    aihpc_version: str | None
    workload: str
    dataset: str
    budget: str
    config: str  # a short label
    config_key: str  # everything that makes it a configuration (not the seed)
    machine: str
    score: float | None = None
    error_percent: float | None = None
    regulated_score: float | None = None
    peak_fraction: float | None = None  # of the measured peak
    nominal_peak_fraction: float | None = None  # of the nominal peak (absent in older files)
    peak_unreliable: bool = False  # the share of the measured peak passed 100 %
    time_to_train_s: float | None = None
    best_accuracy: float | None = None
    target_accuracy: float | None = None
    best_val_loss: float | None = None  # a language model's quality (None for images)
    max_val_loss: float | None = None  # its validity threshold
    valid: bool | None = None
    joules: float | None = None  # energy measured over the run, all devices (aihpc.energy.run)
    watts: float | None = None
    # 1e-9 x operations per joule; None unless every training device was metered
    gops_per_watt: float | None = None
    energy_note: str | None = None  # what was not measured, and why
    short_test: bool | None = None  # an inference result's tests under MLPerf's 600 s

    def metric(self) -> float | None:
        value: float | None = getattr(self, SCORED_KINDS[self.kind].metric)
        return value


@dataclass(frozen=True)
class ScoredKind:
    read: Callable[[Any, Path], Entry]  # the kind's record (RunHead, InferFile) and its file
    metric: str  # the Entry field the significance test and rank order use
    higher_is_better: bool
    unit: str = "OPS"  # of the metric


def _run_entry(head: RunHead[Any], path: Path) -> Entry:
    """results.json of ``aihpc run``, its head."""
    config, score = head.config, head.score
    options = ", ".join(f"{k}={v}" for k, v in sorted((config.get("data_options") or {}).items()))
    name = head.data.name if head.data else None
    dataset = f"{name or config.get('dataset')}" + (f" ({options})" if options else "")
    workers = (head.layout.workers if head.layout else None) or config.get("workers")
    # a run from before there were tasks is of the default task (recorded_task): its key names it
    task = recorded_task(config)
    key = {
        k: v for k, v in sorted({**config, "task": task.name}.items()) if k not in UNGROUPED_CONFIG
    }
    return Entry(
        source=str(path),
        kind="run",
        schema_version=head.schema_version,
        aihpc_version=head.aihpc_version,
        workload=task.mlperf_benchmark,
        dataset=dataset,
        budget=f"{config.get('minutes')} min",
        config=f"{workers} worker{'' if workers == 1 else 's'}, {config.get('strategy', '?')}, "
        f"seed {config.get('seed')}",
        config_key=repr(key),
        machine=head.environment.machine_name(),
        score=score.ops_per_second,
        error_percent=score.error_percent,
        regulated_score=score.regulated_score,
        peak_fraction=score.peak_fraction,
        nominal_peak_fraction=value_or_none(score.nominal_peak_fraction),
        peak_unreliable=bool(score.peak_warning),
        best_accuracy=score.best_accuracy,
        target_accuracy=score.min_accuracy,
        best_val_loss=value_or_none(score.best_val_loss),
        max_val_loss=value_or_none(score.max_val_loss),
        valid=score.valid,
        **energy_fields(value_or_none(head.energy)),
    )


def energy_fields(energy: EnergyRecord | None) -> dict[str, Any]:
    """An Entry's energy fields from results.json's ``energy`` (absent before aihpc measured
    energy)."""
    if energy is None:
        return {"energy_note": "results written before aihpc measured energy"}
    return {
        "joules": energy.total.joules,
        "watts": energy.total.watts,
        "gops_per_watt": energy.total.gops_per_watt,
        "energy_note": energy.reason,
    }


def energy_notes(entries: list[Entry], label: str = "#") -> list[str]:
    """One line per entry whose energy was not (all) measured: ``energy of #2: not measured:
    REASON``."""
    notes = []
    for number, e in enumerate(entries, start=1):
        if e.energy_note:
            what = "not measured" if e.joules is None else "partly measured; not measured"
            notes.append(f"energy of {label}{number}: {what}: {e.energy_note}")
    return notes


def _infer_entry(doc: InferFile, path: Path) -> Entry:
    """infer.json of ``aihpc infer`` (:mod:`aihpc.records.inference`)."""
    from aihpc.records.inference import comparison_fields

    fields = comparison_fields(doc.data, doc.environment, doc.schema_version)
    return Entry(source=str(path), kind="infer", **fields)


# kind -> how to read it.  A new kind with a score: one line here.
SCORED_KINDS: dict[str, ScoredKind] = {
    "run": ScoredKind(_run_entry, metric="score", higher_is_better=True),
    "infer": ScoredKind(_infer_entry, metric="score", higher_is_better=True, unit="samples/s"),
}


def score_text(kind: str, value: float | None) -> str:
    """A score in its kind's unit: SI-prefixed operations per second, else 4 digits."""
    from aihpc.base.fmt import format_si

    unit = SCORED_KINDS[kind].unit
    if unit == "OPS" or value is None:
        return format_si(value, unit)
    return f"{value:.4g} {unit}"


def load_entry(path: Path) -> Entry:
    """The Entry of a result file, of RUN_DIR/results.json, or of aihpc infer's OUT/infer.json;
    DataError (one line) if it is not one or has no score."""
    from aihpc.records.inference import INFER_FILE

    path = Path(path)
    file = results_file(path) if path.is_dir() else path
    if path.is_dir() and not file.exists() and (path / INFER_FILE).is_file():
        file = path / INFER_FILE  # aihpc infer's output folder
    # a run's results: its trials are not read
    if file.name in RESULTS_FILES:
        return _run_entry(read_run_head(file), file)
    document = read_result_file(file)
    kind = document.kind()
    if kind not in SCORED_KINDS:
        raise DataError(
            f"cannot compare {file}: result kind {kind!r} carries no score "
            f"(comparable kinds: {', '.join(SCORED_KINDS)})"
        )
    return SCORED_KINDS[kind].read(document, file)


def check_like_for_like(entries: list[Entry], strict: bool = False) -> list[str]:
    """ConfigError for results that cannot be compared; the differences to flag otherwise."""
    for field, what in (
        ("kind", "kinds of result"),
        ("workload", "workloads"),
        ("schema_version", "schema versions"),
    ):
        values = _distinct(entries, field)
        if len(values) > 1:
            raise ConfigError(f"cannot compare results of different {what}: {_listing(values)}")
    flags = []
    for field, what in (
        ("dataset", "data sets"),
        ("budget", "budgets"),
        ("aihpc_version", "aihpc versions"),
    ):
        values = _distinct(entries, field)
        if len(values) > 1:
            flags.append(f"not like for like: different {what}: {_listing(values)}")
    if flags and strict:
        raise ConfigError(flags[0] + " (--strict)")
    return flags


def _distinct(entries: list[Entry], field: str) -> dict[Any, list[int]]:
    values: dict[Any, list[int]] = {}
    for number, entry in enumerate(entries, start=1):
        values.setdefault(getattr(entry, field), []).append(number)
    return values


def _listing(values: dict[Any, list[int]]) -> str:
    return "; ".join(
        f"{value} (#{', #'.join(map(str, numbers))})" for value, numbers in values.items()
    )


@dataclass(frozen=True)
class RepeatGroup:
    """Results of one configuration on one machine: the repeats."""

    label: str
    members: tuple[int, ...]  # 1-based input numbers
    values: tuple[float, ...]
    p_value: float | None = None  # against group A
    marker: str = ""

    @property
    def mean(self) -> float:
        return statistics.fmean(self.values)

    @property
    def stdev(self) -> float | None:
        return statistics.stdev(self.values) if len(self.values) > 1 else None


def group_repeats(entries: list[Entry]) -> list[RepeatGroup]:
    """Inputs grouped by configuration and machine, in input order; Welch's test of each group
    against the first."""
    keys: dict[tuple[str, ...], list[int]] = {}
    for number, e in enumerate(entries, start=1):
        keys.setdefault((e.workload, e.dataset, e.budget, e.config_key, e.machine), []).append(
            number
        )
    groups = []
    for index, numbers in enumerate(keys.values()):
        values = tuple(v for n in numbers if (v := entries[n - 1].metric()) is not None)
        groups.append(
            RepeatGroup(
                chr(ord("A") + index) if index < 26 else f"G{index}", tuple(numbers), values
            )
        )
    if not groups:
        return groups
    first = groups[0]
    return [first] + [_tested(first, g) for g in groups[1:]]


def _tested(reference: RepeatGroup, group: RepeatGroup) -> RepeatGroup:
    if len(reference.values) < 2 or len(group.values) < 2:
        return group
    p = welch_p_value(reference.values, group.values)
    if p is None:
        return group
    marker = next((m for level, m in SIGNIFICANCE if p < level), "n.s.")
    return RepeatGroup(group.label, group.members, group.values, p, marker)


def welch_p_value(a: tuple[float, ...], b: tuple[float, ...]) -> float | None:
    """Two-sided p of Welch's t-test; None where both samples have no spread (the test is
    undefined)."""
    from scipy import stats

    if statistics.pvariance(a) == 0 and statistics.pvariance(b) == 0:
        return None
    p = float(stats.ttest_ind(a, b, equal_var=False).pvalue)
    return None if math.isnan(p) else p


# -- output ------------------------------------------------------------------------------
COLUMNS = (
    "#",
    "result",
    "machine",
    "config",
    "data set",
    "budget",
    "score",
    "error",
    "regulated",
    "share of peak",
    "of nominal",
    "time-to-train",
    "valid",
    "energy",
    "power",
    "GOPS/W",
)


def columns(entries: Sequence[Entry]) -> tuple[str, ...]:
    """The table's columns: :data:`COLUMNS`, with "val loss" for "error" where the results are
    language models' (a table never mixes the two: different workloads)."""
    if entries and entries[0].best_val_loss is not None:
        return tuple("val loss" if c == "error" else c for c in COLUMNS)
    return COLUMNS


def quality_cell(e: Entry) -> str:
    """An image run's error, or a language model's best validation loss (nats per token)."""
    from aihpc.base.fmt import format_percent

    if e.best_val_loss is not None:
        return f"{e.best_val_loss:.4f}"
    return format_percent(e.error_percent)


def entry_cells(number: int, e: Entry) -> list[str]:
    from aihpc.base.fmt import format_seconds, format_si

    valid = "n/a" if e.valid is None else ("yes" if e.valid else "NO")
    return [
        str(number),
        e.source,
        e.machine,
        e.config,
        e.dataset,
        e.budget,
        score_text(e.kind, e.score),
        quality_cell(e),
        format_si(e.regulated_score, "OPS"),
        *peak_cells(e),
        format_seconds(e.time_to_train_s),
        valid,
        *energy_cells(e),
    ]


def peak_cells(e: Entry) -> list[str]:
    """The share of the measured peak (marked where it passed 100 %: that peak is unreliable)
    and of the nominal peak."""
    from aihpc.base.fmt import format_fraction

    measured = format_fraction(e.peak_fraction) + (
        " (unreliable peak)" if e.peak_unreliable else ""
    )
    return [measured, format_fraction(e.nominal_peak_fraction)]


def energy_cells(e: Entry) -> list[str]:
    """Joules, average watts and GOPS/W of an entry, ``not measured`` where they are not known."""
    from aihpc.base.fmt import format_si

    if e.joules is None:
        return ["not measured", "not measured", "n/a"]
    return [
        format_si(e.joules, "J"),
        format_si(e.watts, "W"),
        "n/a" if e.gops_per_watt is None else f"{e.gops_per_watt:.3g}",
    ]


def render_comparison(entries: list[Entry], groups: list[RepeatGroup], flags: list[str]) -> str:
    """The side-by-side table, the groups of repeats with their significance markers, and the
    flags."""
    cells = [entry_cells(n, e) for n, e in enumerate(entries, start=1)]
    lines = [text_table(columns(entries), cells)]
    metric = SCORED_KINDS[entries[0].kind].metric
    if any(len(g.members) > 1 for g in groups):
        lines += [
            "",
            f"groups (same configuration and machine; {metric} as mean ± standard deviation):",
        ]
        for g in groups:
            spread = "" if g.stdev is None else f" ± {_metric_text(entries[0].kind, g.stdev)}"
            test = f"  p = {g.p_value:.3g} {g.marker}" if g.p_value is not None else ""
            members = ", ".join(f"#{n}" for n in g.members)
            lines.append(
                f"  {g.label}  {members}  n={len(g.values)}  "
                f"{_metric_text(entries[0].kind, g.mean)}{spread}{test}"
            )
        lines.append(SIGNIFICANCE_RULE.format(metric=metric))
    lines += energy_notes(entries)
    lines += flags
    return "\n".join(lines)


def _metric_text(kind: str, value: float) -> str:
    from aihpc.base.fmt import format_seconds

    if SCORED_KINDS[kind].metric == "time_to_train_s":
        return format_seconds(value)
    return score_text(kind, value)
