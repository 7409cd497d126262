"""Build the self-contained HTML page of a run report.

:func:`render_html` turns the parsed ``results.json`` and the PNG bytes of the
plots into one HTML document: inline CSS, images as base64 ``data:`` URIs, no
scripts, fonts or links, so it opens offline.  Every string taken from the
results goes through :func:`aihpc.report.markup.esc` (``html.escape``).
"""

from __future__ import annotations

import base64
import statistics
from collections import Counter
from typing import Any

from aihpc.fmt import (
    NA,
    as_number,
    format_fraction,
    format_percent,
    format_seconds,
    format_si,
    format_value,
)
from aihpc.records.energy import energy_text
from aihpc.records.results import trial_arch
from aihpc.report.digest_views import ancestry_note
from aihpc.report.lineage import ancestry_html, build_lineage, lineage_html
from aihpc.report.markup import CSS, card, esc, kv_table, no_data
from aihpc.report.trials_table import trial_count, trial_list, trials_section

#: (plot key, title, caption) in page order.
PLOT_SECTIONS = (
    (
        "timeline",
        "Score and accuracy over time",
        "Operations per second so far and the best validation accuracy reached, sampled during the "
        "run.",
    ),
    (
        "ops",
        "Operations per trial",
        "All counted operations (training + evaluation) of each trial.",
    ),
    (
        "workers",
        "Worker timeline",
        "Each bar is one trial on one worker, from start to end; gaps are idle time.",
    ),
    (
        "phases",
        "Phase breakdown",
        "Seconds spent in each phase, summed over all trials and per trial.",
    ),
)

# --------------------------------------------------------------------------- sections


def _section(data: dict[str, Any], key: str) -> dict[str, Any]:
    """``data[key]`` where it is a dict (a section of results.json), else an empty one."""
    value = data.get(key)
    return value if isinstance(value, dict) else {}


def _header(results: dict[str, Any]) -> str:
    score = _section(results, "score")
    run_id = results.get("run_id", NA)
    version = results.get("aihpc_version", NA)
    valid = score.get("valid")
    if valid is True:
        validity, validity_css, validity_note = "valid", "valid", ""
    elif valid is False:
        reason = score.get("invalid_reason")
        validity, validity_css = "INVALID", "invalid"
        validity_note = str(reason) if reason else "no reason given"
    else:
        validity, validity_css, validity_note = NA, "", ""
    min_acc = as_number(score.get("min_accuracy"))
    peak = as_number(score.get("peak_flops_per_s"))
    peak_note = _peak_note(results, peak)
    counts = [
        f"{score[k]} {label}"
        for k, label in (
            ("trials_completed", "completed"),
            ("trials_failed", "failed"),
            ("trials_diverged", "diverged"),
        )
        if score.get(k) is not None
    ]
    cards = [
        card(
            "Score",
            format_si(score.get("ops_per_second"), "OPS"),
            f"{format_si(score.get('ops'))} operations in "
            f"{format_seconds(score.get('wall_seconds'))}",
            "main",
        ),
        card(
            "Regulated score",
            format_si(score.get("regulated_score"), "OPS"),
            "OPS × |ln(1 − accuracy)|",
        ),
        card("Error", format_percent(score.get("error_percent"))),
        card(
            "Best accuracy",
            format_fraction(score.get("best_accuracy"), 2),
            " · ".join(_accuracy_notes(results, min_acc)),
        ),
        card("Result", validity, validity_note, value_css=validity_css),
        card("Wall time", format_seconds(score.get("wall_seconds"))),
        card("Share of peak", format_fraction(score.get("peak_fraction")), peak_note),
        card("Trials", f"{trial_count(results):,}", ", ".join(counts)),
        _energycard(results.get("energy")),
    ]
    return (
        f'<h1>aihpc run report</h1><p class="sub">run <code>{esc(run_id)}</code> · '
        f'aihpc {esc(version)}</p><div class="cards">{"".join(cards)}</div>'
    )


def _peak_note(results: dict[str, Any], used: float | None) -> str:
    """What the share of peak divides by: the total peak of all workers measured at once."""
    if used is None:
        return "no peak measured"
    peak = _section(results, "peak")
    workers = peak.get("workers")
    if as_number(peak.get("total_flops_per_s")) is not None and as_number(workers) is not None:
        return (
            f"of {format_si(used, 'FLOP/s')}, the total measured peak of "
            f"{format_value(workers)} workers at once"
        )
    return f"of {format_si(used, 'FLOP/s')} measured peak"


def _accuracy_notes(results: dict[str, Any], min_acc: float | None) -> list[str]:
    """The minimum for a valid run, and the task's ceiling where it is known."""
    notes = [f"minimum {format_fraction(min_acc, 0)}"] if min_acc is not None else []
    data = results.get("data")
    ceiling = data.get("ceiling") if isinstance(data, dict) else None
    oracle = as_number(ceiling.get("oracle_accuracy")) if isinstance(ceiling, dict) else None
    if oracle is not None:
        notes.append(f"task ceiling {format_fraction(oracle, 1)}–100%")
    return notes


def _gpu_text(gpus: Any) -> str:
    if not gpus:
        return "none"
    if not isinstance(gpus, list):
        return format_value(gpus)
    names = []
    for gpu in gpus:
        if isinstance(gpu, dict):
            names.append(str(gpu.get("name") or format_value(gpu)))
        else:
            names.append(str(gpu))
    counted = Counter(names)
    return ", ".join(f"{n} × {name}" if n > 1 else name for name, n in counted.items())


def _environment(results: dict[str, Any]) -> str:
    env = _section(results, "environment")
    if not env:
        return no_data("no environment recorded")
    commit = env.get("git_commit")
    dirty = env.get("git_dirty")
    commit_text = format_value(commit) + (
        " (dirty)" if dirty else " (clean)" if dirty is False else ""
    )
    main = [
        ("host", format_value(env.get("hostname"))),
        ("CPU", format_value(env.get("cpu_model"))),
        ("GPUs", _gpu_text(env.get("gpus"))),
        ("torch", format_value(env.get("torch_version"))),
        ("git commit", commit_text),
    ]
    shown = {"hostname", "cpu_model", "gpus", "torch_version", "git_commit", "git_dirty"}
    rest = [(str(k), format_value(v)) for k, v in sorted(env.items()) if k not in shown]
    return kv_table(main + rest)


def _configuration(results: dict[str, Any]) -> str:
    config = _section(results, "config")
    if not config:
        return no_data("no configuration recorded")
    return kv_table([(str(k), format_value(v)) for k, v in sorted(config.items())])


def _peaks(results: dict[str, Any]) -> str:
    """The total peak the share of peak uses (and each worker's part of it), before and after the
    run."""
    peak = _section(results, "peak")
    total = as_number(peak.get("total_flops_per_s"))
    if total is None:  # results of early versions: one entry per dtype
        rows = [
            (
                " on ".join(str(x) for x in (entry.get("dtype", name), entry.get("device")) if x),
                format_si(entry.get("flops_per_s"), "FLOP/s"),
            )
            for name, entry in sorted(peak.items())
            if isinstance(entry, dict)
        ]
        rows += _share_rows(results, None)
        return kv_table(rows) if rows else no_data("no peak measured")
    what = " on ".join(str(x) for x in (peak.get("dtype"), peak.get("device")) if x) or "matmul"
    rows = [
        (
            f"total: {what}, {format_value(peak.get('workers'))} workers at once, before the run "
            "(the share of peak uses this)",
            format_si(total, "FLOP/s"),
        )
    ]
    rows += _worker_rows(peak)
    if as_number(peak.get("spread")) is not None:
        rows.append(("largest spread of a worker's repeats", format_fraction(peak.get("spread"))))
    rows += _share_rows(results, total)
    after = _section(peak, "after")
    if as_number(after.get("total_flops_per_s")) is not None:
        rows.append(("total after the run", format_si(after.get("total_flops_per_s"), "FLOP/s")))
        rows.append(("drift", format_fraction(peak.get("drift"))))
    if peak.get("drift_warning"):
        rows.append(("warning", str(peak["drift_warning"])))
    return kv_table(rows)


def _energycard(energy: Any) -> str:
    """GOPS/W beside the score (as Green500 gives GFLOPS/W), with the joules and watts it divides
    by."""
    total = _section(energy, "total") if isinstance(energy, dict) else {}
    gops = as_number(total.get("gops_per_watt"))
    if as_number(total.get("joules")) is None:
        reason = (
            energy.get("reason")
            if isinstance(energy, dict)
            else "results written before aihpc measured energy"
        )
        return card("Energy", "not measured", str(reason or "no reason recorded"))
    note = f"{format_si(total['joules'], 'J')} at {format_si(total.get('watts'), 'W')} average"
    return card("GOPS/W", NA if gops is None else f"{gops:.3g}", note)


def _energy(results: dict[str, Any]) -> str:
    """Every device's measured energy (or why not), and the total the GOPS/W divides by."""
    energy = results.get("energy")
    if not isinstance(energy, dict):
        return no_data("energy not measured: results written before aihpc measured energy")
    rows = []
    for d in energy.get("devices") or []:
        if not isinstance(d, dict):
            continue
        where = f"{d.get('host', '?')} {d.get('device', '?')} ({d.get('source', '?')})"
        if as_number(d.get("joules")) is None:
            rows.append((where, f"not measured: {d.get('reason')}"))
        else:
            rows.append(
                (
                    where,
                    f"{format_si(d['joules'], 'J')}, {format_si(d.get('watts'), 'W')} average, "
                    f"{format_value(d.get('samples'))} samples, longest gap "
                    f"{format_seconds(d.get('max_interval_s'))}",
                )
            )
    total = _section(energy, "total")
    rows.append(("total", energy_text(energy)))
    if as_number(total.get("ops_per_joule")) is not None:
        rows.append(
            (
                "operations per joule",
                f"{format_si(total['ops_per_joule'], 'OP/J')} "
                f"= {total['gops_per_watt']:.3g} GOPS/W",
            )
        )
    return kv_table(rows)


def _worker_rows(peak: dict[str, Any]) -> list[tuple[str, str]]:
    """Each worker's part of the total (measured at the same time); min / median / max beyond 8
    workers."""
    measured = [
        as_number(w.get("flops_per_s")) for w in peak.get("per_worker") or [] if isinstance(w, dict)
    ]
    values = [v for v in measured if v is not None]
    if len(values) <= 8:
        return [
            (f"worker {n} of {len(values)}, part of the total", format_si(v, "FLOP/s"))
            for n, v in enumerate(values, 1)
        ]
    return [
        (
            f"per worker, {len(values)} workers (min / median / max)",
            " / ".join(
                format_si(v, "FLOP/s")
                for v in (min(values), statistics.median(values), max(values))
            ),
        )
    ]


def _share_rows(results: dict[str, Any], total: float | None) -> list[tuple[str, str]]:
    """How the share of peak is computed, and a warning if the score used another peak than the
    total."""
    score = _section(results, "score")
    used = as_number(score.get("peak_flops_per_s"))
    if used is None or as_number(score.get("peak_fraction")) is None:
        return []
    rows = [
        (
            "share of peak",
            f"{format_si(score.get('ops_per_second'), 'OPS')} ÷ {format_si(used, 'FLOP/s')}"
            f" = {format_fraction(score.get('peak_fraction'))}",
        )
    ]
    if total is not None and abs(used - total) > 1e-9 * total:
        rows.append(
            (
                "warning",
                f"the score's share of peak used {format_si(used, 'FLOP/s')}, "
                f"not the measured total {format_si(total, 'FLOP/s')}",
            )
        )
    return rows


def _plots(images: dict[str, bytes | None]) -> str:
    parts = []
    for key, title, caption in PLOT_SECTIONS:
        png = images.get(key)
        parts.append(f"<h2>{esc(title)}</h2>")
        if png:
            data = base64.b64encode(png).decode("ascii")
            parts.append(
                f'<figure><img src="data:image/png;base64,{data}" alt="{esc(title)}">'
                f"<figcaption>{esc(caption)}</figcaption></figure>"
            )
        else:
            parts.append(no_data(f"no data for this plot ({caption[0].lower() + caption[1:]})"))
    return "".join(parts)


def best_trial(results: dict[str, Any]) -> dict[str, Any] | None:
    """The trial with the highest ``best_val_accuracy`` (lowest id on ties), or ``None``."""
    scored = [t for t in trial_list(results) if as_number(t.get("best_val_accuracy")) is not None]
    if not scored:
        return None
    return max(scored, key=lambda t: as_number(t.get("best_val_accuracy")) or 0.0)


def _layer_summary(arch: dict[str, Any]) -> tuple[int | None, str]:
    """(layer count, "conv × 3, linear × 1") from an ArchSpec dict; tolerant of its exact shape."""
    layers = next(
        (arch[k] for k in ("layers", "nodes", "blocks") if isinstance(arch.get(k), list)), None
    )
    if layers is None:
        return None, NA
    kinds = []
    for layer in layers:
        if isinstance(layer, dict):
            kinds.append(str(next((layer[k] for k in ("type", "kind", "op") if k in layer), "?")))
        else:
            kinds.append(str(layer))
    counted = Counter(kinds)
    return len(layers), ", ".join(f"{kind} × {n}" for kind, n in counted.items()) or "none"


def _best_architecture(results: dict[str, Any]) -> str:
    best = best_trial(results)
    if best is None:
        return no_data("no trial reached a validation accuracy")
    arch = trial_arch({t.get("id"): t for t in trial_list(results)}, best.get("id")) or {}
    count, kinds = _layer_summary(arch)
    rows = [
        ("trial", format_value(best.get("id"))),
        ("best val accuracy", format_fraction(best.get("best_val_accuracy"), 2)),
        ("layers", format_value(count)),
        ("layer types", kinds),
        (
            "parameters",
            format_si(best.get("num_params")) + f" ({format_value(best.get('num_params'))})",
        ),
        ("architecture hash", format_value(best.get("arch_hash"))),
        ("lineage (seed → best)", " → ".join(str(i) for i in build_lineage(results).ancestry)),
        ("hyperparameters", format_value(best.get("hparams") or {})),
    ]
    layer_keys = {"layers", "nodes", "blocks"}
    rows += [(f"arch.{k}", format_value(v)) for k, v in sorted(arch.items()) if k not in layer_keys]
    return kv_table(rows)


def _lineage_section(results: dict[str, Any], png: bytes | None) -> str:
    figure = ""
    if png:
        data = base64.b64encode(png).decode("ascii")
        figure = (
            f'<figure><img src="data:image/png;base64,{data}" alt="Search lineage">'
            "<figcaption>Each trial at its id and best validation accuracy, joined to the trial it "
            "was "
            "morphed from and coloured by the morphism that made it.</figcaption></figure>"
        )
    if "digest" in results:
        lineage = build_lineage(results)
        return figure + ancestry_note(results["digest"]) + ancestry_html(lineage)
    return figure + lineage_html(build_lineage(results))


def render_html(results: dict[str, Any], images: dict[str, bytes | None], extra: str = "") -> str:
    """The full report page for ``results`` with ``images`` (plot key -> PNG bytes or None);
    ``extra``: more sections (HTML) after the trials."""
    title = f"aihpc report {results.get('run_id', '')}".strip()
    body = "".join(
        [
            _header(results),
            '<div class="grid2"><div><h2>Environment</h2>',
            _environment(results),
            "<h2>Measured peak</h2>",
            _peaks(results),
            "<h2>Energy</h2>",
            _energy(results),
            "</div><div><h2>Configuration</h2>",
            _configuration(results),
            "</div></div>",
            _plots(images),
            "<h2>Best trial</h2>",
            _best_architecture(results),
            '<h2 id="lineage">Search lineage</h2>',
            _lineage_section(results, images.get("lineage")),
            "<h2>Trials</h2>",
            trials_section(results),
            extra,
        ]
    )
    return (
        f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{esc(title)}</title><style>{CSS}</style></head>"
        f"<body>{body}</body></html>\n"
    )
