"""The report's section of an inference result (``infer.json``, kind ``infer``).

What was served where (the model, the device and dtype, the operations per query, the
quality against float32, the batch sizes and how each was served, the bounds, a short
test, the time predicted and taken, validity), one row per scenario with its figure and
latency percentiles, the server's tests (the throughput-latency curve as numbers, whether
the system kept up, the slowest 1 %'s queueing and compute, the batches by size), and the
two plots of :mod:`aihpc.report.infer_plots`.  A field the record lacks shows as "n/a".
"""

from __future__ import annotations

from typing import Any

from aihpc.base.fmt import format_fraction, format_si, format_value
from aihpc.report.infer_plots import achieved, plot_latency, plot_throughput_latency
from aihpc.report.markup import esc, image, kv_table, no_data


def _ms(seconds: Any) -> str:
    """A latency: ``"2.16 ms"``, ``"1.65 s"``."""
    if seconds is None:
        return "n/a"
    value = float(seconds)
    return f"{value:.3g} s" if value >= 1 else f"{1e3 * value:.3g} ms"


def _figure(name: str, s: dict[str, Any]) -> str:
    """The figure MLPerf reports for scenario ``name``."""
    if name == "offline":
        return f"{format_value(s.get('samples_per_second'))} samples/s"
    if name == "single-stream":
        return f"p90 {_ms(s.get('p90_latency_s'))}"
    best = s.get("max_qps")
    return "no rate met the bound" if best is None else f"{best:.4g} queries/s within the bound"


def _quality(q: dict[str, Any]) -> str:
    if not q:
        return "n/a"
    return (
        f"{q.get('measure')} {format_value(q.get('served'))} in {q.get('dtype')} against "
        f"float32's {format_value(q.get('reference'))} on {q.get('samples')} samples: "
        f"{format_fraction(q.get('kept'), 2)} kept (99 % needed)"
    )


def _bounds(data: dict[str, Any]) -> str:
    b = data.get("bounds") or {}
    pct = f"p{100 * (b.get('percentile') or 0.99):g}"
    if b.get("latency") is not None:
        return f"{pct} latency <= {_ms(b['latency'])}"
    return f"{pct} time to first token <= {_ms(b.get('ttft'))}, per output token <= " + _ms(
        b.get("tpot")
    )


def _batches(data: dict[str, Any]) -> str:
    sizes = data.get("batch_sizes")
    if not sizes:
        return "n/a"
    warm = data.get("warm_up") or {}
    graphs = [str(b) for b in sizes if (warm.get(str(b)) or {}).get("served_as") == "cuda-graph"]
    how = f"CUDA graphs at {', '.join(graphs)}, the others eager" if graphs else "all eager"
    return f"{', '.join(map(str, sizes))}, each warmed up before LoadGen; {how}"


def _seconds(data: dict[str, Any]) -> str:
    seconds = format_value(data.get("seconds_per_test"))
    if data.get("short_test"):
        return f"{seconds} (a short test: MLPerf's are 600 s)"
    return seconds


def _time(d: dict[str, Any]) -> str:
    if not d:
        return "n/a"
    return (
        f"{format_value(d.get('total_s'))} s in all; after the warm-up "
        f"{format_value(d.get('after_warm_up_actual_s'))} s, "
        f"{format_value(d.get('after_warm_up_predicted_s'))} s predicted"
    )


def _summary(data: dict[str, Any]) -> str:
    src = data.get("source") or {}
    g = data.get("generation")
    valid = (
        "valid" if data.get("valid") else "INVALID: " + "; ".join(data.get("invalid_reasons") or [])
    )
    rows = [
        ("served", format_value(src.get("label"))),
        ("task", format_value(src.get("task"))),
        ("parameters", format_si(src.get("num_params"), count=True)),
        ("device", f"{data.get('device')} in {data.get('dtype')}"),
        ("operator threads", format_value(data.get("threads"))),
        ("samples", format_value(data.get("samples"))),
        ("operations per query", format_si(data.get("ops_per_query"), "OPS") + " (counted)"),
        ("quality", _quality(data.get("quality") or {})),
        ("batch sizes", _batches(data)),
        ("server bound", _bounds(data)),
        ("seconds per test", _seconds(data)),
        ("time", _time(data.get("duration") or {})),
        ("LoadGen", format_value(data.get("loadgen_version"))),
        ("result", valid),
    ]
    if g:
        rows.insert(
            5, ("generation", f"prompts of {g['prompt_tokens']}, {g['new_tokens']} new tokens")
        )
    return kv_table(rows)


SCENARIO_COLUMNS = (
    "scenario",
    "figure",
    "p50",
    "p90",
    "p99",
    "first token p99",
    "per token p99",
    "OPS",
    "share of peak",
    "J/query",
    "tests",
    "valid",
)


def _scenario_cells(name: str, s: dict[str, Any]) -> list[str]:
    return [
        name,
        _figure(name, s),
        _ms(s.get("p50_latency_s")),
        _ms(s.get("p90_latency_s")),
        _ms(s.get("p99_latency_s")),
        _ms(s.get("p99_first_token_s")),
        _ms(s.get("p99_time_per_output_token_s")),
        format_si(s.get("ops_per_second"), "OPS"),
        format_fraction(s.get("peak_fraction")),
        format_si(s.get("joules_per_query"), "J"),
        str(len(s.get("tests") or [])),
        "yes" if s.get("valid") else "NO",
    ]


def _rows_table(columns: tuple[str, ...], rows: list[list[str]]) -> str:
    if not rows:
        return no_data()
    head = "".join(f"<th>{esc(c)}</th>" for c in columns)
    body = "".join("<tr>" + "".join(f"<td>{esc(c)}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def _ns(results: dict[str, Any], key: str) -> float | None:
    value = results.get(key)
    return None if value is None else float(value) / 1e9


def _server_row(i: int, t: dict[str, Any]) -> list[str]:
    r = t.get("results") or {}
    tail = (t.get("timing") or {}).get("tail") or {}
    sizes = t.get("batch_sizes") or {}
    return [
        str(i),
        format_value((t.get("settings") or {}).get("target_qps")),
        format_value(r.get("scheduled_samples_per_sec")),
        format_value(achieved(t)),
        format_value(t.get("kept_up")),
        _ms(_ns(r, "99.00_percentile_latency_ns")),
        _ms(_ns(r, "first_token_99.00_percentile_latency_ns")),
        f"{_ms(tail.get('queueing_s'))} + {_ms(tail.get('compute_s'))}" if tail else "n/a",
        ", ".join(f"{n} x {b}" for b, n in sizes.items()) or format_value(t.get("max_batch")),
        format_value(r.get("validity")),
    ]


def _server_tests(data: dict[str, Any]) -> str:
    tests = ((data.get("scenarios") or {}).get("server") or {}).get("tests") or []
    rows = [_server_row(i, t) for i, t in enumerate(tests, start=1)]
    columns = (
        "test",
        "target queries/s",
        "scheduled/s",
        "completed samples/s",
        "kept up",
        "p99",
        "first token p99",
        "slowest 1 %: queueing + compute",
        "batches x size",
        "LoadGen",
    )
    return "<h3>The server's tests</h3>" + _rows_table(columns, rows) if rows else ""


def render_infer(data: dict[str, Any]) -> str:
    """The section's HTML (the module docstring)."""
    scenarios = data.get("scenarios") or {}
    rows = [_scenario_cells(name, s) for name, s in scenarios.items() if isinstance(s, dict)]
    return (
        _summary(data)
        + _rows_table(SCENARIO_COLUMNS, rows)
        + _server_tests(data)
        + image(
            plot_latency(data),
            "Latency distribution: the share of each scenario's samples per bin (log time)",
        )
        + image(
            plot_throughput_latency(data),
            "Throughput against latency: the server's tests (valid, invalid), its bound, "
            "the offline rate",
        )
    )
