"""The summary ``aihpc infer`` prints: one line per scenario, the quality, validity, the time."""

from __future__ import annotations

from pathlib import Path

from aihpc.base.fmt import format_fraction, format_si
from aihpc.infer.record import tail_text
from aihpc.records.codec import value_or_none
from aihpc.records.inference import InferData, InferDuration, WarmUpRecord
from aihpc.records.inference_scenarios import Scenario, ServerScenario, StreamScenario


def _ms(seconds: float | None) -> str:
    return "n/a" if seconds is None else f"{1e3 * seconds:.3g} ms"


def _stream_line(name: str, s: StreamScenario) -> str:
    if name == "single-stream":
        return f"p90 latency {_ms(s.p90_latency_s)} (p50 {_ms(s.p50_latency_s)})"
    line = (
        f"{format_si(s.samples_per_second)} samples/s, "
        f"{format_si(s.ops_per_second, 'OPS')}; "
        f"{format_fraction(value_or_none(s.peak_fraction))} of the measured peak, "
        f"{format_fraction(value_or_none(s.nominal_peak_fraction))} of nominal"
    )
    if s.joules_per_query is not None:
        line += f", {format_si(s.joules_per_query, 'J')}/query"
    return line


def _server_line(s: ServerScenario) -> str:
    if not s.tests:
        return "no rate tried (see the reason above)"
    best = s.max_qps
    line = (
        "no rate met the bound"
        if best is None
        else f"{best:.4g} queries/s within the bound (p99 {_ms(value_or_none(s.p99_latency_s))})"
    )
    return line + f"; {tail_text(s.timing)}"


def _scenario_line(name: str, s: Scenario, tokens: bool) -> str:
    line = _server_line(s) if isinstance(s, ServerScenario) else _stream_line(name, s)
    first_token = value_or_none(s.p99_first_token_s)
    if tokens and first_token is not None:
        line += (
            f"; first token p99 {_ms(first_token)}, per output token p99 "
            f"{_ms(value_or_none(s.p99_time_per_output_token_s))}"
        )
    return f"  {name:<15} {line}"


def summary_text(data: InferData, out: Path) -> str:
    """The summary of ``data``, written to the folder ``out``."""
    q = data.quality
    verdict = "VALID" if data.valid else "INVALID (" + "; ".join(data.invalid_reasons) + ")"
    g = data.generation
    lines = [
        f"aihpc infer {data.source.label}: {verdict}",
        f"  served on       {data.device} in {data.dtype}, {data.samples} samples; "
        f"{format_si(data.ops_per_query, 'OPS')} per query (counted)",
        f"  quality         {q.measure} {q.served or 0.0:.4f} against float32's "
        f"{q.reference or 0.0:.4f} (kept {100 * (q.kept or 0.0):.2f} %, at least 99 % needed)",
    ]
    if g is not None:
        lines.append(
            f"  generation      prompts of {g.prompt_tokens} tokens, {g.new_tokens} new tokens each"
        )
    lines.append(
        f"  batches         sizes {', '.join(map(str, data.batch_sizes or ()))}; "
        f"{_graphs(data.warm_up or {})}"
    )
    lines += [_scenario_line(name, s, g is not None) for name, s in data.scenarios.items()]
    if data.short_test:
        lines.append(
            f"  short test      {data.seconds_per_test:g} s a test, MLPerf's are 600 s "
            f"(--seconds 600 runs them so)"
        )
    if data.duration is not None:
        lines.append(_duration_line(data.duration))
    lines.append(f"  record          {out / 'infer.json'} (LoadGen's logs in {out / 'loadgen'})")
    return "\n".join(lines)


def _graphs(warm_up: dict[str, WarmUpRecord]) -> str:
    graphs = [size for size, t in warm_up.items() if t.served_as == "cuda-graph"]
    if graphs:
        return f"served as CUDA graphs: {', '.join(graphs)}, the others eager"
    reasons = sorted({str(t.why_eager) for t in warm_up.values()})
    return f"served eager ({'; '.join(reasons)})"


def _duration_line(d: InferDuration) -> str:
    return (
        f"  time            {d.total_s:.0f} s in all; after the warm-up "
        f"{d.after_warm_up_actual_s:.0f} s, {d.after_warm_up_predicted_s:.0f} s predicted"
    )
