"""The report's section of an inference result (``infer.json``, kind ``infer``).

What was served where (the model, the device and dtype, the operations per query, the
quality against float32, the batch sizes and how each was served, the bounds, a short
test, the time predicted and taken, validity), one row per scenario with its figure and
latency percentiles, the server's tests (the throughput-latency curve as numbers, whether
the system kept up, the slowest 1 %'s queueing and compute, the batches by size), and the
two plots of :mod:`aihpc.report.infer_plots`.  A field the record lacks shows as "n/a".
"""

from __future__ import annotations

from aihpc.base.fmt import format_fraction, format_si, format_value
from aihpc.records.codec import value_or_none
from aihpc.records.inference import InferData, InferDuration, InferQuality
from aihpc.records.inference_scenarios import (
    InferTest,
    Scenario,
    ServerScenario,
    StreamScenario,
    loadgen_number,
    loadgen_seconds,
)
from aihpc.report.infer_plots import achieved, plot_latency, plot_throughput_latency
from aihpc.report.markup import esc, image, kv_table, no_data


def _ms(seconds: float | None) -> str:
    """A latency: ``"2.16 ms"``, ``"1.65 s"``."""
    if seconds is None:
        return "n/a"
    return f"{seconds:.3g} s" if seconds >= 1 else f"{1e3 * seconds:.3g} ms"


def _figure(name: str, s: Scenario) -> str:
    """The figure MLPerf reports for scenario ``name``."""
    if isinstance(s, ServerScenario):
        best = s.max_qps
        return "no rate met the bound" if best is None else f"{best:.4g} queries/s within the bound"
    if name == "offline":
        return f"{format_value(s.samples_per_second)} samples/s"
    return f"p90 {_ms(s.p90_latency_s)}"


def _quality(q: InferQuality) -> str:
    return (
        f"{q.measure} {format_value(q.served)} in {q.dtype} against "
        f"float32's {format_value(q.reference)} on {q.samples} samples: "
        f"{format_fraction(q.kept, 2)} kept (99 % needed)"
    )


def _bounds(data: InferData) -> str:
    b = data.bounds
    pct = f"p{100 * b.percentile:g}"
    if b.latency is not None:
        return f"{pct} latency <= {_ms(b.latency)}"
    return f"{pct} time to first token <= {_ms(b.ttft)}, per output token <= {_ms(b.tpot)}"


def _batches(data: InferData) -> str:
    sizes = data.batch_sizes
    if not sizes:
        return "n/a"
    warm = data.warm_up or {}
    graphs = [str(b) for b in sizes if str(b) in warm and warm[str(b)].served_as == "cuda-graph"]
    how = f"CUDA graphs at {', '.join(graphs)}, the others eager" if graphs else "all eager"
    return f"{', '.join(map(str, sizes))}, each warmed up before LoadGen; {how}"


def _seconds(data: InferData) -> str:
    seconds = format_value(data.seconds_per_test)
    if data.short_test:
        return f"{seconds} (a short test: MLPerf's are 600 s)"
    return seconds


def _time(d: InferDuration | None) -> str:
    if d is None:
        return "n/a"
    return (
        f"{format_value(d.total_s)} s in all; after the warm-up "
        f"{format_value(d.after_warm_up_actual_s)} s, "
        f"{format_value(d.after_warm_up_predicted_s)} s predicted"
    )


def _summary(data: InferData) -> str:
    src = data.source
    g = data.generation
    valid = "valid" if data.valid else "INVALID: " + "; ".join(data.invalid_reasons)
    rows = [
        ("served", format_value(src.label)),
        ("task", format_value(src.task)),
        ("parameters", format_si(src.num_params, count=True)),
        ("device", f"{data.device} in {data.dtype}"),
        ("operator threads", format_value(data.threads)),
        ("samples", format_value(data.samples)),
        ("operations per query", format_si(data.ops_per_query, "OPS") + " (counted)"),
        ("quality", _quality(data.quality)),
        ("batch sizes", _batches(data)),
        ("server bound", _bounds(data)),
        ("seconds per test", _seconds(data)),
        ("time", _time(data.duration)),
        ("LoadGen", format_value(data.loadgen_version)),
        ("result", valid),
    ]
    if g:
        rows.insert(5, ("generation", f"prompts of {g.prompt_tokens}, {g.new_tokens} new tokens"))
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


def _scenario_cells(name: str, s: Scenario) -> list[str]:
    stream = s if isinstance(s, StreamScenario) else None
    return [
        name,
        _figure(name, s),
        _ms(stream.p50_latency_s if stream else None),
        _ms(stream.p90_latency_s if stream else None),
        _ms(value_or_none(s.p99_latency_s)),
        _ms(value_or_none(s.p99_first_token_s)),
        _ms(value_or_none(s.p99_time_per_output_token_s)),
        format_si(stream.ops_per_second if stream else None, "OPS"),
        format_fraction(value_or_none(stream.peak_fraction) if stream else None),
        format_si(stream.joules_per_query if stream else None, "J"),
        str(len(s.tests)),
        "yes" if s.valid else "NO",
    ]


def _rows_table(columns: tuple[str, ...], rows: list[list[str]]) -> str:
    if not rows:
        return no_data()
    head = "".join(f"<th>{esc(c)}</th>" for c in columns)
    body = "".join("<tr>" + "".join(f"<td>{esc(c)}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def _server_row(i: int, t: InferTest) -> list[str]:
    r = t.results
    tail = t.timing.tail if t.timing is not None else None
    sizes = t.batch_sizes or {}
    return [
        str(i),
        format_value(t.settings.target_qps),
        format_value(loadgen_number(r, "scheduled_samples_per_sec")),
        format_value(achieved(t)),
        format_value(value_or_none(t.kept_up)),
        _ms(loadgen_seconds(r, "99.00_percentile_latency_ns")),
        _ms(loadgen_seconds(r, "first_token_99.00_percentile_latency_ns")),
        f"{_ms(tail.queueing_s)} + {_ms(tail.compute_s)}" if tail else "n/a",
        ", ".join(f"{n} x {b}" for b, n in sizes.items()) or format_value(t.max_batch),
        format_value(r.get("validity")),
    ]


def _server_tests(data: InferData) -> str:
    server = data.scenarios.server
    tests = server.tests if server is not None else ()
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


def render_infer(data: InferData) -> str:
    """The section's HTML (the module docstring)."""
    rows = [_scenario_cells(name, s) for name, s in data.scenarios.items()]
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
