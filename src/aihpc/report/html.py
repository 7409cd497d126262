"""Build the self-contained HTML page of a run report.

:func:`render_html` turns the parsed ``results.json`` and the PNG bytes of the
plots into one HTML document: inline CSS, images as base64 ``data:`` URIs, no
scripts, fonts or links, so it opens offline.  Every string taken from the
results goes through :func:`aihpc.report.markup.esc` (``html.escape``).
"""

from __future__ import annotations

import base64
from typing import Any

from aihpc.base.fmt import (
    NA,
    as_number,
    format_fraction,
    format_seconds,
    format_si,
    format_value,
)
from aihpc.records.energy import energy_text
from aihpc.report.digest_views import ancestry_note
from aihpc.report.lineage import ancestry_html, build_lineage, lineage_html
from aihpc.report.machine import configuration, environment, peak_card, peaks, section
from aihpc.report.markup import CSS, card, esc, figure_card, kv_table, no_data
from aihpc.report.quality import quality_for
from aihpc.report.trials_table import next_token_accuracy, trial_count, trial_list, trials_section
from aihpc.results.read import trial_arch
from aihpc.scoring.quality import ReportQuality
from aihpc.tasks import recorded_task


def plot_sections(quality: ReportQuality) -> tuple[tuple[str, str, str], ...]:
    """(plot key, title, caption) in page order, the timeline's in the run's quality."""
    timeline = (
        "timeline",
        f"Score and {quality.label} over time",
        f"Operations per second so far and the best {quality.val_label} reached, sampled during "
        "the run.",
    )
    return (timeline, *_OTHER_PLOTS)


#: The plots after the timeline: (plot key, title, caption) in page order.
_OTHER_PLOTS = (
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


def _header(results: dict[str, Any]) -> str:
    score = section(results, "score")
    quality = quality_for(results)
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
    counts = [
        f"{score[k]} {label}"
        for k, label in (
            ("trials_completed", "completed"),
            ("trials_failed", "failed"),
            ("trials_diverged", "diverged"),
        )
        if score.get(k) is not None
    ]
    unrepeatable = score.get("not_repeatable")
    cards = [
        figure_card(
            "Score",
            format_si(score.get("ops_per_second"), "OPS"),
            f"{format_si(score.get('ops'))} operations in "
            f"{format_seconds(score.get('wall_seconds'))}",
            unrepeatable,
            "main",
        ),
        figure_card(
            "Regulated score",
            format_si(score.get("regulated_score"), "OPS"),
            quality.regulated,
            unrepeatable,
        ),
        *(card(title, value, note) for title, value, note in quality.headline(results)),
        card("Result", validity, validity_note, value_css=validity_css),
        card("Wall time", format_seconds(score.get("wall_seconds"))),
        peak_card(results),
        card("Trials", f"{trial_count(results):,}", ", ".join(counts)),
        _energycard(results.get("energy")),
    ]
    return (
        f'<h1>aihpc run report</h1><p class="sub">run <code>{esc(run_id)}</code> · '
        f'aihpc {esc(version)}</p><div class="cards">{"".join(cards)}</div>'
    )


def _energycard(energy: Any) -> str:
    """GOPS/W beside the score (as Green500 gives GFLOPS/W), with the joules and watts it divides
    by."""
    total = section(energy, "total") if isinstance(energy, dict) else {}
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
    total = section(energy, "total")
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


def _plots(images: dict[str, bytes | None], quality: ReportQuality) -> str:
    parts = []
    for key, title, caption in plot_sections(quality):
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
    """The trial of the best value of the run's quality: the highest ``best_val_accuracy``, the
    lowest ``best_val_loss`` (lowest id on ties), or ``None``."""
    quality = quality_for(results)
    return quality.best(trial_list(results), quality.value)


def _best_architecture(results: dict[str, Any]) -> str:
    quality = quality_for(results)
    best = best_trial(results)
    if best is None:
        return no_data(f"no trial reached a {quality.val_label}")
    arch = trial_arch({t.get("id"): t for t in trial_list(results)}, best.get("id")) or {}
    rows = [
        ("trial", format_value(best.get("id"))),
        (f"best val {quality.short}", quality.text(quality.value(best))),
    ]
    if quality.epoch_accuracy:
        rows.append(("next-token acc", format_fraction(next_token_accuracy(best, quality), 1)))
    rows += [
        (
            "parameters",
            format_si(best.get("num_params")) + f" ({format_value(best.get('num_params'))})",
        ),
        ("architecture hash", format_value(best.get("arch_hash"))),
        ("lineage (seed → best)", " → ".join(str(i) for i in build_lineage(results).ancestry)),
        ("hyperparameters", format_value(best.get("hparams") or {})),
    ]
    rows += recorded_task(section(results, "config")).arch_rows(arch)
    return kv_table(rows)


def _lineage_section(results: dict[str, Any], png: bytes | None) -> str:
    figure = ""
    if png:
        data = base64.b64encode(png).decode("ascii")
        figure = (
            f'<figure><img src="data:image/png;base64,{data}" alt="Search lineage">'
            f"<figcaption>Each trial at its id and best {quality_for(results).val_label}, joined "
            "to the trial it was morphed from and coloured by the morphism that made it."
            "</figcaption></figure>"
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
            environment(results),
            "<h2>Measured peak</h2>",
            peaks(results),
            "<h2>Energy</h2>",
            _energy(results),
            "</div><div><h2>Configuration</h2>",
            configuration(results),
            "</div></div>",
            _plots(images, quality_for(results)),
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
