"""Report sections for the result files of the explaining commands (bench, profile, roofline)
and of ``aihpc infer`` (:mod:`aihpc.report.infer_section`).

:func:`render_sections` turns result documents (:mod:`aihpc.records.files`)
into HTML sections, one per document, in the order given; each kind has its
renderer, and a field a document lacks shows as "n/a" rather than failing.
:func:`render_page` wraps sections in a page of their own (``aihpc report
FILE.json``); :func:`aihpc.report.write_report` appends them to a run's report
when the run directory holds such files.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from aihpc.base.fmt import format_fraction, format_seconds, format_si, format_value
from aihpc.records.codec import convert
from aihpc.records.inference import InferData
from aihpc.report.infer_section import render_infer
from aihpc.report.markup import CSS, esc, image, kv_table, no_data

Column = tuple[str, Callable[[dict[str, Any]], str]]


def _get(row: Any, *keys: str) -> Any:
    for key in keys:
        row = row.get(key) if isinstance(row, dict) else None
    return row


def _table(rows: Sequence[Any], columns: Sequence[Column], limit: int = 200) -> str:
    rows = [r for r in rows if isinstance(r, dict)][:limit]
    if not rows:
        return no_data()
    head = "".join(f"<th>{esc(title)}</th>" for title, _ in columns)
    body = "".join(
        "<tr>" + "".join(f"<td>{esc(cell(r))}</td>" for _, cell in columns) + "</tr>" for r in rows
    )
    return f"<table><tr>{head}</tr>{body}</table>"


def _image(png: bytes | None, caption: str) -> str:
    return image(png, caption)


def _roofline(data: dict[str, Any]) -> str:
    rows = [
        (
            f"peak, {dtype}",
            f"{format_si(_get(p, 'flops_per_s'), 'FLOP/s')} "
            f"(spread {format_fraction(_get(p, 'spread'))}; {_get(p, 'kernel') or 'n/a'})"
            + (f"; {p['note']}" if _get(p, "note") else ""),
        )
        for dtype, p in sorted((data.get("peaks") or {}).items())
    ]
    rows += [
        (f"not measured, {dtype}", f"left out of the defaults: {why}")
        for dtype, why in sorted((data.get("left_out") or {}).items())
    ]
    rows += [
        (
            f"memory bandwidth, {kernel}",
            f"{format_si(_get(b, 'bytes_per_s'), 'B/s')} "
            f"(spread {format_fraction(_get(b, 'spread'))})",
        )
        for kernel, b in sorted((data.get("bandwidth") or {}).items())
    ]
    rows += [
        (f"ridge point, {dtype}", f"{format_value(v)} FLOP/byte")
        for dtype, v in sorted((data.get("ridge") or {}).items())
    ]
    from aihpc.roofline.plot import roofline_png

    return kv_table(rows) + _image(
        roofline_png(data), "Roofline: measured roofs and the kernels placed under them"
    )


def _pass(row: dict[str, Any], pass_name: str, field: str, unit: str = "") -> str:
    value = _get(row, pass_name, field)
    if field == "seconds":
        return format_seconds(value)
    if field == "roofline_share":
        return format_fraction(value) if value is not None else "unknown"
    return format_si(value, unit)


def _operators(data: dict[str, Any]) -> str:
    columns: list[Column] = [
        ("operator", lambda r: format_value(r.get("name"))),
        ("dtype", lambda r: format_value(r.get("dtype"))),
        ("validation", lambda r: format_value(_get(r, "validation", "status"))),
        ("forward", lambda r: _pass(r, "forward", "seconds")),
        ("fwd FLOP/s", lambda r: _pass(r, "forward", "flops_per_s", "FLOP/s")),
        ("fwd B/s", lambda r: _pass(r, "forward", "bytes_per_s", "B/s")),
        ("share of roof", lambda r: _pass(r, "forward", "roofline_share")),
        ("fwd+bwd", lambda r: _pass(r, "forward_backward", "seconds")),
        ("fwd+bwd FLOP/s", lambda r: _pass(r, "forward_backward", "flops_per_s", "FLOP/s")),
    ]
    failed = data.get("failed") or []
    note = (
        f"<p>Failed validation (not timed): {esc(', '.join(map(str, failed)))}</p>"
        if failed
        else ""
    )
    return note + _table(data.get("rows") or [], columns)


def _network(data: dict[str, Any]) -> str:
    parts = []
    for mode, m in sorted((data.get("modes") or {}).items()):
        if not isinstance(m, dict):
            continue
        layers = sorted(
            (x for x in m.get("layers") or [] if isinstance(x, dict)),
            key=lambda x: -(x.get("seconds") or 0),
        )[:15]
        parts.append(
            f"<h3>{esc(mode)}: {esc(format_seconds(m.get('seconds')))} a step, "
            f"{esc(format_si(m.get('flops_per_s'), 'FLOP/s'))}</h3>"
        )
        parts.append(
            _table(
                layers,
                [
                    ("layer", lambda r: format_value(r.get("name"))),
                    ("type", lambda r: format_value(r.get("type"))),
                    ("time", lambda r: format_seconds(r.get("seconds"))),
                    ("ops", lambda r: format_si(r.get("ops"))),
                    ("FLOP/s", lambda r: format_si(r.get("flops_per_s"), "FLOP/s")),
                    (
                        "share of roof",
                        lambda r: (
                            format_fraction(r.get("roofline_share"))
                            if r.get("roofline_share") is not None
                            else "unknown"
                        ),
                    ),
                ],
            )
        )
        parts.append(
            _table(
                m.get("operators") or [],
                [
                    ("operator type", lambda r: format_value(r.get("type"))),
                    ("time", lambda r: format_seconds(r.get("seconds"))),
                    ("ops", lambda r: format_si(r.get("ops"))),
                ],
            )
        )
    return "".join(parts) or no_data()


def _training(data: dict[str, Any]) -> str:
    outcome = [
        ("model", format_value(data.get("model"))),
        ("data set", format_value(data.get("dataset"))),
        ("target", format_value(data.get("target"))),
        ("outcome", format_value(data.get("stop_reason"))),
        ("time to target", format_seconds(data.get("time_to_target_s"))),
        ("throughput", format_si(data.get("throughput_samples_per_s"), "samples/s")),
    ]
    curve = _table(
        data.get("epochs") or [],
        [
            ("epoch", lambda r: format_value(r.get("epoch"))),
            ("seconds", lambda r: format_seconds(r.get("seconds"))),
            ("train loss", lambda r: format_value(r.get("train_loss"))),
            ("val accuracy", lambda r: format_fraction(r.get("val_accuracy"), 2)),
        ],
    )
    return kv_table(outcome) + curve


def _distributed(data: dict[str, Any]) -> str:
    par = data.get("parallel") or {}
    vol = data.get("volume") or {}
    rows = [
        ("processes", format_value(data.get("procs"))),
        ("backend", format_value(data.get("backend"))),
        ("model", format_value(data.get("model"))),
        ("scaling efficiency", format_fraction(data.get("scaling_efficiency"))),
        ("step", format_seconds(par.get("step_s"))),
        ("all-reduce", format_seconds(par.get("allreduce_s"))),
        ("all-reduce share of step", format_fraction(data.get("allreduce_share"))),
        ("overlapped with backward", format_seconds(par.get("overlap_s"))),
        ("ring volume per rank, computed", format_si(vol.get("ring_bytes_per_rank_computed"), "B")),
        ("bytes sent per rank, measured", format_si(vol.get("bytes_per_rank_measured"), "B")),
    ]
    return kv_table(rows)


def _profile(data: dict[str, Any]) -> str:
    phases = [
        {"phase": k, **v} for k, v in (data.get("phases") or {}).items() if isinstance(v, dict)
    ]
    memory = data.get("memory") or {}
    parts = [
        _table(
            phases,
            [
                ("phase", lambda r: format_value(r.get("phase"))),
                ("time", lambda r: format_seconds(r.get("seconds"))),
                ("share", lambda r: format_fraction(r.get("share"))),
            ],
        ),
        kv_table(
            [
                (k, format_si(memory.get(k), "B"))
                for k in (
                    "parameters",
                    "gradients",
                    "optimizer_state",
                    "activations",
                    "other",
                    "peak_bytes",
                )
            ]
        ),
        _table(
            data.get("operators") or [],
            [
                ("operator type", lambda r: format_value(r.get("type"))),
                ("time", lambda r: format_seconds(r.get("seconds"))),
                ("share", lambda r: format_fraction(r.get("share"))),
            ],
            limit=20,
        ),
    ]
    sweep = data.get("sweep")
    if isinstance(sweep, dict):
        parts.append(
            _table(
                sweep.get("rows") or [],
                [
                    (format_value(sweep.get("dimension")), lambda r: format_value(r.get("value"))),
                    ("step time", lambda r: format_seconds(r.get("step_seconds"))),
                    ("peak memory", lambda r: format_si(r.get("peak_bytes"), "B")),
                ],
            )
        )
    return "".join(parts)


def _interval(r: dict[str, Any]) -> str:
    lo, hi = (r.get("interval") or [None, None])[:2]
    return "" if lo is None else f"{format_fraction(lo)} .. {format_fraction(hi)}"


def _recommend(data: dict[str, Any]) -> str:
    cx = data.get("complexity") or {}
    cands = sorted(
        [c for c in data.get("candidates") or [] if isinstance(c, dict)],
        key=lambda c: c.get("rank") or 0,
    )
    return kv_table(
        [(k, format_value(cx.get(k))) for k in ("f1", "n1", "n3", "t2", "probe_error")]
        + [
            ("domain", format_value(data.get("domain"))),
            ("ranked by", format_value(data.get("method"))),
            ("recommendation", format_value(data.get("choice"))),
        ]
    ) + _table(
        cands,
        [
            ("rank", lambda r: format_value(r.get("rank"))),
            ("candidate", lambda r: format_value(r.get("name"))),
            ("predicted accuracy", lambda r: format_fraction(r.get("predicted_accuracy"))),
            ("80 % interval", _interval),
            ("parameters", lambda r: format_value(r.get("params"))),
            ("train ops/sample", lambda r: format_si(r.get("ops_per_sample"))),
        ],
    )


def _two(x: Any) -> str:
    return (
        f"{x:+.2f}" if isinstance(x, (int, float)) and not isinstance(x, bool) else format_value(x)
    )


def _recommend_validation(data: dict[str, Any]) -> str:
    from statistics import mean, median

    v = data.get("validation") or {}
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for s in v.get("scores") or []:
        if isinstance(s, dict):
            groups.setdefault((str(s.get("candidate_set")), str(s.get("predictor"))), []).append(s)
    rows = [
        {
            "set": k[0],
            "predictor": k[1],
            "tau": mean(float(s["tau"]) for s in ss),
            "median": median(float(s["regret"]) for s in ss),
            "worst": max(float(s["regret"]) for s in ss),
        }
        for k, ss in groups.items()
    ]
    if not rows:
        return no_data()
    cover = ", ".join(f"{esc(k)} {100 * c:.0f} %" for k, c in (v.get("coverage") or {}).items())
    return f"<p>leave one family out; 80 % intervals hold the truth: {cover}</p>" + _table(
        rows,
        [
            ("candidate set", lambda r: format_value(r["set"])),
            ("predictor", lambda r: format_value(r["predictor"])),
            ("Kendall tau", lambda r: _two(r["tau"])),
            ("regret, median", lambda r: format_fraction(r["median"])),
            ("regret, worst", lambda r: format_fraction(r["worst"])),
        ],
    )


def _recommend_calibration(data: dict[str, Any]) -> str:
    prov = (data.get("matcher") or {}).get("provenance") or {}
    return kv_table(
        [(k, format_value(prov.get(k))) for k in ("command", "seed", "steps", "rows", "families")]
    )


RENDERERS: dict[str, tuple[str, Callable[[dict[str, Any]], str]]] = {
    "roofline": ("Roofline", _roofline),
    "bench-operators": ("Level 0: operators", _operators),
    "bench-network": ("Level 1: network", _network),
    "bench-training": ("Level 2: time to accuracy", _training),
    "bench-distributed": ("Level 3: data-parallel training", _distributed),
    "profile": ("Workload characterisation", _profile),
    "recommend": ("Model recommendation", _recommend),
    "recommend-calibration": ("Recommendation matcher calibration", _recommend_calibration),
    "recommend-validation": ("Recommendation validation", _recommend_validation),
    "infer": (
        "Inference under MLPerf LoadGen",
        lambda d: render_infer(convert(d, InferData, "infer")),
    ),
}


def render_sections(documents: Sequence[dict[str, Any]]) -> str:
    """One ``<h2>`` section per result document, in the order given."""
    parts = []
    for doc in documents:
        title, render = RENDERERS[doc["kind"]]
        env = doc.get("environment") or {}
        where = " on ".join(str(x) for x in (doc["data"].get("device"), env.get("hostname")) if x)
        parts.append(
            f'<h2>{esc(title)}</h2><p class="sub">{esc(where)}, '
            f"{esc(doc.get('created_utc', ''))}</p>"
        )
        parts.append(render(doc["data"]))
    return "".join(parts)


def render_page(documents: Sequence[dict[str, Any]], title: str) -> str:
    """A page of its own for result documents."""
    return (
        f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>{esc(title)}</title>'
        f"<style>{CSS}</style></head><body><h1>{esc(title)}</h1>{render_sections(documents)}</body></html>\n"
    )
