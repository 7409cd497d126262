"""Build the self-contained HTML page of a run report.

:func:`render_html` turns the run's results (:class:`~aihpc.report.digest.ReportRun`) and
the PNG bytes of the plots into one HTML document: inline CSS, images as base64 ``data:`` URIs, no
scripts, fonts or links, so it opens offline.  Every string taken from the
results goes through :func:`aihpc.report.markup.esc` (``html.escape``).
"""

from __future__ import annotations

import base64

from aihpc.base.fmt import NA, format_fraction, format_seconds, format_si, format_value
from aihpc.records.codec import value_or_none
from aihpc.records.energy import EnergyRecord, energy_text
from aihpc.report.digest import ReportRun
from aihpc.report.digest_views import ancestry_note
from aihpc.report.lineage import ancestry_html, lineage_html
from aihpc.report.machine import configuration, environment, peak_card, peaks
from aihpc.report.markup import CSS, card, esc, figure_card, kv_table, no_data
from aihpc.report.trials_table import hparams_text, next_token_accuracy, trials_section
from aihpc.results.read import architecture
from aihpc.tasks.quality import ReportQuality


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


def _header(run: ReportRun) -> str:
    score = run.head.score
    if score.valid:
        validity, validity_css, validity_note = "valid", "valid", ""
    else:
        validity, validity_css = "INVALID", "invalid"
        validity_note = score.invalid_reason or "no reason given"
    counts = (
        f"{score.trials_completed} completed, {score.trials_failed} failed, "
        f"{score.trials_diverged} diverged"
    )
    unrepeatable = value_or_none(score.not_repeatable)
    cards = [
        figure_card(
            "Score",
            format_si(score.ops_per_second, "OPS"),
            f"{format_si(score.ops)} operations in {format_seconds(score.wall_seconds)}",
            unrepeatable,
            "main",
        ),
        figure_card(
            "Regulated score",
            format_si(score.regulated_score, "OPS"),
            run.quality.regulated,
            unrepeatable,
        ),
        *(card(title, value, note) for title, value, note in _headline(run)),
        card("Result", validity, validity_note, value_css=validity_css),
        card("Wall time", format_seconds(score.wall_seconds)),
        peak_card(run),
        card("Trials", f"{run.trial_count:,}", counts),
        _energy_card(value_or_none(run.head.energy)),
    ]
    return (
        f'<h1>aihpc run report</h1><p class="sub">run <code>{esc(run.head.run_id or NA)}</code> · '
        f'aihpc {esc(run.head.aihpc_version or NA)}</p><div class="cards">{"".join(cards)}</div>'
    )


def _headline(run: ReportRun) -> list[tuple[str, str, str]]:
    """The cards of the run's quality (its task's)."""
    return run.quality.headline(run.head.score, run.data)


def _energy_card(energy: EnergyRecord | None) -> str:
    """GOPS/W beside the score (as Green500 gives GFLOPS/W), with the joules and watts it divides
    by."""
    if energy is None:
        return card("Energy", "not measured", "results written before aihpc measured energy")
    total = energy.total
    if total.joules is None:
        return card("Energy", "not measured", energy.reason or "no reason recorded")
    note = f"{format_si(total.joules, 'J')} at {format_si(total.watts, 'W')} average"
    gops = total.gops_per_watt
    return card("GOPS/W", NA if gops is None else f"{gops:.3g}", note)


def _energy(energy: EnergyRecord | None) -> str:
    """Every device's measured energy (or why not), and the total the GOPS/W divides by."""
    if energy is None:
        return no_data("energy not measured: results written before aihpc measured energy")
    rows = []
    for d in energy.devices:
        where = f"{d.host} {d.device} ({d.source})"
        if d.joules is None:
            rows.append((where, f"not measured: {d.reason}"))
        else:
            rows.append(
                (
                    where,
                    f"{format_si(d.joules, 'J')}, {format_si(d.watts, 'W')} average, "
                    f"{format_value(d.samples)} samples, longest gap "
                    f"{format_seconds(value_or_none(d.max_interval_s))}",
                )
            )
    rows.append(("total", energy_text(energy)))
    total = energy.total
    if total.ops_per_joule is not None:
        rows.append(
            (
                "operations per joule",
                f"{format_si(total.ops_per_joule, 'OP/J')} = {total.gops_per_watt:.3g} GOPS/W",
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


def _best_architecture(run: ReportRun) -> str:
    quality = run.quality
    best = run.best_trial()
    if best is None:
        return no_data(f"no trial reached a {quality.val_label}")
    arch = architecture(run.by_id(), best.id) or {}
    rows = [
        ("trial", str(best.id)),
        (f"best val {quality.short}", quality.text(best.best(quality.trial_key))),
    ]
    if quality.epoch_accuracy:
        rows.append(("next-token acc", format_fraction(next_token_accuracy(best, quality), 1)))
    rows += [
        ("parameters", format_si(best.num_params) + f" ({format_value(best.num_params)})"),
        ("architecture hash", best.arch_hash),
        ("lineage (seed → best)", " → ".join(str(i) for i in run.lineage.ancestry)),
        ("hyperparameters", hparams_text(best)),
    ]
    rows += run.task.arch_rows(arch)
    return kv_table(rows)


def _lineage_section(run: ReportRun, png: bytes | None) -> str:
    figure = ""
    if png:
        data = base64.b64encode(png).decode("ascii")
        figure = (
            f'<figure><img src="data:image/png;base64,{data}" alt="Search lineage">'
            f"<figcaption>Each trial at its id and best {run.quality.val_label}, joined "
            "to the trial it was morphed from and coloured by the morphism that made it."
            "</figcaption></figure>"
        )
    if run.digest is not None:
        return figure + ancestry_note(run.digest) + ancestry_html(run.lineage)
    return figure + lineage_html(run.lineage)


def render_html(run: ReportRun, images: dict[str, bytes | None], extra: str = "") -> str:
    """The full report page for ``run`` with ``images`` (plot key -> PNG bytes or None);
    ``extra``: more sections (HTML) after the trials."""
    title = f"aihpc report {run.head.run_id or ''}".strip()
    body = "".join(
        [
            _header(run),
            '<div class="grid2"><div><h2>Environment</h2>',
            environment(run),
            "<h2>Measured peak</h2>",
            peaks(run),
            "<h2>Energy</h2>",
            _energy(value_or_none(run.head.energy)),
            "</div><div><h2>Configuration</h2>",
            configuration(run),
            "</div></div>",
            _plots(images, run.quality),
            "<h2>Best trial</h2>",
            _best_architecture(run),
            '<h2 id="lineage">Search lineage</h2>',
            _lineage_section(run, images.get("lineage")),
            "<h2>Trials</h2>",
            trials_section(run),
            extra,
        ]
    )
    return (
        f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{esc(title)}</title><style>{CSS}</style></head>"
        f"<body>{body}</body></html>\n"
    )
