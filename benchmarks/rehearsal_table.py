"""The tables and the plot of benchmarks/scale_rehearsal.py: Markdown, JSON, and sizes and times
against workers, log-log (matplotlib where it imports, else an SVG written here)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b")


def fmt_bytes(n: float | None) -> str:
    if n is None:
        return "—"
    for unit, scale in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{n:.0f} B"


def fmt_s(s: float | None) -> str:
    if s is None:
        return "—"
    return f"{s * 1000:.3g} ms" if s < 1 else f"{s:.3g} s" if s < 100 else f"{s:.0f} s"


def fmt_n(n: float | None, digits: int = 3) -> str:
    if n is None:
        return "—"
    return f"{n:,.0f}" if n >= 10**digits else f"{n:.{digits}g}"


def master_rate(m: dict[str, Any]) -> float | None:
    """Epoch results per second of the master's own time (so far, for a stopped run)."""
    if m.get("results_per_s") is not None:
        return m["results_per_s"]
    return m["results"] / m["master_s"] if m.get("master_s") else None


def rate_cell(r: dict[str, Any]) -> str:
    """The master's rate over the run, the rate the workers need, and the rate after the first
    tenth (which holds the start: the search's processes, the first fill of every slot)."""
    m = r["master"]
    marks = {c["tenth"]: c for c in m.get("checkpoints") or []}
    text = f"{fmt_n(master_rate(m))} ({fmt_n(r['needed_results_per_s'])})"
    if 1 in marks and 10 in marks and marks[10]["master_s"] > marks[1]["master_s"]:
        late = (marks[10]["results"] - marks[1]["results"]) / (
            marks[10]["master_s"] - marks[1]["master_s"]
        )
        text += f"; {fmt_n(late)} after tenth 1"
    return text


def results_json_cell(row: dict[str, Any]) -> str:
    if row["stages"].get("results.json") != "ok":
        return row["stages"].get("results.json", "—")
    t = row["results_json"]
    return (
        f"{fmt_s(t['build_s'] + t['write_s'])} (build {fmt_s(t['build_s'])}, write "
        f"{fmt_s(t['write_s'])}); MLPerf stop {fmt_s(t['mlperf_stop_s'])}, "
        f"summary {fmt_s(t['summary_s'])}"
    )


def cli_cell(row: dict[str, Any], command: str) -> str:
    stage = row[command]
    if stage["seconds"] is None or not stage.get("passed") and command != "verify":
        return stage["status"]
    extra = {
        "report": lambda: fmt_bytes(row["files"]["report_html"]) + " HTML",
        "verify": lambda: (
            "VERIFIED" if stage["passed"] else f"NOT VERIFIED: {stage['last_line'][:80]}"
        ),
        "rank": lambda: "ok",
    }[command]()
    return f"{fmt_s(stage['seconds'])}, {extra}"


def latency_cell(m: dict[str, Any]) -> str:
    """The decision latency, p50 / p99: the whole run's, or a stopped run's in its last tenth."""
    if m.get("latency_p50") is not None:
        return f"{fmt_s(m['latency_p50'])} / {fmt_s(m['latency_p99'])}"
    if m.get("tenth_p50") is not None:
        return f"{fmt_s(m['tenth_p50'])} / {fmt_s(m['tenth_p99'])} (so far)"
    return "—"


def main_table(rows: list[dict[str, Any]]) -> list[str]:
    lines = [
        "| workers | virtual min | trials | epochs (expected) | results.json "
        "| store (sqlite + WAL) | MLPerf log | weights peak: apparent, files | weights final "
        "| results.json write | report | verify | rank | master peak RSS (largest helper process: TPE or counting) "
        "| results/s (needed) | decision p50 / p99 |",
        "|" + "---|" * 16,
    ]
    for r in rows:
        m, f = r["master"], r["files"]
        peak, final = m.get("weights_peak") or {}, f["weights"]
        store = m.get("store_bytes") or f["store"]
        lat = latency_cell(m)
        lines.append(
            f"| {r['workers']:,} | {r['minutes']:g} | {fmt_n(r['trials'])} | {fmt_n(r['epochs'])} "
            f"({fmt_n(r['expected_epochs'])}) "
            f"| {fmt_bytes(f['results_json'])} | {fmt_bytes(store)} | {fmt_bytes(f['mlperf_log'])} "
            f"| {fmt_bytes(peak.get('apparent'))}, {fmt_n(peak.get('files'))} "
            f"| {fmt_bytes(final['apparent'])}, {fmt_n(final['files'])} | {results_json_cell(r)} "
            f"| {cli_cell(r, 'report')} | {cli_cell(r, 'verify')} | {cli_cell(r, 'rank')} "
            f"| {fmt_bytes(m.get('peak_rss'))} ({fmt_bytes(r.get('tpe_peak_rss'))}) "
            f"| {rate_cell(r)} | {lat} |"
        )
    return lines


def tenths_table(rows: list[dict[str, Any]], title: str, cell) -> list[str]:
    """One row per size, one column per tenth of the virtual run."""
    lines = [
        f"**{title}**",
        "",
        "| workers | " + " | ".join(str(k) for k in range(1, 11)) + " |",
        "|" + "---|" * 11,
    ]
    for r in rows:
        marks = {c["tenth"]: c for c in (r["master"].get("checkpoints") or []) if c["tenth"] > 0}
        lines.append(
            f"| {r['workers']:,} | "
            + " | ".join(cell(marks[k]) if k in marks else "—" for k in range(1, 11))
            + " |"
        )
    return lines + [""]


def stages_table(rows: list[dict[str, Any]]) -> list[str]:
    names = ("init", "master", "after", "results.json", "report", "verify", "rank")
    lines = [
        "| workers | " + " | ".join(names) + " | how far the master got |",
        "|" + "---|" * (len(names) + 2),
    ]
    for r in rows:
        m = r["master"]
        w = m.get("worker_s") or {}
        far = (
            (
                f"{m.get('virtual_s', 0) / 60:.3g} of {r['minutes']:g} virtual min, "
                f"{fmt_n(m.get('results'))} results, {fmt_n(m.get('counted'))} trials counted; "
                f"master {fmt_s(m.get('master_s'))}, "
                f"workers {fmt_s(w.get('worker'))} (counting {fmt_s(w.get('count'))}, files "
                f"{fmt_s(w.get('write'))}, scans {fmt_s(w.get('scan'))})"
            )
            if m
            else "—"
        )
        lines.append(
            f"| {r['workers']:,} | "
            + " | ".join(r["stages"].get(n, "—") for n in names)
            + f" | {far} |"
        )
    return lines


def markdown(rows: list[dict[str, Any]], meta: dict[str, Any]) -> str:
    head = [
        "# Scale rehearsal (benchmarks/scale_rehearsal.py)",
        "",
        f"{meta['minutes']:g} virtual minutes, {meta['epoch_seconds']:g}-s epochs, weight files of "
        f"{fmt_bytes(meta['weight_bytes'])} (sparse), data set {meta['dataset']}, "
        f"{meta['device']} defaults; "
        f"operations counted with {meta['counter']}; stage timeout "
        f"{'none' if not meta['stage_timeout'] else fmt_s(meta['stage_timeout'])}; {meta['date']}, "
        f"{meta['cores']} cores, load average {meta['load_before'][0]:.2f} before, "
        f"{meta.get('load_after', [0])[0]:.2f} after (timings under that load).",
        "",
    ]
    tenths = [
        *tenths_table(
            rows,
            "Master rate per tenth of the virtual run (epoch results per second "
            "of the master's own time)",
            lambda c: fmt_n(c["results_per_s"]),
        ),
        *tenths_table(
            rows,
            "Decision latency per tenth, p50 / p99",
            lambda c: f"{fmt_s(c['latency_p50'])} / {fmt_s(c['latency_p99'])}",
        ),
        *tenths_table(
            rows, "Master memory (RSS) at the end of each tenth", lambda c: fmt_bytes(c["rss"])
        ),
        *tenths_table(
            rows,
            "Weight files on disk at the end of each tenth (apparent size)",
            lambda c: f"{fmt_n(c['weights_files'])} ({fmt_bytes(c['weights_apparent'])})",
        ),
    ]
    return (
        "\n".join([*head, *main_table(rows), "", *tenths, "**Stages**", "", *stages_table(rows)])
        + "\n"
    )


def series(
    rows: list[dict[str, Any]],
) -> list[tuple[str, str, dict[str, list[tuple[float, float]]]]]:
    """(title, unit, {label: [(workers, value)]}) of the plot's two panels, measured values only."""

    def pick(get) -> list[tuple[float, float]]:
        points = []
        for r in rows:
            try:
                v = get(r)
            except (KeyError, TypeError):
                v = None
            if v:
                points.append((float(r["workers"]), float(v)))
        return points

    sizes = {
        "results.json": pick(lambda r: r["files"]["results_json"]),
        "store": pick(lambda r: r["master"].get("store_bytes") or r["files"]["store"]),
        "MLPerf log": pick(lambda r: r["files"]["mlperf_log"]),
        "report HTML": pick(lambda r: r["files"]["report_html"]),
        "weights peak (apparent)": pick(lambda r: r["master"]["weights_peak"]["apparent"]),
    }
    times = {
        "master (own time)": pick(
            lambda r: r["master"]["master_s"] if r["stages"]["master"] == "ok" else None
        ),
        "results.json": pick(lambda r: r["results_json"]["build_s"] + r["results_json"]["write_s"]),
        "report": pick(lambda r: r["report"]["seconds"] if r["report"]["passed"] else None),
        "verify": pick(lambda r: r["verify"]["seconds"]),
        "rank": pick(lambda r: r["rank"]["seconds"] if r["rank"]["passed"] else None),
    }
    return [("artefact sizes", "bytes", sizes), ("stage times", "seconds", times)]


def plot_matplotlib(panels, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(panels), figsize=(6 * len(panels), 4.5))
    for ax, (title, unit, lines) in zip(axes, panels, strict=True):
        for label, points in lines.items():
            if points:
                ax.plot(*zip(*points, strict=True), marker="o", label=label)
        ax.set(xscale="log", yscale="log", xlabel="workers", ylabel=unit, title=title)
        ax.grid(True, which="both", alpha=0.3)
        if any(lines.values()):
            ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _decades(values: list[float]) -> tuple[int, int]:
    lo, hi = math.floor(math.log10(min(values))), math.ceil(math.log10(max(values)))
    return lo, max(hi, lo + 1)


def svg_panel(
    title: str, unit: str, lines: dict[str, list[tuple[float, float]]], left: int
) -> list[str]:
    """One log-log panel, ``left`` pixels from the figure's left edge."""
    w, h, m = 460, 340, 60
    points = [p for ps in lines.values() for p in ps] or [(1.0, 1.0)]
    (x0, x1), (y0, y1) = _decades([p[0] for p in points]), _decades([p[1] for p in points])

    def xy(x: float, y: float) -> tuple[float, float]:
        return (
            left + m + (math.log10(x) - x0) / (x1 - x0) * (w - 2 * m),
            h - m - (math.log10(y) - y0) / (y1 - y0) * (h - 2 * m),
        )

    out = [
        f'<text x="{left + w / 2}" y="20" text-anchor="middle" font-size="14">{title}</text>',
        f'<rect x="{left + m}" y="{m}" width="{w - 2 * m}" height="{h - 2 * m}" '
        'fill="none" stroke="#444"/>',
        f'<text x="{left + w / 2}" y="{h - 15}" text-anchor="middle" font-size="11">workers</text>',
        f'<text x="{left + 12}" y="{h / 2}" font-size="11" text-anchor="middle" '
        f'transform="rotate(-90 {left + 12} {h / 2})">{unit}</text>',
    ]
    for k in range(x0, x1 + 1):
        x, _ = xy(10.0**k, 10.0**y0)
        out.append(
            f'<text x="{x:.1f}" y="{h - m + 15}" text-anchor="middle" font-size="10">1e{k}</text>'
        )
    for k in range(y0, y1 + 1):
        _, y = xy(10.0**x0, 10.0**k)
        out.append(
            f'<line x1="{left + m}" x2="{left + w - m}" y1="{y:.1f}" y2="{y:.1f}" stroke="#ddd"/>'
        )
        out.append(
            f'<text x="{left + m - 4}" y="{y + 3:.1f}" text-anchor="end" font-size="10">'
            f"1e{k}</text>"
        )
    for i, (label, ps) in enumerate(lines.items()):
        color = COLORS[i % len(COLORS)]
        coords = [xy(x, y) for x, y in ps]
        if len(coords) > 1:
            path = " ".join(f"{x:.1f},{y:.1f}" for x, y in coords)
            out.append(f'<polyline points="{path}" fill="none" stroke="{color}"/>')
        out += [f'<circle cx="{x:.1f}" cy="{y:.1f}" r="3" fill="{color}"/>' for x, y in coords]
        out.append(
            f'<text x="{left + m + 6}" y="{m + 14 + 13 * i}" font-size="10" fill="{color}">'
            f"{label}</text>"
        )
    return out


def plot_svg(panels, path: Path) -> None:
    body = [
        line for i, (t, u, lines) in enumerate(panels) for line in svg_panel(t, u, lines, 460 * i)
    ]
    path.write_text(
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{460 * len(panels)}" height="340">\n'
        + "\n".join(body)
        + "\n</svg>\n"
    )


def plot(rows: list[dict[str, Any]], out: Path) -> Path:
    """The plot, as PNG with matplotlib, else as SVG; returns its path."""
    panels = series(rows)
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        plot_svg(panels, out / "rehearsal.svg")
        return out / "rehearsal.svg"
    plot_matplotlib(panels, out / "rehearsal.png")
    return out / "rehearsal.png"


def write(rows: list[dict[str, Any]], meta: dict[str, Any], out: Path) -> None:
    """rehearsal.md, rehearsal.json and the plot, into ``out``."""
    (out / "rehearsal.md").write_text(markdown(rows, meta))
    (out / "rehearsal.json").write_text(
        json.dumps({"meta": meta, "rows": rows}, indent=1, sort_keys=True)
    )
    plot(rows, out)
