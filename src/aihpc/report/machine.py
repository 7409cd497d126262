"""The report's sections on the machine: its environment and processor, the measured and nominal
peaks the shares divide by, and the configuration with the values resolved at run time.

Every function takes the run (:class:`~aihpc.report.digest.ReportRun`) or the record of the
section it shows (any version: fields an older file lacks show as "n/a" or are left out) and
returns HTML.
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Sequence
from typing import Any

import msgspec

from aihpc.base.fmt import NA, format_fraction, format_si, format_value
from aihpc.records.codec import Record, value_or_none
from aihpc.records.environment import CacheRecord, GpuRecord, ProcessorRecord
from aihpc.records.peak import (
    DtypePeakRecord,
    NominalPeakRecord,
    RunPeakRecord,
    WorkerPeakRecord,
)
from aihpc.records.score import ScoreRecord
from aihpc.report.digest import ReportRun
from aihpc.report.markup import figure_card, kv_table, no_data
from aihpc.results.model import RunHead


# -- the header's card -------------------------------------------------------------------
def peak_card(run: ReportRun) -> str:
    """The share of the measured peak, with the share of the nominal one under it."""
    score = run.head.score
    notes = [_peak_note(run.head.peak, score.peak_flops_per_s)]
    nominal = value_or_none(score.nominal_peak_fraction)
    if nominal is not None:
        notes.append(
            f"{format_fraction(nominal)} of the nominal "
            f"{format_si(value_or_none(score.nominal_peak_flops_per_s), 'FLOP/s')}"
        )
    if score.peak_warning:
        notes.append("above 100 %: the measured peak is unreliable")
    return figure_card(
        "Share of peak",
        format_fraction(score.peak_fraction),
        " · ".join(notes),
        value_or_none(score.not_repeatable),
    )


def _peak_note(peak: RunPeakRecord | None, used: float | None) -> str:
    """What the share of peak divides by: the total peak of all workers measured at once."""
    if used is None:
        return "no peak measured"
    if peak is not None:
        return (
            f"of {format_si(used, 'FLOP/s')}, the total measured peak of "
            f"{format_value(peak.workers)} workers at once"
        )
    return f"of {format_si(used, 'FLOP/s')} measured peak"


# -- environment -------------------------------------------------------------------------
#: The environment's fields its first rows show; the rest follow, by name.
_SHOWN = {"hostname", "cpu_model", "cpu", "gpus", "torch_version", "git_commit", "git_dirty"}


def environment(run: ReportRun) -> str:
    """Host, processor (in detail where recorded), GPUs, software; the rest of the section below."""
    env = run.head.environment
    dirty = env.git_dirty
    commit_text = format_value(env.git_commit) + (
        " (dirty)" if dirty else " (clean)" if dirty is False else ""
    )
    main = [
        ("host", format_value(env.hostname)),
        ("CPU", format_value(env.cpu_model)),
        *processor_rows(value_or_none(env.cpu)),
        ("GPUs", _gpu_text(env.gpus)),
        ("torch", format_value(env.torch_version)),
        ("git commit", commit_text),
    ]
    rest = [(name, format_value(value)) for name, value in recorded(env) if name not in _SHOWN]
    return kv_table(main + rest)


def recorded(record: Record) -> list[tuple[str, object]]:
    """The fields of ``record`` that its file holds (those at their default, absent from it, left
    out), by name."""
    fields = msgspec.structs.fields(record)
    values = [(f.name, getattr(record, f.name), f) for f in fields]
    return sorted((name, v) for name, v, f in values if f.required or v != f.default)


def processor_rows(cpu: ProcessorRecord | None) -> list[tuple[str, str]]:
    """The processor's identity, vector extensions, topology, caches, clock and math libraries
    (none for files written before aihpc recorded them)."""
    if cpu is None:
        return []
    numbers = (("family", cpu.family), ("model", cpu.model), ("stepping", cpu.stepping))
    ident = ", ".join(
        f"{key} {value}" for key, value in numbers if value_or_none(value) is not None
    )
    topology = (
        f"{_text(cpu.sockets)} sockets, {_text(cpu.cores)} cores, "
        f"{_text(cpu.threads_per_core)} threads per core, "
        f"{_text(cpu.logical_cpus)} logical CPUs"
    )
    clock = f"{_text(cpu.clock_mhz)} MHz"
    if value_or_none(cpu.max_clock_mhz) is not None:
        clock += f", at most {format_value(cpu.max_clock_mhz)} MHz"
    if cpu.clock_source:
        clock += f" ({cpu.clock_source})"
    libraries = (
        f"BLAS {_text(cpu.blas)}; oneDNN {_text(cpu.onednn_version)} "
        f"on {_text(cpu.onednn_isa)}; torch's CPU kernels {_text(cpu.torch_cpu_capability)}"
    )
    return [
        ("processor", f"{_text(cpu.vendor)} {ident}".strip()),
        ("vector extensions", ", ".join(cpu.extensions or ()) or "none recorded"),
        ("topology", topology),
        ("caches", _caches_text(cpu.caches or ())),
        ("clock", clock),
        ("math libraries", libraries),
    ]


def _text(value: object) -> str:
    """A field that may be unset, as plain text ("n/a" where unset or None)."""
    return format_value(value_or_none(value))


def _caches_text(caches: Sequence[CacheRecord]) -> str:
    parts = []
    for c in caches:
        kind = {"data": "d", "instruction": "i"}.get(c.kind, "")
        parts.append(f"L{c.level}{kind} {format_si(c.size_bytes, 'B', count=True)}")
    return ", ".join(parts) or NA


def _gpu_text(gpus: Sequence[GpuRecord]) -> str:
    if not gpus:
        return "none"
    counted = Counter(gpu.name for gpu in gpus)
    return ", ".join(f"{n} × {name}" if n > 1 else name for name, n in counted.items())


# -- configuration -----------------------------------------------------------------------
#: Settings of one quality that a run of the other does not use: (quality name, setting).
UNUSED = {("loss", "min_accuracy")}


def resolved_settings(head: RunHead[Any]) -> dict[str, int | float | str]:
    """The values the run resolved its automatic settings (null in the configuration) to, by
    setting, where it recorded them (its layout, data set and score)."""
    layout, data = value_or_none(head.layout), value_or_none(head.data)
    values: dict[str, int | float | str | None] = {
        "workers": layout.workers if layout else None,
        "threads_per_worker": layout.threads if layout else None,
        "device": layout.device if layout else None,
        "max_params": data.max_params if data else None,
        "max_val_loss": value_or_none(head.score.max_val_loss),
    }
    return {setting: value for setting, value in values.items() if value is not None}


def configuration(run: ReportRun) -> str:
    """The configuration; an automatic setting shows the value the run resolved it to, and a
    setting of the other task's quality says that this run did not use it."""
    config = run.head.config
    if not config:
        return no_data("no configuration recorded")
    quality = run.quality
    resolved = resolved_settings(run.head)
    rows = []
    for key, value in sorted(config.items()):
        if key in resolved and (value is None or value == "auto"):
            rows.append((str(key), f"{format_value(resolved[key])} (resolved at run time)"))
        elif (quality.name, key) in UNUSED:
            rows.append(
                (str(key), f"{format_value(value)} (unused: the quality is the {quality.label})")
            )
        else:
            rows.append((str(key), format_value(value)))
    return kv_table(rows)


# -- the peaks ---------------------------------------------------------------------------
def peaks(run: ReportRun) -> str:
    """The measured peak the share uses (which kernel, each worker's part), the nominal peak,
    before and after the run, and every warning about them."""
    peak, score = run.head.peak, run.head.score
    if peak is None:  # results of early versions: one entry per dtype
        rows = _dtype_rows(run.head.peak_by_dtype or {}) + _share_rows(score, None)
        return kv_table(rows) if rows else no_data("no peak measured")
    what = " on ".join(x for x in (peak.dtype, peak.device) if x) or "matmul"
    total = peak.total_flops_per_s
    rows = [
        (
            f"total: {what}, {format_value(peak.workers)} workers at once, before the run "
            "(the share of peak uses this)",
            format_si(total, "FLOP/s"),
        ),
        ("fastest kernel", ", ".join(peak.kernels or ()) or "matmul (before the search)"),
    ]
    rows += _worker_rows(peak.per_worker)
    rows.append(("largest spread of a worker's repeats", format_fraction(peak.spread)))
    rows += _nominal_rows(value_or_none(peak.nominal))
    rows += _share_rows(score, total)
    rows += _after_rows(peak)
    for warning in (peak.above_nominal, peak.drift_warning):
        if warning:
            rows.append(("warning", warning))
    return kv_table(rows)


def _dtype_rows(by_dtype: dict[str, DtypePeakRecord]) -> list[tuple[str, str]]:
    """Schema 1's peak: the one measured in each dtype."""
    return [
        (
            " on ".join(x for x in (entry.dtype, entry.device) if x),
            format_si(entry.flops_per_s, "FLOP/s"),
        )
        for _, entry in sorted(by_dtype.items())
    ]


def _after_rows(peak: RunPeakRecord) -> list[tuple[str, str]]:
    """The peak after the run and its drift; where the run lost workers, which workers the drift
    compares (those measured both times, ``drift_workers``)."""
    after = value_or_none(peak.after)
    if after is None:
        return []
    total, drift = "total after the run", "drift"
    compared = value_or_none(peak.drift_workers)
    if compared is not None and len(compared) != peak.workers:
        total += f", on the {format_value(after.workers)} worker(s) left"
        drift += f" of worker(s) {', '.join(compared)}, each against its own"
    return [
        (total, format_si(after.total_flops_per_s, "FLOP/s")),
        (drift, format_fraction(value_or_none(peak.drift))),
    ]


def _nominal_rows(nominal: NominalPeakRecord | None) -> list[tuple[str, str]]:
    if nominal is None:
        return []
    if nominal.flops_per_s is None:
        return [("nominal peak", f"not known: {nominal.note}")]
    text = format_si(nominal.flops_per_s, "FLOP/s")
    if nominal.derivation:
        text += f" = {nominal.derivation}"
    if nominal.note:
        text += f" ({nominal.note})"
    return [("nominal peak (the hardware's figures)", text)]


def _worker_rows(workers: Sequence[WorkerPeakRecord]) -> list[tuple[str, str]]:
    """Each worker's part of the total (measured at the same time) and its kernel search; min /
    median / max beyond 8 workers."""
    values = [w.flops_per_s for w in workers]
    if len(values) > 8:
        return [
            (
                f"per worker, {len(values)} workers (min / median / max)",
                " / ".join(
                    format_si(v, "FLOP/s")
                    for v in (min(values), statistics.median(values), max(values))
                ),
            )
        ]
    return [
        (f"worker {n} of {len(workers)}, part of the total", _worker_text(w))
        for n, w in enumerate(workers, 1)
    ]


def _worker_text(worker: WorkerPeakRecord) -> str:
    """A worker's rate, and each of its processes' kernel search (the fastest first)."""
    text = format_si(worker.flops_per_s, "FLOP/s")
    for part in worker.parts or ():
        if not part.candidates:
            continue
        tried = sorted(part.candidates, key=lambda c: -c.flops_per_s)
        text += "; searched: " + ", ".join(
            f"{c.kernel} {format_si(c.flops_per_s, 'FLOP/s')}" for c in tried
        )
    return text


def _share_rows(score: ScoreRecord, total: float | None) -> list[tuple[str, str]]:
    """How the shares of peak are computed, and a warning if the score used another peak than the
    total or its share passed 100 %."""
    used = score.peak_flops_per_s
    if used is None or score.peak_fraction is None:
        return []
    ops = format_si(score.ops_per_second, "OPS")
    rows = [
        (
            "share of the measured peak",
            f"{ops} ÷ {format_si(used, 'FLOP/s')} = {format_fraction(score.peak_fraction)}",
        )
    ]
    nominal = value_or_none(score.nominal_peak_flops_per_s)
    if nominal is not None:
        rows.append(
            (
                "share of the nominal peak (model FLOPs utilisation)",
                f"{ops} ÷ {format_si(nominal, 'FLOP/s')} = "
                f"{format_fraction(value_or_none(score.nominal_peak_fraction))}",
            )
        )
    if score.peak_warning:
        rows.append(("warning", score.peak_warning))
    if total is not None and abs(used - total) > 1e-9 * total:
        rows.append(
            (
                "warning",
                f"the score's share of peak used {format_si(used, 'FLOP/s')}, "
                f"not the measured total {format_si(total, 'FLOP/s')}",
            )
        )
    return rows
