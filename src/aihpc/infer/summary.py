"""The summary ``aihpc infer`` prints: one line per scenario, the quality, validity, the time."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from aihpc.base.fmt import format_fraction, format_si
from aihpc.infer.record import tail_text


def _ms(seconds: Any) -> str:
    return "n/a" if seconds is None else f"{1e3 * seconds:.3g} ms"


def _scenario_line(name: str, s: dict[str, Any], tokens: bool) -> str:
    if name == "offline":
        line = (
            f"{format_si(s.get('samples_per_second'))} samples/s, "
            f"{format_si(s.get('ops_per_second'), 'OPS')}; "
            f"{format_fraction(s.get('peak_fraction'))} of the measured peak, "
            f"{format_fraction(s.get('nominal_peak_fraction'))} of nominal"
        )
        if s.get("joules_per_query") is not None:
            line += f", {format_si(s['joules_per_query'], 'J')}/query"
    elif name == "single-stream":
        line = f"p90 latency {_ms(s.get('p90_latency_s'))} (p50 {_ms(s.get('p50_latency_s'))})"
    elif not s.get("tests"):
        line = "no rate tried (see the reason above)"
    else:
        best = s.get("max_qps")
        line = (
            "no rate met the bound"
            if best is None
            else f"{best:.4g} queries/s within the bound (p99 {_ms(s.get('p99_latency_s'))})"
        )
        line += f"; {tail_text(s['timing'])}"
    if tokens and s.get("p99_first_token_s") is not None:
        line += (
            f"; first token p99 {_ms(s.get('p99_first_token_s'))}, per output token p99 "
            f"{_ms(s.get('p99_time_per_output_token_s'))}"
        )
    return f"  {name:<15} {line}"


def summary_text(data: dict[str, Any], out: Path) -> str:
    q = data["quality"]
    verdict = "VALID" if data["valid"] else "INVALID (" + "; ".join(data["invalid_reasons"]) + ")"
    tokens = data.get("generation") is not None
    lines = [
        f"aihpc infer {data['source']['label']}: {verdict}",
        f"  served on       {data['device']} in {data['dtype']}, {data['samples']} samples; "
        f"{format_si(data['ops_per_query'], 'OPS')} per query (counted)",
        f"  quality         {q['measure']} {q['served']:.4f} against float32's "
        f"{q['reference']:.4f} (kept {100 * q['kept']:.2f} %, at least 99 % needed)",
    ]
    if tokens:
        g = data["generation"]
        lines.append(
            f"  generation      prompts of {g['prompt_tokens']} tokens, "
            f"{g['new_tokens']} new tokens each"
        )
    lines.append(
        f"  batches         sizes {', '.join(map(str, data['batch_sizes']))}; "
        f"{_graphs(data['warm_up'])}"
    )
    lines += [_scenario_line(name, s, tokens) for name, s in data["scenarios"].items()]
    if data["short_test"]:
        lines.append(
            f"  short test      {data['seconds_per_test']:g} s a test, MLPerf's are 600 s "
            f"(--seconds 600 runs them so)"
        )
    lines.append(_duration_line(data["duration"]))
    lines.append(f"  record          {out / 'infer.json'} (LoadGen's logs in {out / 'loadgen'})")
    return "\n".join(lines)


def _graphs(warm_up: dict[str, Any]) -> str:
    graphs = [size for size, t in warm_up.items() if t["served_as"] == "cuda-graph"]
    if graphs:
        return f"served as CUDA graphs: {', '.join(graphs)}, the others eager"
    reasons = sorted({str(t["why_eager"]) for t in warm_up.values()})
    return f"served eager ({'; '.join(reasons)})"


def _duration_line(d: dict[str, Any]) -> str:
    return (
        f"  time            {d['total_s']:.0f} s in all; after the warm-up "
        f"{d['after_warm_up_actual_s']:.0f} s, {d['after_warm_up_predicted_s']:.0f} s predicted"
    )
