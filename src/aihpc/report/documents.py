"""Report sections for the result files of the explaining commands (bench, profile, roofline,
recommend) and of ``aihpc infer`` (:mod:`aihpc.report.infer_section`).

:func:`render_sections` turns result documents (:class:`aihpc.records.files.ResultFile`
records, as :func:`~aihpc.records.files.read_result_file` reads them) into HTML sections, one
per document, in the order given; each kind has its renderer, which takes the kind's data
record; a value the record allows to be unknown (None) shows as "n/a".  Train-to-target
results have no section.
:func:`render_page` wraps sections in a page of their own (``aihpc report
FILE.json``); :func:`aihpc.report.write_report` appends them to a run's report
when the run directory holds such files.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from statistics import mean, median
from typing import TypeVar

from aihpc.base.fmt import format_fraction, format_seconds, format_si, format_value
from aihpc.records.files import (
    BenchDistributedFile,
    BenchNetworkFile,
    BenchOperatorsFile,
    BenchTrainingFile,
    CalibrationFile,
    InferFile,
    ProfileFile,
    RecommendFile,
    ResultFile,
    RooflineFile,
    TrainToTargetFile,
    ValidationFile,
)
from aihpc.records.kinds import BenchDistributedData, BenchTrainingData, TrainingEpoch
from aihpc.records.kinds_bench import (
    BenchNetworkData,
    BenchOperatorsData,
    LayerRecord,
    ModeRecord,
    OperatorRowRecord,
    OperatorTypeRecord,
    PassRecord,
)
from aihpc.records.kinds_measure import (
    OperatorTimeRecord,
    PhaseTimeRecord,
    ProfileData,
    RooflineData,
    SweepRowRecord,
)
from aihpc.records.kinds_recommend import (
    CalibrationData,
    RankedRecord,
    RecommendData,
    TaskScoreRecord,
    ValidationData,
)
from aihpc.report.infer_section import render_infer
from aihpc.report.markup import CSS, esc, image, kv_table, no_data

Row = TypeVar("Row")
Column = tuple[str, Callable[[Row], str]]


def _table(rows: Sequence[Row], columns: Sequence[Column[Row]], limit: int = 200) -> str:
    rows = rows[:limit]
    if not rows:
        return no_data()
    head = "".join(f"<th>{esc(title)}</th>" for title, _ in columns)
    body = "".join(
        "<tr>" + "".join(f"<td>{esc(cell(r))}</td>" for _, cell in columns) + "</tr>" for r in rows
    )
    return f"<table><tr>{head}</tr>{body}</table>"


def _roofline(data: RooflineData) -> str:
    rows = [
        (
            f"peak, {dtype}",
            f"{format_si(p.flops_per_s, 'FLOP/s')} "
            f"(spread {format_fraction(p.spread)}; {p.kernel or 'n/a'})"
            + (f"; {p.note}" if p.note else ""),
        )
        for dtype, p in sorted(data.peaks.items())
    ]
    rows += [
        (f"not measured, {dtype}", f"left out of the defaults: {why}")
        for dtype, why in sorted((data.left_out or {}).items())
    ]
    rows += [
        (
            f"memory bandwidth, {kernel}",
            f"{format_si(b.bytes_per_s, 'B/s')} (spread {format_fraction(b.spread)})",
        )
        for kernel, b in sorted(data.bandwidth.items())
    ]
    rows += [
        (f"ridge point, {dtype}", f"{format_value(v)} FLOP/byte")
        for dtype, v in sorted(data.ridge.items())
    ]
    from aihpc.roofline.plot import roofline_png

    return kv_table(rows) + image(
        roofline_png(data), "Roofline: measured roofs and the kernels placed under them"
    )


def _pass(p: PassRecord | None, field: str, unit: str = "") -> str:
    if field == "seconds":
        return format_seconds(None if p is None else p.seconds)
    if field == "roofline_share":
        share = None if p is None else p.roofline_share
        return format_fraction(share) if share is not None else "unknown"
    rate = None if p is None else (p.flops_per_s if field == "flops_per_s" else p.bytes_per_s)
    return format_si(rate, unit)


def _operators(data: BenchOperatorsData) -> str:
    columns: list[Column[OperatorRowRecord]] = [
        ("operator", lambda r: format_value(r.name)),
        ("dtype", lambda r: format_value(r.dtype)),
        ("validation", lambda r: format_value(r.validation.status)),
        ("forward", lambda r: _pass(r.forward, "seconds")),
        ("fwd FLOP/s", lambda r: _pass(r.forward, "flops_per_s", "FLOP/s")),
        ("fwd B/s", lambda r: _pass(r.forward, "bytes_per_s", "B/s")),
        ("share of roof", lambda r: _pass(r.forward, "roofline_share")),
        ("fwd+bwd", lambda r: _pass(r.forward_backward, "seconds")),
        ("fwd+bwd FLOP/s", lambda r: _pass(r.forward_backward, "flops_per_s", "FLOP/s")),
    ]
    note = (
        f"<p>Failed validation (not timed): {esc(', '.join(data.failed))}</p>"
        if data.failed
        else ""
    )
    return note + _table(data.rows, columns)


def _network_mode(mode_name: str, m: ModeRecord) -> list[str]:
    layers = sorted(m.layers, key=lambda x: -x.seconds)[:15]
    layer_columns: list[Column[LayerRecord]] = [
        ("layer", lambda r: format_value(r.name)),
        ("type", lambda r: format_value(r.type)),
        ("time", lambda r: format_seconds(r.seconds)),
        ("ops", lambda r: format_si(r.ops)),
        ("FLOP/s", lambda r: format_si(r.flops_per_s, "FLOP/s")),
        (
            "share of roof",
            lambda r: (
                format_fraction(r.roofline_share) if r.roofline_share is not None else "unknown"
            ),
        ),
    ]
    operator_columns: list[Column[OperatorTypeRecord]] = [
        ("operator type", lambda r: format_value(r.type)),
        ("time", lambda r: format_seconds(r.seconds)),
        ("ops", lambda r: format_si(r.ops)),
    ]
    return [
        f"<h3>{esc(mode_name)}: {esc(format_seconds(m.seconds))} a step, "
        f"{esc(format_si(m.flops_per_s, 'FLOP/s'))}</h3>",
        _table(layers, layer_columns),
        _table(m.operators, operator_columns),
    ]


def _network(data: BenchNetworkData) -> str:
    parts = [part for name, m in sorted(data.modes.items()) for part in _network_mode(name, m)]
    return "".join(parts) or no_data()


def _training(data: BenchTrainingData) -> str:
    outcome = [
        ("model", format_value(data.model)),
        ("data set", format_value(data.dataset)),
        ("target", format_value(data.target)),
        ("outcome", format_value(data.stop_reason)),
        ("time to target", format_seconds(data.time_to_target_s)),
        ("throughput", format_si(data.throughput_samples_per_s, "samples/s")),
    ]
    columns: list[Column[TrainingEpoch]] = [
        ("epoch", lambda r: format_value(r.epoch)),
        ("seconds", lambda r: format_seconds(r.seconds)),
        ("train loss", lambda r: format_value(r.train_loss)),
        ("val accuracy", lambda r: format_fraction(r.val_accuracy, 2)),
    ]
    return kv_table(outcome) + _table(data.epochs, columns)


def _distributed(data: BenchDistributedData) -> str:
    par, vol = data.parallel, data.volume
    rows = [
        ("processes", format_value(data.procs)),
        ("backend", format_value(data.backend)),
        ("model", format_value(data.model)),
        ("scaling efficiency", format_fraction(data.scaling_efficiency)),
        ("step", format_seconds(par.step_s)),
        ("all-reduce", format_seconds(par.allreduce_s)),
        ("all-reduce share of step", format_fraction(data.allreduce_share)),
        ("overlapped with backward", format_seconds(par.overlap_s)),
        ("ring volume per rank, computed", format_si(vol.ring_bytes_per_rank_computed, "B")),
        ("bytes sent per rank, measured", format_si(vol.bytes_per_rank_measured, "B")),
    ]
    return kv_table(rows)


def _profile(data: ProfileData) -> str:
    memory = data.memory
    phase_columns: list[Column[tuple[str, PhaseTimeRecord]]] = [
        ("phase", lambda r: format_value(r[0])),
        ("time", lambda r: format_seconds(r[1].seconds)),
        ("share", lambda r: format_fraction(r[1].share)),
    ]
    operator_columns: list[Column[OperatorTimeRecord]] = [
        ("operator type", lambda r: format_value(r.type)),
        ("time", lambda r: format_seconds(r.seconds)),
        ("share", lambda r: format_fraction(r.share)),
    ]
    memory_rows = [
        ("parameters", memory.parameters),
        ("gradients", memory.gradients),
        ("optimizer_state", memory.optimizer_state),
        ("activations", memory.activations),
        ("other", memory.other),
        ("peak_bytes", memory.peak_bytes),
    ]
    parts = [
        _table(list(data.phases.items()), phase_columns),
        kv_table([(k, format_si(v, "B")) for k, v in memory_rows]),
        _table(data.operators, operator_columns, limit=20),
    ]
    sweep = data.sweep
    if sweep is not None:
        sweep_columns: list[Column[SweepRowRecord]] = [
            (format_value(sweep.dimension), lambda r: format_value(r.value)),
            ("step time", lambda r: format_seconds(r.step_seconds)),
            ("peak memory", lambda r: format_si(r.peak_bytes, "B")),
        ]
        parts.append(_table(sweep.rows, sweep_columns))
    return "".join(parts)


def _interval(r: RankedRecord) -> str:
    if r.interval is None:
        return ""
    lo, hi = r.interval
    return f"{format_fraction(lo)} .. {format_fraction(hi)}"


def _recommend(data: RecommendData) -> str:
    cx = data.complexity
    cands = sorted(data.candidates, key=lambda c: c.rank)
    columns: list[Column[RankedRecord]] = [
        ("rank", lambda r: format_value(r.rank)),
        ("candidate", lambda r: format_value(r.name)),
        ("predicted accuracy", lambda r: format_fraction(r.predicted_accuracy)),
        ("80 % interval", _interval),
        ("parameters", lambda r: format_value(r.params)),
        ("train ops/sample", lambda r: format_si(r.ops_per_sample)),
    ]
    measures = [("f1", cx.f1), ("n1", cx.n1), ("n3", cx.n3), ("t2", cx.t2)]
    return kv_table(
        [(k, format_value(v)) for k, v in [*measures, ("probe_error", cx.probe_error)]]
        + [
            ("domain", format_value(data.domain)),
            ("ranked by", format_value(data.method)),
            ("recommendation", format_value(data.choice)),
        ]
    ) + _table(cands, columns)


def _two(x: float) -> str:
    return f"{x:+.2f}"


def _recommend_validation(data: ValidationData) -> str:
    v = data.validation
    groups: dict[tuple[str, str], list[TaskScoreRecord]] = {}
    for s in v.scores:
        groups.setdefault((s.candidate_set, s.predictor), []).append(s)
    rows = [
        (group, predictor, mean(s.tau for s in ss), median(s.regret for s in ss))
        + (max(s.regret for s in ss),)
        for (group, predictor), ss in groups.items()
    ]
    if not rows:
        return no_data()
    cover = ", ".join(f"{esc(k)} {100 * c:.0f} %" for k, c in v.coverage.items())
    columns: list[Column[tuple[str, str, float, float, float]]] = [
        ("candidate set", lambda r: format_value(r[0])),
        ("predictor", lambda r: format_value(r[1])),
        ("Kendall tau", lambda r: _two(r[2])),
        ("regret, median", lambda r: format_fraction(r[3])),
        ("regret, worst", lambda r: format_fraction(r[4])),
    ]
    return f"<p>leave one family out; 80 % intervals hold the truth: {cover}</p>" + _table(
        rows, columns
    )


def _recommend_calibration(data: CalibrationData) -> str:
    prov = data.matcher.provenance
    return kv_table(
        [
            ("command", format_value(prov.command)),
            ("seed", format_value(prov.seed)),
            ("steps", format_value(prov.steps)),
            ("rows", format_value(prov.rows)),
            ("families", format_value(list(prov.families))),
        ]
    )


def _section(doc: ResultFile) -> tuple[str, str | None, str] | None:
    """A result document's section: its title, the device it was measured on, and its HTML;
    None for a kind the report has no section for (train-to-target's)."""
    match doc:
        case RooflineFile(data=data):
            return "Roofline", data.device, _roofline(data)
        case BenchOperatorsFile(data=data):
            return "Level 0: operators", data.device, _operators(data)
        case BenchNetworkFile(data=data):
            return "Level 1: network", data.device, _network(data)
        case BenchTrainingFile(data=data):
            return "Level 2: time to accuracy", data.device, _training(data)
        case BenchDistributedFile(data=data):
            return "Level 3: data-parallel training", data.device, _distributed(data)
        case ProfileFile(data=data):
            return "Workload characterisation", data.device, _profile(data)
        case RecommendFile(data=data):
            return "Model recommendation", None, _recommend(data)
        case CalibrationFile(data=data):
            return "Recommendation matcher calibration", None, _recommend_calibration(data)
        case ValidationFile(data=data):
            return "Recommendation validation", None, _recommend_validation(data)
        case InferFile(data=data):
            return "Inference under MLPerf LoadGen", data.device, render_infer(data)
    assert isinstance(doc, TrainToTargetFile), doc.kind()  # every other kind has its section
    return None


def render_sections(documents: Sequence[ResultFile]) -> str:
    """One ``<h2>`` section per result document, in the order given."""
    parts = []
    for doc in documents:
        section = _section(doc)
        if section is None:
            continue
        title, device, html = section
        where = " on ".join(x for x in (device, doc.environment.hostname) if x)
        parts.append(
            f'<h2>{esc(title)}</h2><p class="sub">{esc(where)}, {esc(doc.created_utc)}</p>'
        )
        parts.append(html)
    return "".join(parts)


def render_page(documents: Sequence[ResultFile], title: str) -> str:
    """A page of its own for result documents."""
    return (
        f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>{esc(title)}</title>'
        f"<style>{CSS}</style></head><body><h1>{esc(title)}</h1>{render_sections(documents)}</body></html>\n"
    )
