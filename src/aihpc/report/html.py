"""Build the self-contained HTML page of a run report.

:func:`render_html` turns the parsed ``results.json`` and the PNG bytes of the
plots into one HTML document: inline CSS, images as base64 ``data:`` URIs, no
scripts, fonts or links, so it opens offline.  Every string taken from the
results goes through :func:`aihpc.report.markup.esc` (``html.escape``).
"""

from __future__ import annotations

import base64
from collections import Counter
from typing import Any

from aihpc.base.fmt import (
    NA,
    as_number,
    format_fraction,
    format_percent,
    format_seconds,
    format_si,
    format_value,
)
from aihpc.nas.lm_spec import is_lm_arch
from aihpc.records.energy import energy_text
from aihpc.report.digest_views import ancestry_note
from aihpc.report.lineage import ancestry_html, build_lineage, lineage_html
from aihpc.report.machine import configuration, environment, peak_card, peaks, section
from aihpc.report.markup import CSS, card, esc, figure_card, kv_table, no_data
from aihpc.report.quality import LOSS, ReportQuality, loss_floor, quality_for
from aihpc.report.trials_table import next_token_accuracy, trial_count, trial_list, trials_section
from aihpc.results.read import trial_arch


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
        *(_loss_cards(results) if quality is LOSS else _accuracy_cards(results)),
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


def _accuracy_cards(results: dict[str, Any]) -> list[str]:
    """An image run's error and best accuracy."""
    score = section(results, "score")
    min_acc = as_number(score.get("min_accuracy"))
    return [
        card("Error", format_percent(score.get("error_percent"))),
        card(
            "Best accuracy",
            format_fraction(score.get("best_accuracy"), 2),
            " · ".join(_accuracy_notes(results, min_acc)),
        ),
    ]


def _loss_cards(results: dict[str, Any]) -> list[str]:
    """A language-model run's best validation loss, beside the floor (the best loss any model can
    reach, where known), the gap to it, bits per byte (byte-level text), the maximum of a valid
    run, and the unigram loss the regulated score measures from."""
    score = section(results, "score")
    best = as_number(score.get(LOSS.best_key))
    floor = loss_floor(results)
    gap = as_number(score.get("gap_to_floor"))
    if gap is None and best is not None and floor is not None:
        gap = best - floor
    notes = ["floor unknown" if floor is None else f"floor {floor:.4f}"]
    if gap is not None:
        notes.append(f"gap {gap:.4f}")
    bits = as_number(score.get("bits_per_byte"))
    if bits is not None:
        notes.append(f"{bits:.3f} bits/byte")
    for key, word in (("max_val_loss", "maximum"), ("unigram_loss", "unigram")):
        value = as_number(score.get(key))
        if value is not None:
            notes.append(f"{word} {value:.4f}")
    return [card("Best validation loss", LOSS.text(best), " · ".join(notes))]


def _accuracy_notes(results: dict[str, Any], min_acc: float | None) -> list[str]:
    """The minimum for a valid run, and the task's ceiling where it is known."""
    notes = [f"minimum {format_fraction(min_acc, 0)}"] if min_acc is not None else []
    data = results.get("data")
    ceiling = data.get("ceiling") if isinstance(data, dict) else None
    oracle = as_number(ceiling.get("oracle_accuracy")) if isinstance(ceiling, dict) else None
    if oracle is not None:
        notes.append(f"task ceiling {format_fraction(oracle, 1)}–100%")
    return notes


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


def _cnn_rows(arch: dict[str, Any]) -> list[tuple[str, str]]:
    """A CNN's layer count and layer types."""
    count, kinds = _layer_summary(arch)
    return [("layers", format_value(count)), ("layer types", kinds)]


#: The fields of a language-model spec that :func:`_lm_rows` shows.
_LM_SHOWN = {"blocks", "width", "context", "vocab_size", "head_dim"}


def _lm_rows(arch: dict[str, Any]) -> list[tuple[str, str]]:
    """A language model's blocks, width, context, vocabulary, and each block's heads and MLP
    width (:class:`aihpc.nas.lm_spec.LMSpec`)."""
    blocks = [b for b in arch.get("blocks") or [] if isinstance(b, dict)]
    heads = ", ".join(format_value(b.get("heads")) for b in blocks) or NA
    return [
        ("blocks", format_value(len(blocks))),
        ("width", format_value(arch.get("width"))),
        ("context", f"{format_value(arch.get('context'))} tokens"),
        ("vocabulary", f"{format_value(arch.get('vocab_size'))} tokens"),
        ("heads per block", f"{heads} (head dim {format_value(arch.get('head_dim'))})"),
        ("MLP widths", ", ".join(format_value(b.get("mlp_hidden")) for b in blocks) or NA),
    ]


def _best_architecture(results: dict[str, Any]) -> str:
    quality = quality_for(results)
    best = best_trial(results)
    if best is None:
        return no_data(f"no trial reached a {quality.val_label}")
    arch = trial_arch({t.get("id"): t for t in trial_list(results)}, best.get("id")) or {}
    language = is_lm_arch(arch)
    rows = [
        ("trial", format_value(best.get("id"))),
        (f"best val {quality.short}", quality.text(quality.value(best))),
    ]
    if quality is LOSS:
        rows.append(("next-token acc", format_fraction(next_token_accuracy(best, quality), 1)))
    rows += _lm_rows(arch) if language else _cnn_rows(arch)
    rows += [
        (
            "parameters",
            format_si(best.get("num_params")) + f" ({format_value(best.get('num_params'))})",
        ),
        ("architecture hash", format_value(best.get("arch_hash"))),
        ("lineage (seed → best)", " → ".join(str(i) for i in build_lineage(results).ancestry)),
        ("hyperparameters", format_value(best.get("hparams") or {})),
    ]
    shown = _LM_SHOWN if language else {"layers", "nodes", "blocks"}
    rows += [(f"arch.{k}", format_value(v)) for k, v in sorted(arch.items()) if k not in shown]
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
